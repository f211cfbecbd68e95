"""Fake of FlagGems' `flag_gems.utils.libentry`: LibTuner, libtuner, LibEntry, libentry.

What matches upstream (and what zl_bench's plugins rely on):
- `LibTuner` subclasses `triton.runtime.Autotuner` and overrides `run()`: it
  computes a config key; on a miss it benchmarks the pruned configs and writes
  `self.cache[key]`; on a hit it only reads `self.cache[key]`.
- `self.cache` is backed by one sqlite file created when this module is
  imported (i.e. at `import flag_gems`): `FLAGGEMS_DB_URL` (`sqlite:///path`,
  whose folder must exist, as upstream's sqlite open needs), else `$FLAGGEMS_CACHE_DIR` (default `~/.flaggems`)
  `/config_cache/TunedConfig_<vendor>_triton_<maj>_<min>.db`. The first write of
  a key wins, so a warm cache silently pins the earlier run's pick.
- The tuner's timer is bound when the tuner is constructed (a reference to the
  `triton.testing.do_bench` of that moment), so patching `triton.testing` later
  does not change how LibTuner picks configs. Upstream binds
  do_bench_cudagraph; the fake binds do_bench because the CPU has no graphs.
- `LibEntry.kernel_cache` skips the tuner entirely after the first call per
  argument key.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import sqlite3
import threading
from pathlib import Path

import triton

from flag_gems.runtime import backend as _backend

_major, _minor = (int(p) for p in triton.__version__.split(".")[:2])


def config_cache_dir() -> Path:
    root = os.environ.get("FLAGGEMS_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".flaggems"
    path = base / "config_cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _db_path_from_env() -> Path:
    url = os.environ.get("FLAGGEMS_DB_URL")
    if url:
        prefix = "sqlite:///"
        if not url.startswith(prefix):
            raise ValueError(f"FLAGGEMS_DB_URL must look like {prefix}<path>, got {url!r}")
        path = Path(url[len(prefix):])
        if not path.parent.is_dir():   # upstream creates config_cache only for its default database
            raise sqlite3.OperationalError(f"unable to open database file {path}")
        return path
    name = f"TunedConfig_{_backend.vendor_name}_triton_{_major}_{_minor}.db"
    return config_cache_dir() / name


def _config_to_json(config: triton.Config) -> str:
    return json.dumps(
        {
            "kwargs": dict(config.kwargs),
            "num_warps": config.num_warps,
            "num_stages": config.num_stages,
            "num_ctas": getattr(config, "num_ctas", 1),
        },
        sort_keys=True,
    )


def _config_from_json(text: str) -> triton.Config:
    d = json.loads(text)
    return triton.Config(
        d["kwargs"], num_warps=d["num_warps"], num_stages=d["num_stages"], num_ctas=d["num_ctas"]
    )


class LibCache:
    """The process-wide sqlite store (one file, one table keyed by kernel table name)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._conn:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS tuned_config ("
                " table_name TEXT NOT NULL, key TEXT NOT NULL, config TEXT NOT NULL,"
                " PRIMARY KEY (table_name, key))"
            )

    def get(self, table: str, key: str):
        with self._lock:
            row = self._conn.execute(
                "SELECT config FROM tuned_config WHERE table_name=? AND key=?", (table, key)
            ).fetchone()
        return None if row is None else row[0]

    def put(self, table: str, key: str, value: str) -> None:
        # INSERT OR IGNORE: the first write of a key wins, as upstream.
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT OR IGNORE INTO tuned_config(table_name, key, config) VALUES (?, ?, ?)",
                (table, key, value),
            )

    def __getitem__(self, table: str) -> "ConfigCache":
        return ConfigCache(table, self)


class ConfigCache:
    """Mapping view key-tuple -> triton.Config of one kernel's table."""

    def __init__(self, table: str, store: LibCache):
        self.table_name = table
        self.store = store

    @staticmethod
    def _k(key) -> str:
        return repr(tuple(key))

    def get(self, key):
        text = self.store.get(self.table_name, self._k(key))
        return None if text is None else _config_from_json(text)

    def set(self, key, config) -> None:
        self.store.put(self.table_name, self._k(key), _config_to_json(config))

    def __contains__(self, key) -> bool:
        return self.store.get(self.table_name, self._k(key)) is not None

    def __getitem__(self, key):
        config = self.get(key)
        if config is None:
            raise KeyError(f"Key {key} not found in ConfigCache.")
        return config

    def __setitem__(self, key, config) -> None:
        self.set(key, config)


# Created at import, i.e. at `import flag_gems`: set the cache variables first.
libcache = LibCache(_db_path_from_env())


def _innermost(fn):
    while isinstance(fn, (triton.runtime.Autotuner, triton.runtime.Heuristics)):
        fn = fn.fn
    return fn


class LibTuner(triton.runtime.Autotuner):
    """Autotuner whose picks persist in the sqlite ConfigCache (see module docstring)."""

    def __init__(self, fn, arg_names, configs, key, reset_to_zero=None, restore_value=None,
                 pre_hook=None, post_hook=None, prune_configs_by=None, warmup=25, rep=100):
        bound_do_bench = triton.testing.do_bench  # bound now, on purpose

        def tuner_bench(kernel_call, quantiles):
            return bound_do_bench(kernel_call, warmup=warmup, rep=rep, quantiles=quantiles)

        super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value,
                         pre_hook=pre_hook, post_hook=post_hook,
                         prune_configs_by=prune_configs_by, do_bench=tuner_bench)
        self.__name__ = self.base_fn.__name__
        self.keys = key
        self.config_table_name = f"{self.__name__}_{self.kernel_hash}"
        self.cache = libcache[self.config_table_name]

    @property
    def kernel_hash(self) -> str:
        src = inspect.getsource(self.base_fn)
        configs = ",".join(str(c) for c in self.configs)
        return hashlib.md5(f"{src}{configs}".encode("utf-8")).hexdigest()[:32]

    def get_key(self, args):
        key = tuple(args[k] for k in self.keys if k in args)
        return key + tuple(str(v.dtype) for v in args.values() if hasattr(v, "dtype"))

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        if len(self.configs) > 1:
            all_args = {**self.nargs, **kwargs}
            _args = {k: v for k, v in all_args.items() if k in self.arg_names}
            config_key = self.get_key(_args)
            if config_key not in self.cache:
                pruned = self.prune_configs(kwargs)
                timings = {cfg: self._bench(*args, config=cfg, **kwargs) for cfg in pruned}
                best = min(timings, key=timings.get)
                self.cache[config_key] = best
                self.configs_timings = timings
                self.pre_hook({**self.nargs, **kwargs, **best.all_kwargs()}, reset_only=True)
            config = self.cache[config_key]
            # The store cannot hold pre_hooks: hand back the original Config object.
            for original in self.configs:
                if original.all_kwargs() == config.all_kwargs():
                    config = original
                    break
        else:
            config = self.configs[0]
        self.best_config = config
        full_nargs = {**self.nargs, **kwargs, **config.all_kwargs()}
        if config.pre_hook is not None:
            config.pre_hook(full_nargs)
        ret = self.fn.run(*args, **kwargs, **config.all_kwargs())
        self.nargs = None
        return ret


def libtuner(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None,
             pre_hook=None, post_hook=None, warmup=25, rep=100):
    """Decorator twin of upstream's `libtuner` (strategy/policy reduced to the default)."""

    def decorator(fn):
        return LibTuner(fn, fn.arg_names, configs, key, reset_to_zero, restore_value,
                        pre_hook=pre_hook, post_hook=post_hook,
                        prune_configs_by=prune_configs_by, warmup=warmup, rep=rep)

    return decorator


class LibEntry(triton.KernelInterface):
    """Per-argument-key dispatch cache in front of a (tuned) kernel.

    The first call for a key goes through the tuner chain and remembers the
    constexprs it chose; every later call with that key launches the innermost
    kernel directly, so the tuner's `run()` is never reached again.
    """

    def __init__(self, fn):
        self.fn = fn
        self.arg_names = fn.arg_names
        self.jit_function = _innermost(fn)
        chain = fn
        while isinstance(chain, (triton.runtime.Autotuner, triton.runtime.Heuristics)):
            if isinstance(chain, triton.runtime.Heuristics):
                # A cache hit would have to re-evaluate heuristics; the fake has none.
                raise TypeError("fake LibEntry supports Autotuner/LibTuner chains only")
            chain = chain.fn
        self.kernel_cache = {}
        self.lock = threading.Lock()

    @staticmethod
    def _arg_key(arg):
        if hasattr(arg, "data_ptr"):
            return (arg.dtype, arg.data_ptr() % 16 == 0)
        return (type(arg).__name__, arg)

    def key(self, args, kwargs):
        named = tuple(self._arg_key(a) for a in args)
        extra = tuple(sorted((k, self._arg_key(v)) for k, v in kwargs.items()
                             if k not in ("grid", "warmup")))
        return named + extra

    def run(self, *args, **kwargs):
        entry_key = self.key(args, kwargs)
        constexprs = self.kernel_cache.get(entry_key)
        if constexprs is None:
            with self.lock:
                ret = self.fn.run(*args, **kwargs)
                chosen = {}
                fn = self.fn
                while isinstance(fn, (triton.runtime.Autotuner, triton.runtime.Heuristics)):
                    if isinstance(fn, triton.runtime.Autotuner):
                        chosen.update(fn.best_config.all_kwargs())
                    fn = fn.fn
                self.kernel_cache[entry_key] = chosen
            return ret
        return self.jit_function.run(*args, **kwargs, **constexprs)


def libentry():
    def decorator(fn):
        return LibEntry(fn)

    return decorator
