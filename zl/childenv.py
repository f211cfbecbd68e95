"""The environment a run's child processes get, derived from the run configuration here only.

pytest, FlagGems and Triton read a few variables of their own: Triton its cache directory,
FlagGems its tuner store (FLAGGEMS_CACHE_DIR, FLAGGEMS_DB_URL) and USE_FLAGTUNE, the device
runtime its visibility variable. `child_environ` says which values a run sets for them, from
the configuration; `inherited()` is the parent environment those are laid over. Together with
zl.config (which reads the user's variables) this is the only module that touches
os.environ.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from zl.config import RunConfig


def inherited() -> Dict[str, str]:
    """A copy of this process's environment, the base of a child's."""
    return dict(os.environ)


def tuner_store(tuner_dir: str, db_name: str) -> Dict[str, str]:
    """FlagGems' two variables for a private tuner store in `tuner_dir`, its config_cache
    folder created: FlagGems creates that folder only for its default database; under
    FLAGGEMS_DB_URL sqlite cannot open a file in a missing folder (upstream's amax test fails)."""
    Path(tuner_dir, "config_cache").mkdir(parents=True, exist_ok=True)
    return {"FLAGGEMS_CACHE_DIR": tuner_dir,
            "FLAGGEMS_DB_URL": f"sqlite:///{tuner_dir}/config_cache/{db_name}"}


def child_environ(cfg: RunConfig, backend: Any, parent: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The variables a run sets for its pytest process, laid over `parent` (default: this
    process's environment): the private Triton cache, the isolated tuner store, the device
    pinned through the backend's visibility variable unless the caller already chose one,
    USE_FLAGTUNE as 0/1 (FlagGems reads it), unbuffered output (the tee shows lines live)."""
    parent = inherited() if parent is None else parent
    out = {"PYTHONUNBUFFERED": "1", "USE_FLAGTUNE": str(int(cfg.use_flagtune))}
    if cfg.triton_cache_dir:
        out["TRITON_CACHE_DIR"] = cfg.triton_cache_dir
    if cfg.tuner_cache_dir:
        out.update(tuner_store(cfg.tuner_cache_dir, "zl_isolated.db"))
    keys = getattr(backend, "visibility_env_keys", ())
    if cfg.device and keys and not parent.get(keys[0]):
        out[keys[0]] = cfg.device
    return out


def set_in_process(name: str, value: Optional[str]) -> Optional[str]:
    """Set (None: remove) a variable this process's libraries read (GEMS_VENDOR for FlagGems,
    a throwaway tuner store for a preflight import); returns the previous value."""
    previous = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    return previous


# A batch case is one run_pytest.sh run. Inherited from the batch's shell these would change
# every case: the batch shards devices itself, each case records its own picks, and each
# case has its own directory; DTYPES and ZL_DTYPE_FALLBACK come from --dtypes and
# --dtype-fallback (recorded in batch.json's conditions), set per case.
BATCH_DROPPED = ("PARALLEL_WARMUP_GPUS", "REPLAY_FROM", "OUT_DIR", "TEST_NODE", "ZL_TEST_NODE",
                 "OP", "OP_FILE", "SHAPE_MODE", "SHAPE_FILE", "DTYPES", "ZL_DTYPE_FALLBACK",
                 "ZL_DEVICE_SHARE", "ZL_DEVICE_OVERLAP", "ZL_TIMING_LOCK")
# Each case gets a private tuner cache unless the user says otherwise: a shared store hands
# one case's (or side A's) winners to the next (the A/B drivers do the same).
BATCH_DEFAULTS = {"ZL_ISOLATE_TUNER_CACHE": "1"}


def batch_case_base(extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment every batch case starts from: the batch's, its defaults, minus what
    the batch sets per case, plus `extra`. Also what batch.json's conditions record."""
    env = inherited()
    for key, value in BATCH_DEFAULTS.items():
        env.setdefault(key, value)
    for key in BATCH_DROPPED:
        env.pop(key, None)
    env.update(extra or {})
    return env


# A side run imports torch, Triton and FlagGems in a fresh interpreter. On the lent H100 each
# such process compiled 2293 modules from source (5.7-6.0 of its 26 profiled CPU-s): no
# bytecode was read or written there. run_batch.py --bytecode-cache lets the local executor's
# cases share a bytecode cache per call and side (PYTHONPYCACHEPREFIX, written even under
# PYTHONDONTWRITEBYTECODE): the source is compiled once per side. Bytecode changes no result.
# A prefix the user set is theirs and kept.
PYCACHE_TMP = "zl_pycache."


def bytecode_cache_dir(env: Mapping[str, str], owner_pid: int) -> str:
    """A new directory in TMPDIR for the cases' bytecode, named for reclaim_tmp after its
    owner dies; "" when `env` already names a PYTHONPYCACHEPREFIX (used as it is)."""
    if env.get("PYTHONPYCACHEPREFIX"):
        return ""
    return tempfile.mkdtemp(prefix=f"{PYCACHE_TMP}{owner_pid}.", dir=env.get("TMPDIR") or None)


def ships_bytecode(package_dir: str, python_version: str) -> bool:
    """Whether a package holds CPython `python_version`'s bytecode of its __init__ beside it
    (pip compiles every module at install; an image built with --no-compile holds none)."""
    major, minor = (python_version.split(".") + ["", ""])[:2]
    return Path(package_dir, "__pycache__", f"__init__.cpython-{major}{minor}.pyc").is_file()


def with_bytecode_cache(env: Mapping[str, str], cache_dir: str) -> Dict[str, str]:
    """`env` with its interpreters caching bytecode in `cache_dir` ("": `env` unchanged)."""
    out = dict(env)
    if cache_dir:
        out["PYTHONPYCACHEPREFIX"] = cache_dir
        out.pop("PYTHONDONTWRITEBYTECODE", None)
    return out


def batch_case_environ(backend: Any, device: str, base: Mapping[str, str],
                       values: Mapping[str, str]) -> Dict[str, str]:
    """One case's environment: `base` pinned to `device` through the backend's visibility
    variable (every vendor's key cleared first), then the case's own variables."""
    env = backend.apply_visibility(dict(base), device)
    env.update(values)
    return env


def shard_environ(cfg: RunConfig, backend: Any, parent: Mapping[str, str]) -> Dict[str, str]:
    """A parallel-sweep shard's environment: `parent` pinned to the shard's device (every
    vendor's visibility key cleared first) and, when isolated, its own tuner store (N writers
    on one sqlite store is what isolation avoids). Its settings are in its run_config.json."""
    env = backend.apply_visibility(dict(parent), cfg.device)
    if cfg.tuner_cache_dir:
        env.update(tuner_store(cfg.tuner_cache_dir, "zl_shard.db"))
    return env
