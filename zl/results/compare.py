"""Compare two runs' recorded outputs: side B vs side A per shape, and each vs torch.

Per shape, each output tensor pair is one of
    equal       identical dtype, shape and bytes (the digest: sha256, or wsum64 on large outputs)
    within_tol  |b - ref| <= atol + rtol * |ref| everywhere it can be checked (every element
                when both records keep all values, else the shared sample), NaN equal to NaN
                and an infinity to the same infinity: torch.testing.assert_close's criterion
    different   anything else (dtype, shape, NaN/inf counts or positions, a value out of
                tolerance, an integer or bool output that is not equal)

Tolerances are FlagGems' accuracy-suite ones (src/flag_gems/testing RESOLUTION and
tests/accuracy_utils.py gems_assert_close): rtol = RESOLUTION[dtype]

    float16 1e-3   bfloat16 0.016   float32 1.3e-6   float64 1e-7
    complex32 1e-3   complex64 1.3e-6   complex128 1e-7   float8 (every kind) 1e-3

atol = ATOL (1e-4) x reduce, and integer and bool dtypes must be equal. B vs A takes
reduce = 1: both sides ran FlagGems on the same inputs. Against torch, as FlagGems' tests
pass reduce_dim, reduce is the reference record's size (capture.reduction_size: input
elements behind one output element), and the reference is capture.REFERENCE_SIDE where the
run made one (torch on float32 copies of float16/bfloat16 inputs), else the plain torch output.

The worst element is the one furthest beyond its own bound (|b - ref| / (atol + rtol |ref|));
a report names its absolute error and that bound, never a ratio against the reference
value (against a reference of ~0 such a ratio read 8.97e+304).

An operator's value (one screen cell, one report line):
    match                          every shape bitwise equal
    within_tol                     no shape different, some only within tolerance
    MISMATCH (k/n shapes, worst error abs E > allowed T at KEY)
    n/a (reason)                   random or in-place op, nothing recorded, no shape in common

CLI: `python -m zl.results.compare RUN_A RUN_B`; HELP below.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from zl import atomic, cli_help
from zl.results.capture import REFERENCE_SIDE, RESULTS_SUBDIR

EXIT_OK, EXIT_NA, EXIT_USAGE, EXIT_MISMATCH = 0, 1, 2, 10
RESOLUTION = {"float16": 1e-3, "bfloat16": 0.016, "float32": 1.3e-6, "float64": 1e-7,
              "complex32": 1e-3, "complex64": 1.3e-6, "complex128": 1e-7,
              "float8_e4m3fn": 1e-3, "float8_e5m2": 1e-3, "float8_e4m3fnuz": 1e-3, "float8_e5m2fnuz": 1e-3}
ATOL = 1e-4
MATCH, WITHIN, DIFFERENT = "equal", "within_tol", "different"
TORCH_SIDES = (REFERENCE_SIDE, "torch")   # the reference "vs torch" uses, first one present


class ResultsError(ValueError):
    """A run directory is missing, or one of its results files cannot be read."""


def load(run: Path) -> Dict[str, Dict[str, Any]]:
    """{op: results document} of one run ({} when it recorded nothing)."""
    run = Path(run)
    if not run.is_dir():
        raise ResultsError(f"run directory not found: {run}")
    docs = {}
    for path in sorted((run / RESULTS_SUBDIR).glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            docs[str(doc["op"])] = doc
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ResultsError(f"unreadable results file {path}: {exc}") from None
    return docs


def _values(rec: Dict[str, Any], other: Dict[str, Any]) -> Tuple[np.ndarray, np.ndarray, bool]:
    """Comparable element arrays of two records of equal shape; the flag says 'every element'."""
    if "values" in rec and "values" in other:
        return np.asarray(rec["values"], float), np.asarray(other["values"], float), True
    if rec.get("sample_index") == other.get("sample_index") and "sample" in rec and "sample" in other:
        return np.asarray(rec["sample"], float), np.asarray(other["sample"], float), False
    return np.zeros(0), np.zeros(0), False


def _digest(rec: Dict[str, Any]) -> str:
    """The record's byte digest; files written before "digest" existed carry "sha256" only."""
    return str(rec.get("digest") or f"sha256:{rec.get('sha256')}")


def tolerance(dtype: str, reduce: int = 1) -> Optional[Tuple[float, float]]:
    """(rtol, atol) of a dtype (module doc); None where only equal bytes pass."""
    rtol = RESOLUTION.get(dtype)
    return None if rtol is None else (rtol, ATOL * max(1, int(reduce or 1)))


def _fail(why: str) -> Dict[str, Any]:
    return {"status": DIFFERENT, "abs": None, "allowed": None, "ref": None, "why": why}


def compare_tensor(b: Dict[str, Any], a: Dict[str, Any], reduce_aware: bool = False) -> Dict[str, Any]:
    """{'status': equal|within_tol|different, 'abs', 'allowed', 'ref', 'why'} for b against
    reference a: the worst element's absolute error, its bound and its reference value.
    `reduce_aware`: atol scaled by a's `reduce` (the comparison with torch)."""
    if b["dtype"] != a["dtype"] or b["shape"] != a["shape"]:
        return _fail(f"{b['dtype']}{b['shape']} vs {a['dtype']}{a['shape']}")
    if _digest(b) == _digest(a):
        return {"status": MATCH, "abs": 0.0, "allowed": None, "ref": None, "why": None}
    if (b["nan"], b["inf"]) != (a["nan"], a["inf"]):
        return _fail(f"nan/inf counts {b['nan']}/{b['inf']} vs {a['nan']}/{a['inf']}")
    vb, va, full = _values(b, a)
    if not vb.size:
        return _fail("bytes differ, no values to compare")
    finite = np.isfinite(va) & np.isfinite(vb)
    same_special = (np.isnan(va) & np.isnan(vb)) | (np.isinf(va) & (va == vb))
    if not (finite | same_special).all():
        return _fail("nan/inf at different positions")
    ref = va[finite]
    diff = np.abs(vb[finite] - ref)
    tol = tolerance(a["dtype"], a.get("reduce", 1) if reduce_aware else 1)
    if tol is None:   # integer / bool: equal bytes only
        worst = int(np.argmax(diff)) if diff.size else None
        return {"status": DIFFERENT, "abs": float(diff[worst]) if worst is not None else None,
                "allowed": 0.0, "ref": float(ref[worst]) if worst is not None else None,
                "why": f"{a['dtype']} must be equal"}
    rtol, atol = tol
    if not diff.size:
        return {"status": WITHIN, "abs": 0.0, "allowed": atol, "ref": None, "why": None if full else "sampled"}
    allowed = atol + rtol * np.abs(ref)
    worst = int(np.argmax(diff / allowed))
    ok = bool((diff <= allowed).all())
    return {"status": WITHIN if ok else DIFFERENT, "abs": float(diff[worst]),
            "allowed": float(allowed[worst]), "ref": float(ref[worst]), "why": None if full else "sampled"}


def _excess(r: Dict[str, Any]) -> float:
    """How far beyond its bound a result's worst element is (inf: not comparable by value)."""
    if r["abs"] is None:
        return float("inf")
    if not r.get("allowed"):
        return float("inf") if r["abs"] else 0.0
    return r["abs"] / r["allowed"]


def compare_outputs(b: List[Dict], a: List[Dict], reduce_aware: bool = False) -> Dict[str, Any]:
    if len(b) != len(a):
        return _fail(f"{len(b)} vs {len(a)} outputs")
    results = [compare_tensor(x, y, reduce_aware) for x, y in zip(b, a)]
    order = {MATCH: 0, WITHIN: 1, DIFFERENT: 2}
    worst = max(results, key=lambda r: (order[r["status"]], _excess(r)), default=None)
    return worst or {"status": MATCH, "abs": 0.0, "allowed": None, "ref": None, "why": None}


def _aggregate(per_shape: Dict[str, Dict[str, Any]], reason: Optional[str]) -> Dict[str, Any]:
    if reason:
        return {"value": f"n/a ({reason})", "status": "n/a", "shapes": {}}
    if not per_shape:
        return {"value": "n/a (no shape recorded on both sides)", "status": "n/a", "shapes": {}}
    bad = {k: r for k, r in per_shape.items() if r["status"] == DIFFERENT}
    if bad:
        key, w = max(bad.items(), key=lambda kv: _excess(kv[1]))
        err = (f"abs {w['abs']:.3g} > allowed {w['allowed']:.3g}" if w["abs"] is not None and w["allowed"]
               else w["why"])
        value = f"MISMATCH ({len(bad)}/{len(per_shape)} shapes, worst error {err} at {key})"
        return {"value": value, "status": "mismatch", "shapes": per_shape}
    status = "within_tol" if any(r["status"] == WITHIN for r in per_shape.values()) else "match"
    return {"value": status, "status": status, "shapes": per_shape}


def _doc_reason(doc: Optional[Dict[str, Any]], side: str) -> Optional[str]:
    if doc is None:
        return f"side {side} recorded no outputs"
    if doc.get("status") == "n/a":
        return str(doc.get("reason") or "not comparable")
    return None


def compare_op(doc_b: Optional[Dict], doc_a: Optional[Dict], side_b: str = "gems",
               side_a: Sequence[str] = ("gems",), names: Tuple[str, str] = ("B", "A"),
               reduce_aware: bool = False) -> Dict[str, Any]:
    """B's `side_b` records against A's first present side of `side_a`, per shape."""
    reason = _doc_reason(doc_b, names[0]) or _doc_reason(doc_a, names[1])
    sides = (side_a,) if isinstance(side_a, str) else tuple(side_a)
    per_shape: Dict[str, Dict[str, Any]] = {}
    if not reason:
        eb, ea = doc_b.get("entries") or {}, doc_a.get("entries") or {}
        for key in sorted(set(eb) & set(ea)):
            ref = next((s for s in sides if s in ea[key]), None)
            if side_b in eb[key] and ref is not None:
                per_shape[key] = {**compare_outputs(eb[key][side_b], ea[key][ref], reduce_aware),
                                  "reference": ref}
    return _aggregate(per_shape, reason)


def compare_with_torch(doc: Dict, name: str) -> Dict[str, Any]:
    """One run's FlagGems outputs against its torch reference (module doc)."""
    return compare_op(doc, doc, "gems", TORCH_SIDES, (name, name), reduce_aware=True)


def compare_runs(run_a: Path, run_b: Path, docs: Optional[Sequence[Dict]] = None) -> Dict[str, Any]:
    """Every operator either run recorded: B vs A (gems), and A, B gems vs their torch.
    `docs`: (load(run_a), load(run_b)) when the caller already loaded them."""
    docs_a, docs_b = docs if docs is not None else (load(run_a), load(run_b))
    ops = {}
    for op in sorted(set(docs_a) | set(docs_b)):
        a, b = docs_a.get(op), docs_b.get(op)
        ops[op] = {"b_vs_a": compare_op(b, a),
                   "a_vs_torch": compare_with_torch(a, "A") if a else None,
                   "b_vs_torch": compare_with_torch(b, "B") if b else None}
    return {"run_a": str(run_a), "run_b": str(run_b), "ops": ops, **summarise(ops)}


def summarise(ops: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """The run-level cells: worst B-vs-A value first (a MISMATCH wins), torch alongside."""
    if not ops:
        return {"value": "n/a (no outputs recorded: results plugin off or nothing measured)",
                "status": "n/a", "torch_value": "n/a"}
    rank = {"mismatch": 0, "within_tol": 1, "match": 2, "n/a": 3}
    worst_op = min(ops, key=lambda op: rank[ops[op]["b_vs_a"]["status"]])
    res = ops[worst_op]["b_vs_a"]
    value = res["value"] if len(ops) == 1 else f"{worst_op}: {res['value']}"
    torch_cells = []
    for side in ("a", "b"):
        vals = [ops[op][f"{side}_vs_torch"] for op in ops if ops[op][f"{side}_vs_torch"]]
        worst = min(vals, key=lambda r: rank[r["status"]], default=None)
        torch_cells.append(f"{side.upper()} {worst['value'] if worst else 'n/a'}")
    return {"value": value, "status": res["status"], "torch_value": "; ".join(torch_cells)}


def exit_code(result: Dict[str, Any]) -> int:
    return {"mismatch": EXIT_MISMATCH, "n/a": EXIT_NA}.get(result["status"], EXIT_OK)


HELP = """Compare two runs' recorded outputs (results/, written by _results_plugin): side B vs
side A per shape, and each side vs torch, with FlagGems' accuracy-test tolerances (README,
"A/B: screen first"; this module's docstring has the rule).

Examples:
  python -m zl.results.compare runs/A runs/B
  python -m zl.results.compare runs/A runs/B --tsv --json cmp.json     # a screen's two cells

Outputs:
  On stdout the B-vs-A value: match | within_tol | MISMATCH (k/n shapes, worst error abs E >
  allowed T at KEY) | n/a (reason); on stderr the vs-torch value. With --tsv one line
  `results<TAB>results_torch` (the screen cells). --json FILE: the whole comparison, per
  operator and shape.

Exit codes:
  0   match or within_tol
  1   n/a (random or in-place operator, nothing recorded, no shape in common)
  2   usage (a RUN is not a directory, an unreadable results file)
  10  MISMATCH
"""


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = cli_help.parser(HELP, prog="python -m zl.results.compare")
    p.add_argument("run_a", help="side A's run directory")
    p.add_argument("run_b", help="side B's run directory")
    p.add_argument("--tsv", action="store_true", help="print `results<TAB>results_torch` (screen cells)")
    p.add_argument("--json", type=Path, help="write the full comparison here")
    ns = p.parse_args(argv)
    try:
        result = compare_runs(Path(ns.run_a), Path(ns.run_b))
    except ResultsError as exc:
        print(f"[results] {exc}", file=sys.stderr)
        return EXIT_USAGE
    if ns.json:
        atomic.write_json(ns.json, result)
    if ns.tsv:
        print(f"{result['value']}\t{result['torch_value']}".replace("\n", " "))
    else:
        print(result["value"])
        print(f"[results] vs torch: {result['torch_value']}", file=sys.stderr)
    return exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
