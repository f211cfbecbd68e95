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
from typing import Any, Dict, Mapping, Optional

from zl.config import RunConfig


def inherited() -> Dict[str, str]:
    """A copy of this process's environment, the base of a child's."""
    return dict(os.environ)


def tuner_store(tuner_dir: str, db_name: str) -> Dict[str, str]:
    """FlagGems' two variables for a private tuner store in `tuner_dir`."""
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
