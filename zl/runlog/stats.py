"""Pair run.log rows across runs and summarise single-pair and multi-round A/B results.

Conventions (one place, every report uses them):
- A row's key is (operator, dtype, size detail, occurrence). The occurrence index
  counts every row with that (op, dtype, detail) in log order, FAILED ones included,
  so one failed duplicate does not shift its twin onto the wrong partner (BLAS
  measures a shape twice at --level comprehensive).
- Only rows that succeeded with a positive gems latency on *both* sides count;
  every other key is listed as unpaired with its reason, so an incomplete pairing
  cannot pass for a complete range.
- speedup % = before/after - 1 (gems latency): positive means the after side (B)
  is faster.

Round statistics (beyond the seed's medians and spreads):
- Per shape, with >= 3 complete rounds, a Mann-Whitney U test (two-sided, scipy)
  on the two sides' per-round latencies at alpha 0.05, and the effect must also
  exceed the measured side noise (the larger side's max/min - 1). Both: a p-value
  alone calls a 0.05% shift "faster" on a quiet machine; a threshold alone cannot
  tell a real 1% from a noisy 1%.
- Why MWU and not a Wilcoxon signed-rank on paired per-round log-ratios: at the
  round counts a campaign affords, the smallest two-sided p the exact tests can
  reach is 2/C(2n, n) for MWU (n=3: 0.100, n=4: 0.029, n=6: 0.0022) but 2/2^n for
  the signed-rank test (n=4: 0.125, n=5: 0.0625, n=6: 0.031). The signed-rank test
  needs 6 rounds for any verdict at alpha 0.05, MWU needs 4; the drift that
  pairing by round would absorb is already countered by alternating the A/B order
  every round (ab_repeat.sh). With 3 rounds no test can reach alpha 0.05, so those
  shapes are labelled `underpowered`, never "no detectable difference".
- Per operator, a geometric-mean speedup over shapes with a 95% percentile
  bootstrap interval over rounds (resampling whole rounds keeps each round's
  machine state together; numpy, fixed seed, so a report is reproducible).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from zl.runlog.parse import ParsedLog, Row, read_run_log

ALPHA = 0.05
MIN_ROUNDS_FOR_TEST = 3
BOOTSTRAP_RESAMPLES = 10000
BOOTSTRAP_SEED = 20240601

Key = Tuple[str, str, str, int]


def key_text(key: Key) -> str:
    op, dtype, detail, occ = key
    return f"{op} {dtype} {detail}" + (f" #{occ + 1}" if occ else "")


def _usable(row: Row) -> Optional[str]:
    """None when the row counts, else why it does not."""
    if row.row_status != "SUCCESS":
        return row.row_status
    if row.gems_lat is None:
        return "latency N/A"
    if not row.gems_lat > 0 or math.isinf(row.gems_lat):
        return f"latency {row.gems_lat}"
    return None


def index_rows(parsed: ParsedLog) -> Dict[Key, Row]:
    out: Dict[Key, Row] = {}
    seen: Dict[Tuple[str, str, str], int] = {}
    for row in parsed.rows:
        base = (row.op, row.dtype, row.size_detail)
        occ = seen.get(base, 0)
        seen[base] = occ + 1
        out[base + (occ,)] = row
    return out


@dataclass
class PairReport:
    paired: List[Dict] = field(default_factory=list)
    unpaired: List[Dict] = field(default_factory=list)
    before_markers: Dict[str, int] = field(default_factory=dict)
    after_markers: Dict[str, int] = field(default_factory=dict)
    before_failed: int = 0
    after_failed: int = 0
    before_failures: str = ""
    after_failures: str = ""
    # why a side did not finish ("" = it did): its log's ParsedLog.unfinished, which the reports
    # replace with zl.report.run.unfinished_reason (log and identity); not a complete pair
    before_unfinished: str = ""
    after_unfinished: str = ""

    @property
    def deltas(self) -> List[float]:
        return [p["speedup_pct"] for p in self.paired]

    def summary(self) -> Dict:
        d = self.deltas
        geo = (math.exp(sum(math.log(p["before_lat"] / p["after_lat"]) for p in self.paired)
                        / len(self.paired)) - 1.0) * 100.0 if self.paired else None
        return {
            "paired": len(self.paired), "unpaired": len(self.unpaired),
            "min_pct": min(d) if d else None, "max_pct": max(d) if d else None,
            "median_pct": median(d) if d else None, "geomean_pct": geo,
            "complete": (not self.unpaired and not self.before_failed and not self.after_failed
                         and not self.before_unfinished and not self.after_unfinished),
            "unfinished": {side: why for side, why in (("before", self.before_unfinished),
                                                       ("after", self.after_unfinished)) if why},
        }


def pair_logs(before: ParsedLog, after: ParsedLog) -> PairReport:
    rep = PairReport(before_markers=dict(before.markers), after_markers=dict(after.markers),
                     before_failed=before.n_failed, after_failed=after.n_failed,
                     before_failures=before.failure_text(), after_failures=after.failure_text(),
                     before_unfinished=before.unfinished, after_unfinished=after.unfinished)
    bi, ai = index_rows(before), index_rows(after)
    order = list(bi) + [k for k in ai if k not in bi]
    for key in order:
        b, a = bi.get(key), ai.get(key)
        if b is None or a is None:
            rep.unpaired.append({"key": key, "reason": "only in before" if a is None else "only in after"})
            continue
        why_b, why_a = _usable(b), _usable(a)
        if why_b or why_a:
            reason = "; ".join(x for x in (f"before {why_b}" if why_b else "",
                                           f"after {why_a}" if why_a else "") if x)
            rep.unpaired.append({"key": key, "reason": reason})
            continue
        why = _ratio_problem(b.gems_lat, a.gems_lat)
        if why:
            rep.unpaired.append({"key": key, "reason": why})
            continue
        rep.paired.append({"key": key, "before_lat": b.gems_lat, "after_lat": a.gems_lat,
                           "speedup_pct": (b.gems_lat / a.gems_lat - 1.0) * 100.0})
    return rep


def _ratio_problem(before: float, after: float) -> Optional[str]:
    """None when before/after is a finite, positive ratio (its log and its speedup % are
    numbers); else why the row cannot be paired. Two positive latencies can still overflow
    (0.01 ms / 1e-320 ms is inf), and an inf would become `Infinity` in --json."""
    ratio = before / after
    if math.isfinite(ratio) and ratio > 0:
        return None
    return f"latency ratio not a finite number (before {before!r} ms, after {after!r} ms)"


# ---------------------------------------------------------------- rounds

CELL_RE = re.compile(r"^r(\d+)_([AB])$")


@dataclass
class RoundsData:
    rounds: List[int]                      # complete round numbers, ascending
    cells: Dict[Tuple[int, str], Path]     # every cell with a run.log
    incomplete: List[str]                  # e.g. "round 3: no B"
    logs: Dict[Tuple[int, str], ParsedLog]


def find_cells(root: Path) -> Dict[Tuple[int, str], Path]:
    cells = {}
    for d in sorted(Path(root).iterdir()):
        m = CELL_RE.match(d.name)
        if m and d.is_dir() and (d / "run.log").is_file():
            cells[(int(m.group(1)), m.group(2))] = d
    return cells


def load_rounds(root: Path, cells: Optional[Dict[Tuple[int, str], Path]] = None,
                read: Optional[Callable[[Tuple[int, str]], ParsedLog]] = None) -> RoundsData:
    """Rounds of `root` (or of the given cells only, e.g. one campaign's). `read(cell)`: the
    cell's parsed log as a report already loaded it (else read_run_log here)."""
    cells = find_cells(root) if cells is None else cells
    nums = sorted({k for k, _ in cells})
    rounds, incomplete = [], []
    for k in nums:
        missing = [s for s in "AB" if (k, s) not in cells]
        if missing:
            incomplete.append(f"round {k}: no run.log for side {''.join(missing)}")
        else:
            rounds.append(k)
    logs = {c: read(c) if read else read_run_log(cells[c]) for c in cells if c[0] in rounds}
    return RoundsData(rounds=rounds, cells=cells, incomplete=incomplete, logs=logs)


def min_mwu_p(n_a: int, n_b: int) -> float:
    """Smallest two-sided exact Mann-Whitney p attainable with these sample sizes."""
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def verdict(a: Sequence[float], b: Sequence[float], noise_pct: float,
            alpha: float = ALPHA) -> Tuple[str, Optional[float]]:
    """(verdict, p): faster / slower (side B relative to A), no detectable difference,
    underpowered (the sample sizes cannot reach alpha), or n/a below 3 rounds."""
    if min(len(a), len(b)) < MIN_ROUNDS_FOR_TEST:
        return "n/a", None
    if len(set(a)) == 1 and len(set(b)) == 1 and a[0] == b[0]:
        return "no detectable difference", 1.0
    from scipy.stats import mannwhitneyu  # lazy: the drivers' per-cell calls need no scipy

    p = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
    if min_mwu_p(len(a), len(b)) > alpha:
        return "underpowered", p
    effect = (median(a) / median(b) - 1.0) * 100.0
    if p < alpha and abs(effect) > noise_pct:
        return ("faster" if effect > 0 else "slower"), p
    return "no detectable difference", p


def bootstrap_ci(samples: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = BOOTSTRAP_SEED, level: float = 0.95) -> Tuple[float, float]:
    """Percentile bootstrap interval of the mean (numpy, fixed seed)."""
    import numpy as np

    x = np.asarray(samples, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    lo, hi = np.percentile(means, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


def _shape_series(key: Key, idx: Dict, rounds: List[int]
                  ) -> Tuple[List[float], List[float], List[str]]:
    """Per-round A and B latencies of one shape, and why any round cannot count."""
    a_vals, b_vals, missing = [], [], []
    for k in rounds:
        ra, rb = idx[(k, "A")].get(key), idx[(k, "B")].get(key)
        for side, row in (("A", ra), ("B", rb)):
            why = "missing" if row is None else _usable(row)
            if why:
                missing.append(f"r{k}_{side} {why}")
        if ra is not None and rb is not None and not _usable(ra) and not _usable(rb):
            a_vals.append(ra.gems_lat)
            b_vals.append(rb.gems_lat)
    return a_vals, b_vals, missing


def _shape_stats(key: Key, a_vals: List[float], b_vals: List[float]) -> Dict:
    deltas = [(x / y - 1.0) * 100.0 for x, y in zip(a_vals, b_vals)]
    am, bm = median(a_vals), median(b_vals)
    sa = (max(a_vals) / min(a_vals) - 1.0) * 100.0
    sb = (max(b_vals) / min(b_vals) - 1.0) * 100.0
    v, p = verdict(a_vals, b_vals, max(sa, sb))
    return {
        "key": key, "a": a_vals, "b": b_vals, "a_median": am, "b_median": bm,
        "speedup_pct": (am / bm - 1.0) * 100.0, "deltas": deltas,
        "delta_min": min(deltas), "delta_max": max(deltas),
        "sign_stable": all(d > 0 for d in deltas) or all(d < 0 for d in deltas)
                       or all(d == 0 for d in deltas),
        "a_spread_pct": sa, "b_spread_pct": sb, "p_value": p, "verdict": v,
    }


def _geomean_over_rounds(shapes: List[Dict], n_rounds: int
                         ) -> Tuple[List[float], Optional[float], Optional[Tuple[float, float]]]:
    """(per-round median deltas, geomean speedup %, bootstrap 95% CI over rounds)."""
    if not shapes:
        return [], None, None
    per_round = [median(s["deltas"][i] for s in shapes) for i in range(n_rounds)]
    geo_rounds = [sum(math.log(s["a"][i] / s["b"][i]) for s in shapes) / len(shapes)
                  for i in range(n_rounds)]
    geo = (math.exp(sum(geo_rounds) / len(geo_rounds)) - 1.0) * 100.0 if geo_rounds else None
    ci = None
    if len(geo_rounds) >= 2:
        lo, hi = bootstrap_ci(geo_rounds)
        ci = ((math.exp(lo) - 1.0) * 100.0, (math.exp(hi) - 1.0) * 100.0)
    return per_round, geo, ci


def analyse_rounds(data: RoundsData) -> Dict:
    """Per-shape and per-operator statistics over complete rounds (see module docstring)."""
    ks = data.rounds
    idx = {c: index_rows(p) for c, p in data.logs.items()}
    all_keys: List[Key] = []
    for c in sorted(idx):
        all_keys += [k for k in idx[c] if k not in all_keys]
    shapes, unpaired = [], []
    for key in all_keys:
        a_vals, b_vals, missing = _shape_series(key, idx, ks)
        if not missing:
            missing = [why for why in (_ratio_problem(x, y) for x, y in
                                       [*zip(a_vals, b_vals), (max(a_vals), min(a_vals)),
                                        (max(b_vals), min(b_vals))]) if why][:1]
        if missing:
            unpaired.append({"key": key, "reason": ", ".join(missing)})
        else:
            shapes.append(_shape_stats(key, a_vals, b_vals))
    per_round, geo, ci = _geomean_over_rounds(shapes, len(ks))
    spreads = [s["a_spread_pct"] for s in shapes] + [s["b_spread_pct"] for s in shapes]
    counts: Dict[str, int] = {}
    for s in shapes:
        counts[s["verdict"]] = counts.get(s["verdict"], 0) + 1
    n = len(ks)
    return {
        "rounds": n, "round_numbers": ks, "incomplete_rounds": data.incomplete,
        "shapes": shapes, "unpaired": unpaired,
        "per_round_median_pct": per_round,
        "median_speedup_pct": median(s["speedup_pct"] for s in shapes) if shapes else None,
        "median_side_noise_pct": median(spreads) if spreads else None,
        "sign_unstable": sum(1 for s in shapes if not s["sign_stable"]),
        "geomean_speedup_pct": geo, "geomean_ci95_pct": ci,
        "verdict_counts": counts,
        "min_attainable_p": min_mwu_p(n, n) if n else None,
        "verdicts_possible": n >= MIN_ROUNDS_FOR_TEST and min_mwu_p(n, n) <= ALPHA,
    }


# --- kernel intervals of a graph replay (CUPTI), cut into calls ----------------------------

def _call_groups(intervals, calls: int):
    """`calls` calls' kernel (start, end) intervals, sorted by start, cut into equal groups
    (each call launches the same kernels)."""
    if calls < 1 or not intervals or len(intervals) % calls:
        raise ValueError(f"{len(intervals)} kernel intervals do not split into {calls} calls")
    per = len(intervals) // calls
    ordered = sorted(intervals)
    return [ordered[i:i + per] for i in range(0, len(ordered), per)]


def call_period_us(intervals, calls: int) -> float:
    """Median time (us) from one call's first kernel start to the next call's: a call's
    kernels plus the gap before the next call, which is what a graph timer's per-call
    reading holds (relu on the H200: graph 0.7-0.9 us above the kernel time, softmax none,
    docs/validation/timing.md; a period equal to the graph reading puts that excess in the
    gaps)."""
    groups = _call_groups(intervals, calls)
    if len(groups) < 2:
        raise ValueError("a call period needs at least 2 calls")
    starts = [g[0][0] for g in groups]
    return float(median(b - a for a, b in zip(starts, starts[1:])))


def call_span_us(intervals, calls: int) -> float:
    """Median span (us) of one call, from `calls` calls' kernel (start, end) intervals in us:
    sorted by start, cut into `calls` equal groups (each call launches the same kernels)."""
    spans = [max(e for _, e in g) - g[0][0] for g in _call_groups(intervals, calls)]
    return float(median(spans))


# Latency bands of an A/A's shapes (side A's gems latency, ms). On an H100 at --overlap 12 the
# shapes under 5 us read a median |delta| of 3.7 %, those over 50 us 0.22 %; one case at a
# time 0.33 % and 0.02 %: a single median over every shape hides where the noise sits.
AA_BANDS_MS = (0.005, 0.05)


def aa_by_latency(pairs: Sequence[Tuple[float, float]], edges_ms: Sequence[float] = AA_BANDS_MS) -> List[Dict]:
    """A/A noise per band of side A's latency: `pairs` are (side A latency ms, B/A - 1) per
    shape. -> one dict per band ("lo_ms", "hi_ms" (None: open), "shapes", "median_abs" and
    "positive_share", None without shapes), bands in order, empty ones included."""
    bounds = [0.0, *edges_ms, None]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        d = [delta for lat, delta in pairs if lat >= lo and (hi is None or lat < hi)]
        out.append({"lo_ms": lo, "hi_ms": hi, "shapes": len(d),
                    "median_abs": median(abs(x) for x in d) if d else None,
                    "positive_share": sum(1 for x in d if x > 0) / len(d) if d else None})
    return out


def band_label(band: Dict) -> str:
    """`< 5 us`, `5-50 us`, `>= 50 us` from a band of aa_by_latency."""
    lo, hi = band["lo_ms"] * 1000, None if band["hi_ms"] is None else band["hi_ms"] * 1000
    if not lo:
        return f"< {hi:g} us"
    return f">= {lo:g} us" if hi is None else f"{lo:g}-{hi:g} us"


# overlap_throughput.py --reference: each node's A/A beside another run's
def load_reference(path: Path, k: Optional[int]) -> Dict:
    """One overlap value's results from another overlap_throughput.json (default: its first)."""
    try:
        results = json.loads(path.read_text())["results"]
        return next(r for r in results if k is None or r["overlap"] == k)
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"--reference {path}: not an overlap_throughput.json") from None
    except StopIteration:
        raise ValueError(f"--reference {path}: holds no overlap {k}") from None


def against_reference(results: List[Dict], ref: Dict, path: Path) -> Dict:
    """Each node's A/A here beside the reference's, on the nodes both measured (every side
    PASS with an A/A), per overlap value: the medians, and on how many nodes it is no higher."""
    out = {"path": str(path), "overlap": ref["overlap"], "per_overlap": {}}
    for r in results:
        common = sorted(n for n, v in r["nodes"].items() if v.get("aa_median_abs_delta") is not None
                        and (ref["nodes"].get(n) or {}).get("aa_median_abs_delta") is not None)
        pairs = {n: (ref["nodes"][n]["aa_median_abs_delta"], r["nodes"][n]["aa_median_abs_delta"]) for n in common}
        out["per_overlap"][r["overlap"]] = {
            "nodes": pairs, "median_reference": float(median([a for a, _ in pairs.values()])) if pairs else None,
            "median": float(median([b for _, b in pairs.values()])) if pairs else None,
            "no_higher": sum(1 for a, b in pairs.values() if b <= a)}
    return out
