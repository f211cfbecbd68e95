"""Spread weighted work over devices: longest first onto the least loaded device (LPT).

Why not hash shards for a campaign: on an S5000, 17 operators' six-round campaign had a
120-minute critical path with one card idle under hash shards, 70 minutes by measured time.
And why no cleverer packing: topk alone took 70.6 minutes against an even share of 45.4, so
the heaviest operator sets the floor; more cards do not lower it.

Weights from a screen.tsv are `elapsed_before + elapsed_after` (one pair = 2 cells); N rounds
are 2N cells, so a campaign estimate is weight * N (it is not weight * N / 6: that mistake
once reported topk's 70.6 minutes as 11.8).
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from zl import screen_verdict as sv
from zl.ir import fingerprint as fp

Item = Tuple[str, float]


class PartitionError(ValueError):
    """No devices, or a screen table that cannot be read."""


def plan(items: Sequence[Item], slots: Sequence[str]) -> Dict[str, List[Item]]:
    """Greedy LPT; ties by name and slot order, so one input always gives one plan."""
    if not slots:
        raise PartitionError("need at least one device")
    out: Dict[str, List[Item]] = {s: [] for s in slots}
    load: Dict[str, float] = {s: 0.0 for s in slots}
    order = {s: i for i, s in enumerate(slots)}
    for name, weight in sorted(items, key=lambda kv: (-kv[1], kv[0])):
        target = min(slots, key=lambda s: (load[s], order[s]))
        out[target].append((name, weight))
        load[target] += weight
    return out


def loads(assignment: Dict[str, List[Item]]) -> Dict[str, float]:
    return {s: sum(w for _, w in v) for s, v in assignment.items()}


@dataclass
class PlanStats:
    critical_path: float     # the slowest device's load
    even_share: float        # total / devices
    heaviest: float          # the heaviest single item
    imbalance: float         # critical_path / even_share (1.0 = perfect)

    @property
    def floor(self) -> float:
        return max(self.even_share, self.heaviest)

    @property
    def heaviest_sets_floor(self) -> bool:
        return self.heaviest > self.even_share


def stats(assignment: Dict[str, List[Item]]) -> PlanStats:
    ld = loads(assignment)
    total = sum(ld.values())
    share = total / len(ld) if ld else 0.0
    heaviest = max((w for v in assignment.values() for _, w in v), default=0.0)
    crit = max(ld.values(), default=0.0)
    return PlanStats(crit, share, heaviest, crit / share if share > 0 else 1.0)


@dataclass
class ScreenRow:
    op: str
    op_file: str
    dtypes: str       # comma separated; "" = the operator's own set
    verdict: str
    weight: float     # seconds of one before/after pair

    @property
    def ops_entry(self) -> str:
        """The OPS word of ab_repeat.sh: OP:OP_FILE[:DTYPES]."""
        return f"{self.op}:{self.op_file}" + (f":{self.dtypes}" if self.dtypes else "")


def _pair_seconds(row: Dict[str, str]) -> float:
    """elapsed_before + elapsed_after of a screen row, or NaN when either is missing,
    unparseable, non-finite or negative: such a row gets the median fill like a missing one
    (a nan or negative weight would otherwise print as the plan's critical path)."""
    try:
        sides = [float(row["elapsed_before"]), float(row["elapsed_after"])]
    except (KeyError, TypeError, ValueError):
        return float("nan")
    total = sides[0] + sides[1]
    if not (math.isfinite(total) and min(sides) >= 0):
        return float("nan")
    return total


def read_screen(path: Path) -> Tuple[List[ScreenRow], List[str]]:
    """Rows of an ab_rlc_test.sh (or run_batch --switch) screen.tsv, and warnings."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except OSError as exc:
        raise PartitionError(f"cannot read screen {path}: {exc}") from None
    if not rows or "op" not in rows[0] or "verdict" not in rows[0]:
        raise PartitionError(f"{path}: not a screen.tsv (needs op and verdict columns and a row)")
    out, unweighted = [], []
    for r in rows:
        w = _pair_seconds(r)
        if w != w:
            unweighted.append(r["op"])
        dt = (r.get("dtypes") or "").strip()
        out.append(ScreenRow(r["op"], r.get("op_file") or r["op"], "" if dt == "<all>" else dt,
                             r.get("verdict", ""), w))
    warnings = []
    known = [x.weight for x in out if x.weight == x.weight]
    if unweighted:
        fill = statistics.median(known) if known else 1.0
        warnings.append(f"{len(unweighted)} row(s) without a usable elapsed_before/elapsed_after "
                        f"({', '.join(unweighted[:5])}): weighted {fill:g} s (the median), "
                        "so their placement is a guess")
        for x in out:
            if x.weight != x.weight:
                x.weight = fill
    return out, warnings


# Screen verdicts worth a multi-round A/B: the code differs at some level (never WRONG_RESULTS,
# never NO_IR_DIFF, whose range is the noise floor, nor VARIANTS_DIFFER: every variant both
# sides compiled is identical, only the argument-value specialisations compiled differ).
REPEAT_VERDICTS = "IR_CHANGED,BINARY_CHANGED"
# The words a screen.tsv verdict can be (zl/screen_verdict.py). IR_CHANGED alone was the only
# code verdict of the first screens (their TTGIR differed); as a filter it is every level's.
IR_CHANGED = fp.IR_CHANGED_AT.rstrip("@")
VERDICT_WORDS = (sv.NO_ROWS, sv.WRONG_RESULTS, sv.NO_TRITON, IR_CHANGED, fp.BINARY_CHANGED,
                 fp.VARIANTS_DIFFER, fp.NO_IR_DIFF, fp.NO_IR)


def verdict_filter(wanted: str) -> List[str]:
    """The words of a comma list; `WORD@*` (as campaign.sh and ab_rlc_test.sh print
    `IR_CHANGED@*`) is WORD, which matches every level anyway."""
    words = [w.strip() for w in wanted.split(",") if w.strip()]
    return [w[:-2] if w.endswith("@*") else w for w in words]


def unknown_verdict_words(wanted: str, rows: Sequence[ScreenRow]) -> List[str]:
    """Filter words that name no verdict: neither a screen verdict (IR_CHANGED@<level> with a
    level of zl.ir.fingerprint.LEVEL_ORDER) nor a verdict this screen holds. A typo would
    otherwise plan nothing and read as `nothing to plan`."""
    present = {r.verdict for r in rows}
    levels = {fp.IR_CHANGED_AT + lv for lv in fp.LEVEL_ORDER if lv != "binary"}
    return [w for w in verdict_filter(wanted)
            if w not in VERDICT_WORDS and w not in levels and w not in present]


def verdict_selected(verdict: str, wanted: str) -> bool:
    """`wanted` is a comma list; a word matches itself and its `@<level>` forms
    (IR_CHANGED matches IR_CHANGED@llir); an empty `wanted` matches every verdict."""
    words = verdict_filter(wanted)
    return not words or any(verdict == w or verdict.startswith(w + "@") for w in words)
