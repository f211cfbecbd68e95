"""pytest plugin: record the config Triton's autotuner picked, or replay a recorded one.

Two runs of an A/B must execute the same kernel configs, otherwise the comparison
mixes "the change" with "a different autotune winner" (router_gemm moved 8 points
from that alone). Side A records, side B replays.

Mechanism. `Autotuner.run` (and the `run` of every subclass that defines its own,
such as FlagGems' `LibTuner`) is wrapped. For the duration of one call the tuner's
`self.cache` is swapped for a thin proxy, so the key is whatever the tuner itself
computed and looked up -- we never recompute it, which keeps us correct across
Triton 3.6 / 3.9 key layouts and LibTuner's strategy-normalised keys.

* record (`FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR`): after each call the config the
  tuner used is read back from `self.cache[key]`. Reading back, not diffing the
  cache's key set, matters: a warm cache (LibTuner's sqlite, Triton's disk cache)
  takes the cached branch and inserts no key, so a diff records nothing.
  Records are written at interpreter exit (atexit, atomic) so an exception or
  `sys.exit` mid-session still persists them. `os._exit` and fatal signals skip
  atexit: those runs keep only what an earlier process wrote.
* replay (`FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR`): the proxy answers every lookup of a
  recorded key with the recorded config, unconditionally. An "only if missing"
  guard would let a warm cache win and the run would tune itself while claiming
  to replay. A key without a record prints one
  `AUTOTUNE_REPLAY_FALLBACK op= kernel= key= reason=key_missing` and tunes live.
  `meta.json` beside the records names the backend; replay across backends is
  refused (`reason=backend_mismatch`).

`LibEntry.kernel_cache` skips the tuner after the first call per argument key, so
that first call is where the record is taken; the proxy sees it like any other.
Every outcome lands in run_identity.json `autotune_mode`.
"""

from __future__ import annotations

from zl import atomic
from zl.term import log as _term_log
import atexit
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

RECORD_DIR_ENV = "FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR"
REPLAY_DIR_ENV = "FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR"
# Set by _parallel_warmup_plugin after it merged the shards' picks into the record
# dir: this process records as usual but seeds every lookup from that merge.
PRESWEPT_ENV = "ZL_AUTOTUNE_PRESWEPT"
MARKER = "AUTOTUNE_REPLAY_FALLBACK"
META_SCHEMA = 1
_NAME = "[autotune-record-plugin]"

# Config attributes rebuilt through the constructor; anything else found on a
# Config (FlagTree adds warp-specialisation fields) is restored with setattr.
_SKIP_ATTRS = {"kwargs", "pre_hook"}


def _log(msg: str) -> None:
    _term_log(_NAME, msg)


def _op_name() -> str:
    return (os.environ.get("ZL_OP") or os.environ.get("FLAGGEMS_PERF_CURRENT_OP")
            or "unknown_op").strip()


def record_path(record_dir: str, op: Optional[str] = None) -> Path:
    return Path(record_dir) / f"{op or _op_name()}.json"


def _backend_name() -> str:
    try:
        from zl.backends import get_backend
        return get_backend().name
    except Exception:
        return os.environ.get("ZL_BACKEND", "").strip() or "cuda"


def _update_identity(**fields: Any) -> None:
    try:
        from zl.identity import update_identity
    except Exception as exc:  # the tree without _run_identity: still run, say so
        _log(f"run identity not updated ({type(exc).__name__}: {exc})")
        return
    try:
        update_identity(**fields)
    except Exception as exc:
        _log(f"run identity not updated ({type(exc).__name__}: {exc})")


# --------------------------------------------------------------------------- keys

def _atom(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(float(value))
    if hasattr(value, "item") and not hasattr(value, "shape"):  # numpy scalar
        try:
            return _atom(value.item())
        except Exception:
            pass
    return str(value)  # dtype objects and strings serialise the same: 'torch.float16'


def key_to_str(key: Any) -> str:
    """Process-stable text for an autotune key: atoms joined by commas, no spaces,
    so the key is one token inside a marker line. The empty key is '-'."""
    if not isinstance(key, (tuple, list)):
        key = (key,)
    text = ",".join(_atom(a).replace(" ", "") for a in key)
    return text or "-"


def kernel_name(tuner: Any) -> str:
    """`module.function` of the JIT function under the tuner. The module keeps two
    same-named kernels in different files apart (FlagGems has several `mm_kernel`)."""
    fn = getattr(tuner, "base_fn", None)
    if fn is None:
        fn = getattr(tuner, "fn", None)
        while fn is not None and not inspect.isfunction(fn) and hasattr(fn, "fn"):
            fn = fn.fn
    if fn is None:
        return type(tuner).__name__
    mod = getattr(fn, "__module__", "") or ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "kernel")
    return f"{mod}.{name}" if mod else name


# ------------------------------------------------------------------------ configs

def config_to_dict(cfg: Any) -> Dict[str, Any]:
    """Everything needed to rebuild `cfg`; callables are reduced to presence flags."""
    out: Dict[str, Any] = {"kwargs": {}}
    for k, v in dict(getattr(cfg, "kwargs", {}) or {}).items():
        out["kwargs"][str(k)] = _jsonable(v)
    for k, v in vars(cfg).items():
        if k in _SKIP_ATTRS or k.startswith("_") or callable(v):
            continue
        out[k] = _jsonable(v)
    out["pre_hook"] = getattr(cfg, "pre_hook", None) is not None
    return out


def record_dict(cfg: Any, candidates: Any = ()) -> Dict[str, Any]:
    """config_to_dict, with pre_hook presence taken from the tuner's own config list.

    Seen on the H200: LibTuner hands back configs rebuilt from its sqlite store
    without their hook (mm's host-TMA descriptor hook), and restores the hook from
    its config list when it launches. Recording the bare object said
    `pre_hook: false` for a kernel that ran with its hook, and a replay (which
    rebuilds from the same list) then looked like a different config.
    """
    out = config_to_dict(cfg)
    if out["pre_hook"]:
        return out
    bare = {k: v for k, v in out.items() if k != "pre_hook"}
    for cand in candidates or ():
        try:
            got = config_to_dict(cand)
        except Exception:
            continue
        if got["pre_hook"] and {k: v for k, v in got.items() if k != "pre_hook"} == bare:
            out["pre_hook"] = True
            break
    return out


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def _config_cls():
    import triton
    return triton.Config


def config_from_dict(d: Dict[str, Any], candidates: List[Any] = ()) -> Tuple[Any, Optional[str]]:
    """(Config, problem). A recorded config that equals one of the tuner's own is
    returned as that object, which restores its pre_hook; otherwise a fresh Config
    is built (an edited record may hold a config outside the search space). A
    record that had a pre_hook but matches nothing cannot be rebuilt faithfully:
    problem='pre_hook_lost' and the caller tunes live instead."""
    want = {k: v for k, v in d.items() if k != "pre_hook"}
    hooked = bool(d.get("pre_hook"))
    for cand in candidates or ():
        try:
            got = config_to_dict(cand)
        except Exception:
            continue
        # A hook-less record still matches a hooked candidate: LibTuner stores
        # configs without their hook and restores it the same way.
        if (not hooked or got["pre_hook"]) and \
                {k: v for k, v in got.items() if k != "pre_hook"} == want:
            return cand, None
    if hooked:
        return None, "pre_hook_lost"
    Config = _config_cls()
    params = set(inspect.signature(Config.__init__).parameters) - {"self", "kwargs", "pre_hook"}
    ctor = {k: v for k, v in want.items() if k in params}
    cfg = Config(dict(d.get("kwargs") or {}), **ctor)
    for k, v in want.items():
        if k not in params and k != "kwargs":
            try:
                setattr(cfg, k, v)
            except Exception:
                pass
    return cfg, None


# -------------------------------------------------------------------------- state

class _State:
    def __init__(self, op: str, mode: str, record_dir: str = "",
                 replay: Optional[Dict[str, Dict[str, Dict[str, Any]]]] = None,
                 replay_reason: str = "replay") -> None:
        self.op = op
        self.mode = mode                # "record" | "replay"
        self.record_dir = record_dir
        self.replay = replay            # {kernel: {keystr: cfgdict}} or None
        self.replay_reason = replay_reason
        self.records: Dict[str, Dict[str, Dict[str, Any]]] = {}
        self.seen_cfg: Dict[Tuple[str, str], int] = {}   # (kernel,key) -> id(config)
        self.fallback_keys: set = set()
        self.built: Dict[Tuple[str, str, int], Any] = {}  # rebuilt Config per tuner
        self.uncaptured: set = set()

    # replay side ------------------------------------------------------------
    def lookup(self, tuner: Any, kernel: str, keystr: str) -> Optional[Any]:
        if self.replay is None:
            return None
        entry = self.replay.get(kernel, {}).get(keystr)
        if entry is None:
            self.fallback(kernel, keystr, "key_missing")
            return None
        slot = (kernel, keystr, id(tuner))
        cfg = self.built.get(slot)
        if cfg is None:
            cfg, problem = config_from_dict(entry, getattr(tuner, "configs", ()))
            if problem:
                self.fallback(kernel, keystr, problem)
                return None
            self.built[slot] = cfg
        return cfg

    def fallback(self, kernel: str, keystr: str, reason: str) -> None:
        if (kernel, keystr) in self.fallback_keys:
            return
        self.fallback_keys.add((kernel, keystr))
        print(f"{MARKER} op={self.op} kernel={kernel} key={keystr} reason={reason}",
              file=sys.stderr, flush=True)
        if self.mode == "replay" and len(self.fallback_keys) == 1:
            _update_identity(autotune_mode="replay_fallback")

    # record side ------------------------------------------------------------
    def note(self, kernel: str, keystr: str, cfg: Any, candidates: Any = ()) -> None:
        slot = (kernel, keystr)
        if self.seen_cfg.get(slot) == id(cfg):
            return  # hot path: same key, same config object as last time
        self.seen_cfg[slot] = id(cfg)
        self.records.setdefault(kernel, {})[keystr] = record_dict(cfg, candidates)

    def dump(self) -> None:
        if self.mode == "replay":
            self.dump_used()
            return
        if not self.record_dir:
            return
        merged: Dict[str, Dict[str, Any]] = {}
        if self.replay:  # pre-swept: keep the merge, overlay what this run used
            for k, v in self.replay.items():
                merged[k] = dict(v)
        for k, v in self.records.items():
            merged.setdefault(k, {}).update(v)
        path = record_path(self.record_dir, self.op)
        try:
            atomic.write_json(path, merged)
            write_meta(self.record_dir, self.op)
        except Exception as exc:
            _log(f"writing {path} failed: {type(exc).__name__}: {exc}")
            return
        n = sum(len(v) for v in merged.values())
        _log(f"recorded {n} config(s) for {len(merged)} kernel(s) -> {path}")
        if self.uncaptured:
            _log("tuner(s) ran without a cache lookup, nothing to record: "
                 + ", ".join(sorted(self.uncaptured)))


    def dump_used(self) -> None:
        """Replay side: what this run actually ran with (injected + live fallbacks),
        as `<OUT_DIR>/autotune_records/<op>.used.json`, so a replay can be diffed
        against its record. Not `<op>.json`: this run did not tune."""
        out = os.environ.get("OUT_DIR", "").strip()
        if not out or not self.records:
            return
        path = Path(out) / "autotune_records" / f"{self.op}.used.json"
        try:
            atomic.write_json(path, self.records)
        except Exception as exc:
            _log(f"writing {path} failed: {type(exc).__name__}: {exc}")


def write_meta(record_dir: str, op: str) -> None:
    atomic.write_json(Path(record_dir) / "meta.json", {
        "schema_version": META_SCHEMA,
        "provider": os.environ.get("ZL_PROVIDER", "flaggems") or "flaggems",
        "backend": _backend_name(),
        "op": op,
    })


def load_records(record_dir: str, op: str) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """{kernel: {key: cfg}} from `<dir>/<op>.json`; ValueError names a bad file."""
    path = record_path(record_dir, op)
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text())
    except Exception as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise ValueError(f"{path}: expected {{kernel: {{key: config}}}}")
    return doc


def read_meta_backend(record_dir: str) -> str:
    path = Path(record_dir) / "meta.json"
    try:
        meta = json.loads(path.read_text())
        return str(meta.get("backend") or "").strip() if isinstance(meta, dict) else ""
    except Exception:
        return ""


# ------------------------------------------------------------------------- proxy

class _CacheProxy:
    """Stands in for `tuner.cache` during one `run` call; remembers the key the
    tuner asked about and, when replaying, answers with the recorded config."""

    __slots__ = ("inner", "state", "tuner", "kernel", "key", "keystr", "forced", "wrote", "_strs")

    def __init__(self, inner: Any, state: _State, tuner: Any, kernel: str, strs: Dict) -> None:
        self.inner = inner
        self.state = state
        self.tuner = tuner
        self.kernel = kernel
        self.key = None
        self.keystr = None
        self.forced = None
        self.wrote = False
        self._strs = strs

    def _see(self, key: Any) -> None:
        if self.keystr is not None and key == self.key:
            return
        self.key = key
        try:
            ks = self._strs.get(key)
        except TypeError:
            ks = None
        if ks is None:
            ks = key_to_str(key)
            try:
                self._strs[key] = ks
            except TypeError:
                pass
        self.keystr = ks
        self.forced = self.state.lookup(self.tuner, self.kernel, ks)

    def __contains__(self, key: Any) -> bool:
        self._see(key)
        return True if self.forced is not None else key in self.inner

    def __getitem__(self, key: Any) -> Any:
        self._see(key)
        return self.forced if self.forced is not None else self.inner[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._see(key)
        self.wrote = True
        self.inner[key] = value

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __getattr__(self, name: str) -> Any:  # anything else goes to the real cache
        return getattr(self.inner, name)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        return iter(self.inner)


_state: Optional[_State] = None
_patched: List[Tuple[type, Any]] = []          # (class, original run from its __dict__)
_orig_init_subclass: Any = None
_had_init_subclass = False
_autotuner_cls: Optional[type] = None
_atexit_registered = False


def _note_used(st: _State, tuner: Any, inner: Any, proxy: _CacheProxy, kernel: str) -> None:
    """Record the config this call ran with, read back from the tuner's cache."""
    cfg = proxy.forced
    if cfg is None:
        if not proxy.wrote and (kernel, proxy.keystr) in st.seen_cfg:
            return  # warm hit on a key already recorded: skip the re-read (hot path)
        try:
            cfg = inner[proxy.key] if proxy.key in inner else None
        except Exception:
            cfg = None
    if cfg is None:
        cfg = getattr(tuner, "best_config", None)
    if cfg is not None:
        st.note(kernel, proxy.keystr, cfg, getattr(tuner, "configs", ()))


def _wrap_run(original):
    def run(self, *args, **kwargs):
        st = _state
        if st is None or getattr(self, "_zl_in_run", False):
            return original(self, *args, **kwargs)  # inner super().run(): outer owns it
        inner = getattr(self, "cache", None)
        if inner is None:
            return original(self, *args, **kwargs)
        kernel = getattr(self, "_zl_kernel", None)
        if kernel is None:
            kernel = kernel_name(self)
            strs: Dict = {}
            try:
                self._zl_kernel, self._zl_keystrs = kernel, strs
            except Exception:
                pass
        strs = getattr(self, "_zl_keystrs", {})
        proxy = _CacheProxy(inner, st, self, kernel, strs)
        self.cache = proxy
        self._zl_in_run = True
        try:
            return original(self, *args, **kwargs)
        finally:
            self._zl_in_run = False
            if self.__dict__.get("cache") is proxy:
                self.cache = inner
            if proxy.keystr is None:
                if len(getattr(self, "configs", ()) or ()) > 1:
                    st.uncaptured.add(kernel)
            else:
                _note_used(st, self, inner, proxy, kernel)
    run._zl_wrapped = True
    run.__wrapped__ = original
    return run


def _patch_class(cls: type) -> None:
    own = cls.__dict__.get("run")
    if own is None or getattr(own, "_zl_wrapped", False):
        return
    _patched.append((cls, own))
    cls.run = _wrap_run(own)


def _all_subclasses(cls: type) -> List[type]:
    out, todo = [], list(cls.__subclasses__())
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


def _install(autotuner_cls: type) -> None:
    """Wrap Autotuner.run, every existing subclass that defines run, and -- through
    __init_subclass__ -- every subclass created later: flag_gems (and its LibTuner)
    is imported by the benchmark module, after plugins are configured."""
    global _orig_init_subclass, _had_init_subclass, _autotuner_cls
    _autotuner_cls = autotuner_cls
    _patch_class(autotuner_cls)
    for sub in _all_subclasses(autotuner_cls):
        _patch_class(sub)
    _had_init_subclass = "__init_subclass__" in autotuner_cls.__dict__
    _orig_init_subclass = autotuner_cls.__dict__.get("__init_subclass__")

    orig = _orig_init_subclass

    def __init_subclass__(cls, **kw):
        if orig is not None:
            orig.__get__(None, cls)(**kw)
        else:
            super(autotuner_cls, cls).__init_subclass__(**kw)
        _patch_class(cls)

    autotuner_cls.__init_subclass__ = classmethod(__init_subclass__)


def _uninstall() -> None:
    global _autotuner_cls
    while _patched:
        cls, orig = _patched.pop()
        cls.run = orig
    if _autotuner_cls is not None:
        if _had_init_subclass:
            _autotuner_cls.__init_subclass__ = _orig_init_subclass
        else:
            try:
                del _autotuner_cls.__init_subclass__
            except AttributeError:
                pass
        _autotuner_cls = None


def _dump_at_exit() -> None:
    if _state is not None:
        _state.dump()


_FLAGGEMS_PACKAGES = ("flag_gems", "flaggems_vllm")
# Taken when pytest imports this module for `-p`, i.e. before any conftest: the
# FlagGems benchmark conftest imports flag_gems at load, so by pytest_configure the
# package is always present and only its store location can still be checked.
_LOADED_AT_PLUGIN_IMPORT = [m for m in _FLAGGEMS_PACKAGES if m in sys.modules]


def _tuner_store_location() -> str:
    for pkg in _FLAGGEMS_PACKAGES:
        mod = sys.modules.get(f"{pkg}.utils.libentry")
        store = getattr(mod, "libcache", None) if mod is not None else None
        if store is None:
            continue
        loc = getattr(store, "db_url", None) or getattr(store, "path", None)
        if loc:
            return str(loc)
    return ""


def check_tuner_cache_isolation(loaded_early=None) -> List[str]:
    """Warnings (also printed) when ZL_ISOLATE_TUNER_CACHE=1 did not take effect.

    The sqlite store is a singleton built at `import flag_gems` from
    FLAGGEMS_DB_URL / FLAGGEMS_CACHE_DIR; set after that import, they change nothing,
    and a shared store hands one side's winners to the other (mm: 945 -> 33
    compiled variants)."""
    if os.environ.get("ZL_ISOLATE_TUNER_CACHE", "0").strip() != "1":
        return []
    early = _LOADED_AT_PLUGIN_IMPORT if loaded_early is None else loaded_early
    warnings = []
    if early:
        warnings.append(f"{', '.join(early)} was imported before the zl_bench plugins loaded")
    private = os.environ.get("FLAGGEMS_DB_URL", "").strip() or os.environ.get("FLAGGEMS_CACHE_DIR", "").strip()
    if not private:
        warnings.append("neither FLAGGEMS_DB_URL nor FLAGGEMS_CACHE_DIR is set")
    else:
        where = _tuner_store_location()
        want = private[len("sqlite:///"):] if private.startswith("sqlite:///") else private
        if where and want not in where:
            warnings.append(f"the tuner store is {where}, not the private {private}")
    for w in warnings:
        _log(f"!!! WARNING ZL_ISOLATE_TUNER_CACHE=1 but {w}: the run may share tuned "
             "configs with other runs")
    return warnings


def pytest_configure(config):
    """Pick record / replay / nothing and install the wrappers."""
    global _state, _atexit_registered
    check_tuner_cache_isolation()
    record_dir = os.environ.get(RECORD_DIR_ENV, "").strip()
    replay_dir = os.environ.get(REPLAY_DIR_ENV, "").strip()
    op = _op_name()
    if record_dir and replay_dir:
        _log(f"!!! ERROR both {RECORD_DIR_ENV} and {REPLAY_DIR_ENV} are set; recording "
             "while replaying is meaningless, doing neither (autotune_mode=uncontrolled)")
        _update_identity(autotune_mode="uncontrolled")
        return
    if not record_dir and not replay_dir:
        _update_identity(autotune_mode="uncontrolled")
        return
    try:
        import importlib
        autotuner_cls = importlib.import_module("triton.runtime.autotuner").Autotuner
        if not callable(getattr(autotuner_cls, "run", None)):
            raise AttributeError("Autotuner.run missing")
    except Exception as exc:
        _log(f"Triton Autotuner unavailable ({type(exc).__name__}: {exc}); "
             "autotune_mode=uncontrolled")
        _update_identity(autotune_mode="uncontrolled")
        return

    if replay_dir:
        recorded = read_meta_backend(replay_dir)
        current = _backend_name()
        if recorded and recorded != current:
            print(f"{MARKER} op={op} kernel=* key=* reason=backend_mismatch "
                  f"recorded={recorded} current={current}", file=sys.stderr, flush=True)
            _log(f"refusing to replay {recorded} configs on {current}; tuning live")
            _update_identity(autotune_mode="replay_fallback")
            return
        try:
            records = load_records(replay_dir, op)
        except ValueError as exc:
            print(f"{MARKER} op={op} kernel=* key=* reason=unreadable_record",
                  file=sys.stderr, flush=True)
            _log(f"{exc}; tuning live")
            _update_identity(autotune_mode="replay_fallback")
            return
        if not records:
            _log(f"no records for {op} under {replay_dir}; every key will fall back")
        _state = _State(op, "replay", replay=records)
        _install(autotuner_cls)
        _update_identity(autotune_mode="replay")
        n = sum(len(v) for v in records.values())
        _log(f"replaying {n} recorded config(s) for {len(records)} kernel(s) from "
             f"{record_path(replay_dir, op)}")
        return

    seeded = None
    if os.environ.get(PRESWEPT_ENV, "").strip() == "1":
        try:
            seeded = load_records(record_dir, op)
        except ValueError as exc:
            _log(f"pre-swept records unusable ({exc}); tuning serially")
            seeded = None
    _state = _State(op, "record", record_dir=record_dir, replay=seeded)
    _install(autotuner_cls)
    if not _atexit_registered:
        # atexit rather than sessionfinish: an exception or sys.exit that ends the
        # session early still leaves what was tuned so far.
        atexit.register(_dump_at_exit)
        _atexit_registered = True
    try:
        write_meta(record_dir, op)
    except Exception as exc:
        _log(f"meta.json write failed: {type(exc).__name__}: {exc}")
    _update_identity(autotune_mode="record")
    src = " (seeded from the parallel sweep)" if seeded is not None else ""
    _log(f"recording autotune configs to {record_path(record_dir, op)}{src}")


def pytest_unconfigure(config):
    """Dump now (atexit stays as the crash path) and put every run() back."""
    global _state
    if _state is not None:
        _state.dump()
    _uninstall()
    _state = None
