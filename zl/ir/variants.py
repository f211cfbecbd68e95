"""Compilation-listener payloads -> plain variant records (and back, for replay).

Triton calls `knobs.compilation.listener(*, src, metadata, metadata_group, times,
cache_hit)` once per compiled variant (triton 3.6 and 3.9 share this protocol).
`src` is an ASTSource: `fn` (the JITFunction, `arg_names`), `signature`
({arg name: "*fp16" | "i32" | "constexpr" ...}), `constants` ({(arg index,): value},
keys were plain names/ints before triton 3.3) and `attrs` ({(arg index,):
[["tt.divisibility", 16]]}; an AttrsDescriptor object before 3.3). `metadata` is a
dict on a fresh compile (with a GPUTarget inside) and a namedtuple's `_asdict()` on a
cache hit. `metadata_group` maps "<kernel>.<ext>" to the file in TRITON_CACHE_DIR.

Everything here is duck-typed and defensive: an unknown shape of `src` degrades to
fewer recorded fields, never to an exception inside Triton's compile path.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

BINARY_EXTS = ("cubin", "hsaco", "json", "mubin", "so", "o", "bin")


def jsonable(value: Any) -> Any:
    """A JSON-friendly stand-in for a constexpr / metadata value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    name = getattr(value, "__name__", None)  # JITFunction / python callables passed as constexpr
    if isinstance(name, str):
        return name
    return str(value)


def _path_key(key: Any) -> Tuple:
    if isinstance(key, tuple):
        return key
    if isinstance(key, (int, str)):
        return (key,)
    return (str(key),)


def _arg_name(path: Tuple, arg_names: List[str]) -> str:
    if not path:
        return "?"
    head = path[0]
    if isinstance(head, int) and 0 <= head < len(arg_names):
        name = arg_names[head]
    else:
        name = str(head)
    return name + "".join(f"[{p}]" for p in path[1:])


def _attrs_dict(attrs: Any, arg_names: List[str]) -> Dict[str, List[List[Any]]]:
    if attrs is None:
        return {}
    if isinstance(attrs, dict):
        out: Dict[str, List[List[Any]]] = {}
        for key, items in attrs.items():
            pairs = [[str(p[0]), jsonable(p[1])] for p in (items or []) if isinstance(p, (list, tuple)) and len(p) == 2]
            if pairs:
                out[_arg_name(_path_key(key), arg_names)] = pairs
        return out
    div = getattr(attrs, "divisibility_16", None)  # triton < 3.3 AttrsDescriptor
    if div is not None:
        return {_arg_name(_path_key(i), arg_names): [["tt.divisibility", 16]] for i in div}
    return {"_raw": [["attrs", str(attrs)]]}


def _arg_names(src: Any) -> List[str]:
    fn = getattr(src, "fn", None)
    names = getattr(fn, "arg_names", None)
    if names is None:
        names = list(getattr(src, "signature", {}) or {})
    return [str(n) for n in names]


def variant_record(src: Any, metadata: Any, metadata_group: Optional[Dict[str, str]], cache_hit: Any = None) -> Dict[str, Any]:
    """The facts of one compiled variant, as plain JSON-able data."""
    if hasattr(metadata, "_asdict"):
        metadata = metadata._asdict()
    metadata = dict(metadata or {})
    arg_names = _arg_names(src)
    fn = getattr(src, "fn", None)
    kernel = metadata.get("name") or getattr(src, "name", None) or getattr(fn, "__name__", None) or "unknown_kernel"
    constexprs: Dict[str, Any] = {}
    for key, value in (getattr(src, "constants", None) or {}).items():
        constexprs[_arg_name(_path_key(key), arg_names)] = jsonable(value)
    # Present constexprs in argument order: names then read left to right like the kernel.
    order = {n: i for i, n in enumerate(arg_names)}
    constexprs = dict(sorted(constexprs.items(), key=lambda kv: (order.get(kv[0].split("[")[0], 1 << 30), kv[0])))
    signature = {str(k): str(v) for k, v in (getattr(src, "signature", None) or {}).items()}
    ir_paths = {}
    for fname, path in (metadata_group or {}).items():
        ext = str(fname).rsplit(".", 1)[-1]
        if "." in str(fname) and ext not in BINARY_EXTS:
            ir_paths[ext] = str(path)
    origin = getattr(fn, "fn", fn)
    return {
        "hash": str(metadata.get("hash") or ""),
        "kernel": str(kernel),
        "fn": f"{getattr(origin, '__module__', '?')}.{getattr(origin, '__qualname__', kernel)}",
        "constexprs": constexprs,
        "signature": signature,
        "specialization": _attrs_dict(getattr(src, "attrs", None), arg_names),
        "num_warps": jsonable(metadata.get("num_warps")),
        "num_stages": jsonable(metadata.get("num_stages")),
        "num_ctas": jsonable(metadata.get("num_ctas")),
        # Bytes of shared memory the kernel allocates (Triton's metadata `shared`); None when
        # this Triton's metadata has no such field.
        "shared": jsonable(metadata.get("shared")),
        "ir_paths": ir_paths,
        "cache_hit": bool(cache_hit) if cache_hit is not None else None,
    }


# --- recorded payloads (benchmarks/capture_ir_payloads.py writes them, tests replay them)

def serialise_payload(src: Any, metadata: Any, metadata_group: Optional[Dict[str, str]], cache_hit: Any) -> Dict[str, Any]:
    """A listener call as JSON: the src fields the plugin reads, metadata, group, cache_hit."""
    if hasattr(metadata, "_asdict"):
        metadata = metadata._asdict()
    fn = getattr(src, "fn", None)
    constants = getattr(src, "constants", None) or {}
    attrs = getattr(src, "attrs", None)
    if isinstance(attrs, dict):
        attrs_json: Any = [[list(_path_key(k)), jsonable(v)] for k, v in attrs.items()]
    else:
        attrs_json = str(attrs)
    return {
        "src": {
            "name": getattr(src, "name", None),
            "fn_name": getattr(fn, "__name__", None),
            "arg_names": _arg_names(src),
            "constants": [[list(_path_key(k)), jsonable(v)] for k, v in constants.items()],
            "signature": {str(k): str(v) for k, v in (getattr(src, "signature", None) or {}).items()},
            "attrs": attrs_json,
        },
        "metadata": json.loads(json.dumps(dict(metadata or {}), default=jsonable)),
        "metadata_group": {str(k): str(v) for k, v in (metadata_group or {}).items()},
        "cache_hit": bool(cache_hit),
    }


class _ReplayFn:
    def __init__(self, name: str, arg_names: List[str]):
        self.__name__ = name
        self.__qualname__ = name
        self.__module__ = "recorded"
        self.arg_names = arg_names


class ReplaySrc:
    """Duck-typed ASTSource rebuilt from `serialise_payload()['src']`."""

    def __init__(self, data: Dict[str, Any]):
        names = list(data.get("arg_names") or [])
        self.name = data.get("name") or data.get("fn_name")
        self.fn = _ReplayFn(data.get("fn_name") or self.name or "kernel", names)
        self.signature = dict(data.get("signature") or {})
        self.constants = {tuple(k): v for k, v in data.get("constants") or []}
        attrs = data.get("attrs")
        self.attrs = {tuple(k): v for k, v in attrs} if isinstance(attrs, list) else attrs


def replay_kwargs(payload: Dict[str, Any], metadata_group: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Keyword arguments to call a compilation listener with a recorded payload."""
    return {
        "src": ReplaySrc(payload["src"]),
        "metadata": dict(payload["metadata"]),
        "metadata_group": dict(metadata_group if metadata_group is not None else payload["metadata_group"]),
        "times": None,
        "cache_hit": payload.get("cache_hit", False),
    }
