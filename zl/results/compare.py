"""Compare two runs' recorded outputs: side B vs side A per shape, and each vs torch.

Per shape, each output tensor pair is one of
    equal       identical dtype, shape and bytes (the digest: sha256, or wsum64 on large outputs)
    within_tol  numpy.isclose(b, a, rtol, atol) everywhere it can be checked (every element
                when both records keep all values, else the shared sample), NaN equal to NaN
    different   anything else (dtype, shape, NaN/inf counts, or a value out of tolerance)
Tolerances are FlagGems' accuracy-suite ones: rtol = RESOLUTION[dtype] (float16 1e-3,
bfloat16 0.016, float32 1.3e-6, float64 1e-12), atol = 1e-4; integer and bool dtypes must
be equal.

An operator's value (one screen cell, one report line):
    match                          every shape bitwise equal
    within_tol                     no shape different, some only within tolerance
    MISMATCH (k/n shapes, worst error abs E rel R at KEY)
    n/a (reason)                   random or in-place op, nothing recorded, no shape in common

CLI: python -m zl.results.compare RUN_A RUN_B [--tsv] [--json FILE]
    prints the B-vs-A value (with --tsv: `results<TAB>results_torch`, the screen cells);
    exit 0 match / within_tol, 10 MISMATCH, 1 n/a, 2 usage (a RUN is not a directory,
    an unreadable results file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from zl import atomic
from zl.results.capture import RESULTS_SUBDIR

EXIT_OK, EXIT_NA, EXIT_USAGE, EXIT_MISMATCH = 0, 1, 2, 10
RESOLUTION = {"float16": 1e-3, "bfloat16": 0.016, "float32": 1.3e-6, "float64": 1e-12,
              "complex64": 1.3e-6, "complex128": 1e-12}
ATOL = 1e-4
MATCH, WITHIN, DIFFERENT = "equal", "within_tol", "different"


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


def compare_tensor(b: Dict[str, Any], a: Dict[str, Any]) -> Dict[str, Any]:
    """{'status': equal|within_tol|different, 'abs', 'rel', 'why'} for b against reference a."""
    if b["dtype"] != a["dtype"] or b["shape"] != a["shape"]:
        return {"status": DIFFERENT, "abs": None, "rel": None,
                "why": f"{b['dtype']}{b['shape']} vs {a['dtype']}{a['shape']}"}
    if _digest(b) == _digest(a):
        return {"status": MATCH, "abs": 0.0, "rel": 0.0, "why": None}
    if (b["nan"], b["inf"]) != (a["nan"], a["inf"]):
        return {"status": DIFFERENT, "abs": None, "rel": None,
                "why": f"nan/inf counts {b['nan']}/{b['inf']} vs {a['nan']}/{a['inf']}"}
    vb, va, full = _values(b, a)
    if not vb.size:
        return {"status": DIFFERENT, "abs": None, "rel": None, "why": "bytes differ, no values to compare"}
    finite = np.isfinite(va) & np.isfinite(vb)
    diff = np.abs(vb - va)
    worst_abs = float(diff[finite].max()) if finite.any() else 0.0
    rel = diff[finite] / np.maximum(np.abs(va[finite]), np.finfo(float).tiny)
    worst_rel = float(rel.max()) if rel.size else 0.0
    rtol = RESOLUTION.get(a["dtype"])
    if rtol is None:  # integer / bool: equal bytes only
        ok = False
    else:
        ok = bool(np.isclose(vb, va, rtol=rtol, atol=ATOL, equal_nan=True).all())
    return {"status": WITHIN if ok else DIFFERENT, "abs": worst_abs, "rel": worst_rel,
            "why": None if full else "sampled"}


def compare_outputs(b: List[Dict], a: List[Dict]) -> Dict[str, Any]:
    if len(b) != len(a):
        return {"status": DIFFERENT, "abs": None, "rel": None, "why": f"{len(b)} vs {len(a)} outputs"}
    results = [compare_tensor(x, y) for x, y in zip(b, a)]
    order = {MATCH: 0, WITHIN: 1, DIFFERENT: 2}
    worst = max(results, key=lambda r: (order[r["status"]], r["abs"] or 0.0), default=None)
    return worst or {"status": MATCH, "abs": 0.0, "rel": 0.0, "why": None}


def _aggregate(per_shape: Dict[str, Dict[str, Any]], reason: Optional[str]) -> Dict[str, Any]:
    if reason:
        return {"value": f"n/a ({reason})", "status": "n/a", "shapes": {}}
    if not per_shape:
        return {"value": "n/a (no shape recorded on both sides)", "status": "n/a", "shapes": {}}
    bad = {k: r for k, r in per_shape.items() if r["status"] == DIFFERENT}
    if bad:
        key, w = max(bad.items(), key=lambda kv: kv[1]["abs"] if kv[1]["abs"] is not None else float("inf"))
        err = (f"abs {w['abs']:.3g} rel {w['rel']:.3g}" if w["abs"] is not None else w["why"])
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


def compare_op(doc_b: Optional[Dict], doc_a: Optional[Dict], side_b: str = "gems", side_a: str = "gems",
               names: Tuple[str, str] = ("B", "A")) -> Dict[str, Any]:
    reason = _doc_reason(doc_b, names[0]) or _doc_reason(doc_a, names[1])
    per_shape: Dict[str, Dict[str, Any]] = {}
    if not reason:
        eb, ea = doc_b.get("entries") or {}, doc_a.get("entries") or {}
        for key in sorted(set(eb) & set(ea)):
            if side_b in eb[key] and side_a in ea[key]:
                per_shape[key] = compare_outputs(eb[key][side_b], ea[key][side_a])
    return _aggregate(per_shape, reason)


def compare_runs(run_a: Path, run_b: Path) -> Dict[str, Any]:
    """Every operator either run recorded: B vs A (gems), and A, B gems vs their torch."""
    docs_a, docs_b = load(run_a), load(run_b)
    ops = {}
    for op in sorted(set(docs_a) | set(docs_b)):
        a, b = docs_a.get(op), docs_b.get(op)
        ops[op] = {"b_vs_a": compare_op(b, a),
                   "a_vs_torch": compare_op(a, a, "gems", "torch", ("A", "A")) if a else None,
                   "b_vs_torch": compare_op(b, b, "gems", "torch", ("B", "B")) if b else None}
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m zl.results.compare",
                                description="compare two runs' recorded outputs (exit 0 match/"
                                "within_tol, 10 MISMATCH, 1 n/a, 2 usage)")
    p.add_argument("run_a")
    p.add_argument("run_b")
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
