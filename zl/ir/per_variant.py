"""Matching the variants of two runs by identity, for the first-difference verdict.

Why: the per-level fingerprint is one hash over every variant a run compiled, so one
extra variant on one side changes every level's hash. On the H200 an A/A screen of
dropout read IR_CHANGED@ttgir because side A's time-based timing loops called the
kernel 30058 times instead of 214, its philox_offset argument passed 2**31 and Triton
compiled one more specialisation (`philox_offset: i64`); every other variant was the
same code on both sides. Argument-value specialisations (i32/i64, divisibility 16, ==1)
follow the inputs and the number of calls, not the code generator.

File names cannot match variants across runs: they are disambiguated relative to the
run's own set (zl.ir.naming), so one variant is `w16s3__i32` in A and `w16s3` in B. A
variant's identity is (shape, kernel, num_warps, num_stages, constexprs, dtypes,
specialization), from its index.tsv row. The compile hash is left out on purpose: a
switch that Triton folds into its cache key changes it without changing the code.

Only argument-value specialisations are excused: every one-sided variant must have a
partner on the other side with the same shape, kernel, num_warps, num_stages and
constexprs, differing only in integer argument types (i32/i64/u64 follow the value), in
specialisation attributes (divisibility 16) or in an ==1 argument folded into a
constexpr. A one-sided variant with another config (warps, stages, BLOCK...) is code the
switch may have changed, so then the aggregate rule applies (`unexplained`).

This module only reads what `zl.ir.levels` records (`per_variant` in
ir_fingerprints.json, schema 2); the rule that uses it lives in zl.ir.fingerprint.verdict.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from zl.ir import naming

IDENTITY_FIELDS = ("shape", "kernel", "num_warps", "num_stages", "constexprs", "dtypes", "specialization")
_JSON_FIELDS = ("constexprs", "dtypes", "specialization")
# Triton picks an integer argument's type from its value.
_INT_TYPE = re.compile(r"[iu](?:1|8|16|32|64)")
# The screen.tsv cell lists at most this many one-sided variants per side, then "+N more".
ONLY_CAP = 3


class PerVariantError(ValueError):
    """A recorded per-variant entry is malformed."""


def identity_of(row: Mapping[str, str]) -> Dict[str, Any]:
    """A variant's identity from its index.tsv row (JSON cells parsed, so key order is moot)."""
    ident: Dict[str, Any] = {}
    for field in IDENTITY_FIELDS:
        raw = str(row.get(field, "") or "")
        if field in _JSON_FIELDS and raw:
            try:
                ident[field] = json.loads(raw)
                continue
            except ValueError:
                pass  # kept verbatim: still a stable part of the key
        ident[field] = raw
    return ident


def key_of(identity: Mapping[str, Any]) -> str:
    return json.dumps({f: identity.get(f) for f in IDENTITY_FIELDS}, sort_keys=True, separators=(",", ":"))


def _entries(records: Sequence[Mapping[str, Any]]) -> Dict[str, List[Mapping[str, Any]]]:
    out: Dict[str, List[Mapping[str, Any]]] = defaultdict(list)
    for rec in records:
        if not isinstance(rec, Mapping) or not isinstance(rec.get("identity"), Mapping) \
                or not isinstance(rec.get("levels"), Mapping):
            raise PerVariantError(f"per-variant entry without identity/levels: {rec!r:.120}")
        out[key_of(rec["identity"])].append(rec)
    return out


def specialisation_of(u: Mapping[str, Any], v: Mapping[str, Any]) -> bool:
    """Whether identities u and v are one variant up to argument-value specialisation."""
    if any(str(u.get(f)) != str(v.get(f)) for f in ("shape", "kernel", "num_warps", "num_stages")):
        return False
    cu, cv = u.get("constexprs"), v.get("constexprs")
    du, dv = u.get("dtypes"), v.get("dtypes")
    if not all(isinstance(x, dict) for x in (cu, cv, du, dv)):
        return cu == cv and du == dv
    for n in set(cu) | set(cv):
        if n in cu and n in cv:
            if cu[n] != cv[n]:
                return False
        elif cu.get(n, cv.get(n)) != 1 or not _INT_TYPE.fullmatch(str(du.get(n, dv.get(n)))):
            return False  # a constexpr on one side only: excused only as a folded ==1 integer
    for n in set(du) | set(dv):
        a, b = du.get(n), dv.get(n)
        if a != b and not all(t is None or _INT_TYPE.fullmatch(str(t)) for t in (a, b)):
            return False
    return True


def match(records_a: Sequence[Mapping[str, Any]], records_b: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """{'common': {key: (entries_a, entries_b)}, 'only_a': [identity], 'only_b': [identity],
    'unexplained': [identity]} (one-sided variants without a specialisation partner)."""
    a, b = _entries(records_a), _entries(records_b)
    common = {k: (a[k], b[k]) for k in a if k in b}
    only_a = [a[k][0]["identity"] for k in sorted(a) if k not in b]
    only_b = [b[k][0]["identity"] for k in sorted(b) if k not in a]
    all_a = [e[0]["identity"] for e in a.values()]
    all_b = [e[0]["identity"] for e in b.values()]
    unexplained = [u for u in only_a if not any(specialisation_of(u, v) for v in all_b)]
    unexplained += [u for u in only_b if not any(specialisation_of(u, v) for v in all_a)]
    return {"common": common, "only_a": only_a, "only_b": only_b, "unexplained": unexplained}


def match_or_none(records_a: Optional[Sequence[Mapping[str, Any]]],
                  records_b: Optional[Sequence[Mapping[str, Any]]]) -> Optional[Dict[str, Any]]:
    """match() when both runs recorded per-variant digests; None (the aggregate rule) otherwise."""
    if records_a is None or records_b is None:
        return None
    try:
        return match(records_a, records_b)
    except PerVariantError as exc:
        print(f"[ir-fingerprint] {exc}; variants are not matched, the aggregate rule applies",
              file=sys.stderr)
        return None


def common_equal(matched: Mapping[str, Any], level: str) -> Optional[bool]:
    """Whether every common variant has the same digest at `level` on both sides.

    None when a common variant has no recorded digest at that level (nothing to decide
    on). Several variants with one identity on a side (same name, different generated
    source) compare as a multiset, so a different count reads as "differs".
    """
    for entries_a, entries_b in matched["common"].values():
        da = [e["levels"].get(level) for e in entries_a]
        db = [e["levels"].get(level) for e in entries_b]
        if None in da or None in db:
            return None
        if sorted(map(str, da)) != sorted(map(str, db)):
            return False
    return True


def _spec_token(pairs: Any) -> str:
    """[["tt.divisibility", 16]] -> "div16" (naming.attr_token); none when unspecialised."""
    if not pairs:
        return "none"
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        return json.dumps(pairs, sort_keys=True)  # not Triton's shape: shown as recorded
    return naming.attr_token(pairs)


def _tokens(ident: Mapping[str, Any], group: Sequence[Mapping[str, Any]]) -> List[str]:
    """What tells `ident` apart inside its (shape, kernel) group: only fields that vary."""
    out: List[str] = []
    for field, fmt in (("num_warps", "w{}"), ("num_stages", "s{}")):
        if len({str(g.get(field)) for g in group}) > 1:
            out.append(fmt.format(ident.get(field)))
    for field, sep in (("constexprs", "="), ("dtypes", ":"), ("specialization", ":")):
        names: List[str] = []
        for g in group:
            names += [n for n in (g.get(field) or {}) if isinstance(g.get(field), dict) and n not in names]
        for n in names:
            values = {json.dumps((g.get(field) or {}).get(n) if isinstance(g.get(field), dict) else None,
                                 sort_keys=True) for g in group}
            if len(values) <= 1:
                continue
            val = ident.get(field).get(n) if isinstance(ident.get(field), dict) else None
            if field == "specialization":
                val = _spec_token(val)
            out.append(f"{n}{sep}{val}")
    return out


def labels(matched: Mapping[str, Any]) -> Tuple[List[str], List[str]]:
    """Short names of the one-sided variants: `shape/kernel[what differs in its group]`."""
    groups: Dict[Tuple[str, str], List[Mapping[str, Any]]] = defaultdict(list)
    for entries_a, entries_b in matched["common"].values():
        ident = entries_a[0]["identity"]
        groups[(str(ident.get("shape")), str(ident.get("kernel")))].append(ident)
    for ident in list(matched["only_a"]) + list(matched["only_b"]):
        groups[(str(ident.get("shape")), str(ident.get("kernel")))].append(ident)

    def name(ident: Mapping[str, Any]) -> str:
        shape, kernel = str(ident.get("shape")), str(ident.get("kernel"))
        toks = _tokens(ident, groups[(shape, kernel)])
        return f"{shape}/{kernel}" + (f"[{','.join(toks)}]" if toks else "")
    return [name(i) for i in matched["only_a"]], [name(i) for i in matched["only_b"]]


def only_cell(matched: Optional[Mapping[str, Any]]) -> str:
    """The screen.tsv `variants_only` cell: `A: x, y (+N more); B: -`, or `-` when none."""
    if not matched or not (matched["only_a"] or matched["only_b"]):
        return "-"
    parts = []
    for side, names in zip("AB", labels(matched)):
        shown = ", ".join(names[:ONLY_CAP]) or "-"
        if len(names) > ONLY_CAP:
            shown += f" (+{len(names) - ONLY_CAP} more)"
        parts.append(f"{side}: {shown}")
    # A cell of a TSV table: never a tab or a newline, whatever a kernel name holds.
    return " ".join("; ".join(parts).split())
