"""The results check in the A/B reports: a MISMATCH first, the value next to replay facts.

`--ab BEFORE AFTER`: side B (after) against side A (before), and each against its torch
baseline (zl.results.compare). `--ab-rounds ROOT`: every cell against r1_A, the recording
all other cells replay: the B cells say whether the switch changed the answers, the later
A cells whether a replayed config reproduces the recorded outputs. A replaying cell whose
outputs differ from its record is marked `REPLAY_RESULTS_DIFFER` beside the
AUTOTUNE_REPLAY_FALLBACK lines: a replay that reproduced configs but not outputs is not
the run it claims to repeat.
"""

from __future__ import annotations

from typing import Dict, Mapping, Tuple

from zl import markers
from zl.report.run import LoadedRun
from zl.results import compare

_RANK = {"mismatch": 0, "within_tol": 1, "match": 2, "n/a": 3}


def facts(reference: LoadedRun, other: LoadedRun) -> Dict:
    """compare_runs(reference, other) over the results each run loaded once, or an n/a
    record when a side's results are unreadable."""
    try:
        res = compare.compare_runs(reference.dir, other.dir, (reference.results, other.results))
    except compare.ResultsError as exc:
        res = {"value": f"n/a ({exc})", "status": "n/a", "torch_value": "n/a", "ops": {}}
    res["sides"] = sides(res)
    return res


def _worst(values) -> Dict[str, str]:
    vals = [{"status": v["status"], "value": v["value"]} for v in values if v]
    return min(vals, key=lambda r: _RANK.get(r["status"], len(_RANK)),
               default={"status": "n/a", "value": "n/a (nothing recorded)"})


def sides(res: Dict) -> Dict[str, Dict[str, str]]:
    """The three verdicts a page shows, each the worst over the operators: side B vs side A,
    side A vs torch, side B vs torch ({'status', 'value'} each)."""
    ops = res.get("ops") or {}
    if not ops:
        na = {"status": res.get("status", "n/a"), "value": res.get("value", "n/a")}
        return {"b_vs_a": na, "a_vs_torch": dict(na), "b_vs_torch": dict(na)}
    named = lambda op, r: r and {**r, "value": r["value"] if len(ops) == 1 else f"{op}: {r['value']}"}
    return {k: _worst(named(op, o.get(k)) for op, o in sorted(ops.items()))
            for k in ("b_vs_a", "a_vs_torch", "b_vs_torch")}


def torch_only(run: LoadedRun) -> Dict[str, str]:
    """One run's outputs against its torch baseline, worst over its operators."""
    try:
        docs = run.results
    except compare.ResultsError as exc:
        return {"status": "n/a", "value": f"n/a ({exc})"}
    if not docs:
        return {"status": "n/a", "value": "n/a (no outputs recorded)"}
    per_op = {op: {"a_vs_torch": compare.compare_op(doc, doc, "gems", "torch", ("A", "A"))}
              for op, doc in docs.items()}
    return sides({"ops": per_op})["a_vs_torch"]


def print_first(name: str, tag: str, res: Dict, what: str = "B vs A") -> None:
    """A MISMATCH is the first thing a report says, before any speed."""
    if res["status"] == "mismatch":
        print(f"!!! [{tag}] {name}: WRONG RESULTS {what}: {res['value']} "
              "(a speedup below is of a different answer)")


def print_line(name: str, tag: str, res: Dict, what: str = "B vs A") -> None:
    print(f"[{tag}] {name}: results {what}: {res['value']}; vs torch: {res['torch_value']}")


def print_replay_difference(name: str, tag: str, side: str, res: Dict) -> None:
    if res["status"] == "mismatch":
        print("  " + markers.format_marker(markers.REPLAY_RESULTS_DIFFER, label=name, side=side)
              + f" {res['value']} (the replayed configs did not reproduce the recorded outputs)")


def ordered(out: Dict, res: Dict) -> Dict:
    """The report JSON with `results` first when it is a MISMATCH, else after the rest."""
    if res["status"] == "mismatch":
        return {"results": res, **{k: v for k, v in out.items() if k != "results"}}
    out["results"] = res
    return out


def rounds_facts(cells: Mapping[Tuple[int, str], LoadedRun]) -> Dict:
    """Every cell vs r1_A: {'status', 'value', 'torch_value', 'b', 'replays', 'cells'}."""
    record = cells.get((1, "A"))
    if record is None:
        na = {"status": "n/a", "value": "n/a (no r1_A recording among the cells used)"}
        return {**na, "torch_value": "n/a", "cells": {}, "replays": None,
                "sides": {k: dict(na) for k in ("b_vs_a", "a_vs_torch", "b_vs_torch")}}
    per_cell = {f"r{k}_{s}": facts(record, d) for (k, s), d in sorted(cells.items()) if (k, s) != (1, "A")}
    b = [r for c, r in per_cell.items() if c.endswith("_B")]
    a = [r for c, r in per_cell.items() if c.endswith("_A")]
    worst_b = min(b, key=lambda r: _RANK[r["status"]], default=None)
    worst_a = min(a, key=lambda r: _RANK[r["status"]], default=None)
    base = worst_b or {"status": "n/a", "value": "n/a (no B cell)", "torch_value": "n/a"}
    named = lambda c, r: {**r, "value": f"{c}: {r['value']}"}
    return {"status": base["status"], "value": base["value"], "torch_value": base["torch_value"],
            "replays": None if worst_a is None else {"status": worst_a["status"], "value": worst_a["value"]},
            # B cells vs r1_A; r1_A and the A replays vs torch; the B cells vs torch
            "sides": {"b_vs_a": _worst(named(c, r["sides"]["b_vs_a"]) for c, r in per_cell.items()
                                       if c.endswith("_B")),
                      "a_vs_torch": _worst([named("r1_A", r["sides"]["a_vs_torch"])
                                            for r in list(per_cell.values())[:1]]
                                           + [named(c, r["sides"]["b_vs_torch"])
                                              for c, r in per_cell.items() if c.endswith("_A")]),
                      "b_vs_torch": _worst(named(c, r["sides"]["b_vs_torch"])
                                           for c, r in per_cell.items() if c.endswith("_B"))},
            "cells": {c: {"status": r["status"], "value": r["value"]} for c, r in per_cell.items()}}
