"""Autotune keys and Triton Configs as process-stable JSON.

The key text is whatever the tuner itself computed, rendered atom by atom, so it
stays one token in a marker line and compares equal across processes. A Config is
stored with everything needed to rebuild it; its pre_hook (a callable) only as a
presence flag, and rebuilt by finding the same config in the tuner's own list.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, Iterable, Optional, Tuple

# Config attributes rebuilt through the constructor; anything else found on a
# Config (FlagTree adds warp-specialisation fields) is restored with setattr.
_SKIP_ATTRS = {"kwargs", "pre_hook"}


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


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


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


def _bare(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if k != "pre_hook"}


def record_dict(cfg: Any, candidates: Iterable[Any] = ()) -> Dict[str, Any]:
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
    bare = _bare(out)
    for cand in candidates or ():
        try:
            got = config_to_dict(cand)
        except Exception:
            continue
        if got["pre_hook"] and _bare(got) == bare:
            out["pre_hook"] = True
            break
    return out


def config_from_dict(d: Dict[str, Any], candidates: Iterable[Any] = ()) -> Tuple[Any, Optional[str]]:
    """(Config, problem). A recorded config that equals one of the tuner's own is
    returned as that object, which restores its pre_hook; otherwise a fresh Config
    is built (an edited record may hold a config outside the search space). A
    record that had a pre_hook but matches nothing cannot be rebuilt faithfully:
    problem='pre_hook_lost' and the caller tunes live instead."""
    want = _bare(d)
    hooked = bool(d.get("pre_hook"))
    for cand in candidates or ():
        try:
            got = config_to_dict(cand)
        except Exception:
            continue
        # A hook-less record still matches a hooked candidate: LibTuner stores
        # configs without their hook and restores it the same way.
        if (not hooked or got["pre_hook"]) and _bare(got) == want:
            return cand, None
    if hooked:
        return None, "pre_hook_lost"
    import triton

    params = set(inspect.signature(triton.Config.__init__).parameters) - {"self", "kwargs", "pre_hook"}
    cfg = triton.Config(dict(d.get("kwargs") or {}), **{k: v for k, v in want.items() if k in params})
    for k, v in want.items():
        if k not in params and k != "kwargs":
            try:
                setattr(cfg, k, v)
            except Exception:
                pass
    return cfg, None


def off_candidates(d: Dict[str, Any], candidates: Iterable[Any] = ()) -> Optional[str]:
    """Why a recorded config is not one the tuner could pick, or None when it is.

    None: its kwargs and every attribute both it and a candidate carry are equal (Config
    attributes differ between Triton builds: FlagTree adds warp-specialisation fields), or
    the tuner lists no candidates to judge against. `unknown_kwargs`: it names a kwarg no
    candidate has. `not_a_candidate`: otherwise (an edited or foreign record, or a switch
    that changed the tuner's config list)."""
    cands = []
    for cand in candidates or ():
        try:
            cands.append(_bare(config_to_dict(cand)))
        except Exception:
            continue
    if not cands:
        return None
    want = _jsonable(_bare(d))
    kwargs = want.get("kwargs") or {}
    known = set().union(*(set(c.get("kwargs") or {}) for c in cands))
    if set(kwargs) - known:
        return "unknown_kwargs"
    for got in cands:
        if (got.get("kwargs") or {}) != kwargs:
            continue
        if all(got[k] == want[k] for k in (set(got) & set(want)) - {"kwargs"}):
            return None
    return "not_a_candidate"
