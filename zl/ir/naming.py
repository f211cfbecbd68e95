"""Readable, collision-free names for the variants of one (shape, kernel) group.

A name lists only what differs inside the group: constexprs whose value differs
(multi-word names abbreviated to initials, `BLOCK_SIZE_M=64` -> `BSM64`), then
`w<num_warps>` / `s<num_stages>` when those differ. A group whose variants agree on
all of them is named `w<num_warps>s<num_stages>`. Names that still collide are told
apart, in this order, by dtype (`__fp16`), by alignment specialisation
(`__EMdiv16`: argument EM is specialised as divisible by 16) and finally by a prefix
of the compile hash (`__h1a2b3c4d`). naming.md carries the legend.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Callable, Dict, Iterable, List, Sequence

WARPS = "num_warps"
STAGES = "num_stages"
FIXED_ABBR = {WARPS: "w", STAGES: "s"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def safe(text: str) -> str:
    """A path component: no separators, no spaces, never empty or dot-only."""
    out = _UNSAFE.sub("-", str(text))
    return out if out.strip(".") else out.replace(".", "-") or "-"


def abbreviate(name: str) -> str:
    parts = [p for p in str(name).split("_") if p]
    if len(parts) <= 1:
        return str(name)
    return "".join(p[0] for p in parts)


def legend(names: Iterable[str]) -> Dict[str, str]:
    """name -> abbreviation; names whose initials would clash keep their full name."""
    names = list(dict.fromkeys(names))
    abbr = {n: FIXED_ABBR.get(n, abbreviate(n)) for n in names}
    by_abbr: Dict[str, List[str]] = defaultdict(list)
    for n, a in abbr.items():
        by_abbr[a].append(n)
    reserved = set(FIXED_ABBR.values())
    for a, owners in by_abbr.items():
        clash = len(owners) > 1 or (a in reserved and owners[0] not in FIXED_ABBR)
        if clash:
            for n in owners:
                if n not in FIXED_ABBR:
                    abbr[n] = n
    return abbr


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value).replace(".", "p")
    return str(value)


def _params(v: Dict[str, Any]) -> Dict[str, Any]:
    params = dict(v.get("constexprs") or {})
    params[WARPS] = v.get(WARPS)
    params[STAGES] = v.get(STAGES)
    return params


def differing(variants: Sequence[Dict[str, Any]]) -> List[str]:
    """Parameter names whose value is not the same across `variants` (argument order)."""
    keys: List[str] = []
    for v in variants:
        for k in _params(v):
            if k not in keys:
                keys.append(k)
    keys = [k for k in keys if k not in FIXED_ABBR] + [k for k in FIXED_ABBR if k in keys]
    missing = object()
    return [k for k in keys if len({repr(_params(v).get(k, missing)) for v in variants}) > 1]


def _dtype_tag(members: Sequence[Dict[str, Any]], v: Dict[str, Any]) -> str:
    args: List[str] = []
    for m in members:
        for k, t in (m.get("signature") or {}).items():
            if t != "constexpr" and k not in args:
                args.append(k)
    diff = [a for a in args if len({(m.get("signature") or {}).get(a) for m in members}) > 1]
    seen: List[str] = []
    for a in diff:
        t = str((v.get("signature") or {}).get(a, "none")).lstrip("*")
        if t not in seen:
            seen.append(t)
    return "-".join(seen)


def attr_token(pairs: Sequence[Sequence[Any]]) -> str:
    """[["tt.divisibility", 16]] -> "div16": how file names and variant labels spell attributes."""
    out = []
    for name, val in pairs:
        short = "div" if name == "tt.divisibility" else str(name).split(".")[-1]
        out.append(f"{short}{format_value(val)}")
    return "".join(out)


def _align_tag(members: Sequence[Dict[str, Any]], v: Dict[str, Any]) -> str:
    args: List[str] = []
    for m in members:
        for k in m.get("specialization") or {}:
            if k not in args:
                args.append(k)
    diff = [a for a in args if len({repr((m.get("specialization") or {}).get(a)) for m in members}) > 1]
    spec = v.get("specialization") or {}
    return "-".join(f"{abbreviate(a)}{attr_token(spec[a])}" for a in diff if spec.get(a))


def _collisions(names: Dict[str, str]) -> List[List[str]]:
    groups: Dict[str, List[str]] = defaultdict(list)
    for h, n in names.items():
        groups[n].append(h)
    return [hs for hs in groups.values() if len(hs) > 1]


def all_param_names(variants: Sequence[Dict[str, Any]]) -> List[str]:
    names: List[str] = []
    for v in variants:
        names += [k for k in _params(v) if k not in names]
    return names


def name_group(variants: Sequence[Dict[str, Any]], abbr: Dict[str, str] = None) -> Dict[str, str]:
    """hash -> file stem (no extension) for the variants of one (shape, kernel) group.

    `abbr` is the kernel-wide legend (so one abbreviation means the same thing in
    every shape directory); by default it is built from these variants.
    """
    if not variants:
        return {}
    by_hash = {v["hash"]: v for v in variants}
    diff = differing(variants)
    abbr = dict(abbr or {})
    for k, a in legend(all_param_names(variants)).items():
        abbr.setdefault(k, a)
    names: Dict[str, str] = {}
    for h, v in by_hash.items():
        params = _params(v)
        tokens = [f"{abbr[k]}{format_value(params.get(k))}" for k in diff]
        names[h] = safe("_".join(tokens)) if tokens else safe(f"w{v.get(WARPS)}s{v.get(STAGES)}")
    tiebreaks: List[Callable[[Sequence[Dict[str, Any]], Dict[str, Any]], str]] = [_dtype_tag, _align_tag]
    for tiebreak in tiebreaks:
        for hashes in _collisions(names):
            members = [by_hash[h] for h in hashes]
            tags = {h: tiebreak(members, by_hash[h]) for h in hashes}
            if len(set(tags.values())) > 1:
                for h in hashes:
                    if tags[h]:
                        names[h] = f"{names[h]}__{safe(tags[h])}"
    for hashes in _collisions(names):
        width = 8
        while len({h[:width] for h in hashes}) < len(hashes) and width < max(len(h) for h in hashes):
            width += 4
        for h in hashes:
            names[h] = f"{names[h]}__h{safe(h[:width])}"
    return names
