"""Per-shape verdicts of an A/B: FASTER, SLOWER, SAME or UNCLEAR, calibrated from A/A controls.

The rule. A control is one shape of an every-level A/A pair (run.pair_code's
`identical_everywhere`: NO_IR_DIFF with every recorded level, binary included, identical)
measured with the judged pair's caliber. Controls are grouped per latency class (log-spaced:
< 10 us, 10-100 us, 100 us-1 ms, >= 1 ms; a 3 us kernel is noisier than a 300 us one). In a
class of n controls the threshold is the k-th smallest |A/A delta| with
k = ceil((n + 1) * (1 - F)), F the false-alarm target (default 5 %). If a new A/A shape is
exchangeable with the class's controls, the chance its |delta| exceeds that threshold is at
most (n + 1 - k) / (n + 1) <= F (the conformal bound; no distribution assumed), so a class
needs n >= 1/F - 1 controls. A shape is FASTER / SLOWER when |delta| > threshold (and, with
rounds, the per-shape Mann-Whitney p < alpha: the rank test agrees), SAME when
|delta| <= threshold, UNCLEAR otherwise, with the reason: no control with this caliber, too
few controls in the class, rounds too few to reach alpha, or the two tests disagree.

A shape measured below MEASURABLE_MS on side A is UNCLEAR and is no control: a graph with no
kernel in it (a view, a metadata op) times as a few nanoseconds. Measured on the H200: unbind
and resize_as_ read 0.000000-0.000010 ms per call, and their A/A ratios spanned 0.002-22.6.

A pair that timed any shape on the direct fallback timer (BENCHMARK_DIRECT_NO_CUDAGRAPH: the
host in the loop; the run.log does not say which shape) is calibrated and judged only with
such pairs (`pair_key`). On an H100 at --overlap 8, fake_quantize_learnable_per_tensor_affine
and index_add_ timed every shape that way and read A/A 9.3 % and 14.8 % (graph-timed nodes
0.04-3 %); among graph-timed controls they widened the 100 us-1 ms threshold to 32.8 %.

A pair is never calibrated from its own shapes: the judged pair's controls are left out (a
pair that is itself an A/A is judged against the others; its verdicts are then the
leave-one-out false-alarm measurement). With rounds, the controls are single-round deltas
while the judged number is a median over rounds: the threshold is conservative there.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

FASTER, SLOWER, SAME, UNCLEAR = "FASTER", "SLOWER", "SAME", "UNCLEAR"
VERDICTS = (FASTER, SLOWER, SAME, UNCLEAR)
DEFAULT_FALSE_ALARM = 0.05
CLASS_EDGES_MS = (0.01, 0.1, 1.0)
CLASS_NAMES = ("< 10 us", "10-100 us", "100 us-1 ms", ">= 1 ms")
MEASURABLE_MS = 0.001   # 1 us: below it no kernel work is resolved (see the module doc)

Control = Dict  # {"latency_ms", "delta_pct", "caliber", "pair" (its pair's name), "source"}


class BadFalseAlarm(ValueError):
    """A false-alarm target outside (0, 0.5]."""


def check_false_alarm(value: float) -> float:
    if not (isinstance(value, (int, float)) and 0.0 < value <= 0.5):
        raise BadFalseAlarm(f"false-alarm target must be in (0, 0.5], got {value!r}")
    return float(value)


def latency_class(latency_ms: float) -> int:
    """Index into CLASS_NAMES of a latency in ms."""
    import numpy as np
    return int(np.searchsorted(CLASS_EDGES_MS, latency_ms, side="right"))


def min_controls(false_alarm: float) -> int:
    """Smallest n with k = ceil((n + 1)(1 - F)) <= n."""
    n = 1
    while _rank(n, false_alarm) > n:
        n += 1
    return n


def _rank(n: int, false_alarm: float) -> int:
    # round() first: (n + 1) * 0.95 must not become 19.000000000000004 -> 20
    return math.ceil(round((n + 1) * (1.0 - false_alarm), 9))


def threshold(abs_deltas: Sequence[float], false_alarm: float) -> Tuple[Optional[float], Optional[float]]:
    """(threshold %, bound on the false-alarm rate) of a class; (None, None) below min_controls."""
    import numpy as np
    n = len(abs_deltas)
    k = _rank(n, false_alarm)
    if n == 0 or k > n:
        return None, None
    return float(np.sort(np.abs(np.asarray(abs_deltas, dtype=float)))[k - 1]), (n + 1 - k) / (n + 1)


def _leave_one_out(values: Sequence[float], false_alarm: float) -> Tuple[int, int]:
    """(controls judged by the others' threshold, of those: exceeding it). With the n values
    sorted, the other n - 1 values' k-th smallest is a[k] for a value at or below position
    k - 1, else a[k - 1] (k = the rank rule for n - 1), so one sort serves every control."""
    import numpy as np
    n = len(values)
    k = _rank(n - 1, false_alarm) if n > 1 else 1
    if n < 2 or k > n - 1:
        return 0, 0
    a = np.sort(np.abs(np.asarray(values, dtype=float)))
    pos = np.arange(n)
    thr = np.where(pos <= k - 1, a[min(k, n - 1)], a[k - 1])
    return n, int(np.sum(a > thr))


def caliber_key(identity: Optional[Dict]) -> Optional[Tuple]:
    """The fields two runs must share for one's A/A noise to stand for the other's: the caliber
    (timer, l2, device, ...) minus the fields naming the operator; None without an identity."""
    from zl.runlog import caliber as cal
    c = cal.caliber_from(identity)
    if c is None:
        return None
    return tuple((k, c.get(k)) for k in cal.CALIBER_FIELDS if k not in cal.PER_OPERATOR_FIELDS)


DIRECT_TIMED = "direct"   # pair_key's timing of a pair with a shape on the direct fallback timer


def timing_of(*runs) -> str:
    """'direct' when a run timed any shape on the direct fallback timer, else 'graph'."""
    from zl.runlog.parse import RunLogError
    for run in runs:
        try:
            if run is not None and run.parsed.markers.get("no_cudagraph"):
                return DIRECT_TIMED
        except (RunLogError, OSError):   # no shapes to judge: the report says so elsewhere
            continue
    return "graph"


def pair_key(first, *others) -> Optional[Tuple]:
    """What a control and a judged pair must share: the caliber of `first`'s identity (side A,
    LoadedRun) and how the pair's runs timed (timing_of); None without an identity."""
    key = caliber_key(first.identity if first is not None else None)
    return None if key is None else key + (("timing", timing_of(first, *others)),)


def pair_controls(name: str, brun, arun, code: Optional[Dict] = None) -> Tuple[List[Control], Optional[str]]:
    """(controls, None) from an every-level A/A pair of LoadedRuns, or ([], why it is none);
    `code`: the pair's code facts where the caller has them (a screen row's), else read here."""
    from zl.report.run import pair_code
    from zl.runlog.parse import RunLogError
    from zl.runlog.stats import pair_logs
    code = code or pair_code(brun, arun)
    if not code["identical_everywhere"]:
        return [], f"{name}: not an A/A: {code['reason']}"
    from zl.runlog import caliber as cal
    problems = cal.unpinned_complaints_of([("A", brun.identity if brun else None),
                                           ("B", arun.identity if arun else None)])
    if problems:        # a shared or otherwise mismatched pair's spread is not this caliber's noise
        return [], f"{name}: not a control: {'; '.join(problems)}"
    try:
        rep = pair_logs(brun.parsed, arun.parsed)
    except RunLogError as exc:
        return [], f"{name}: unreadable: {exc}"
    key = pair_key(brun, arun)
    return [{"latency_ms": p["before_lat"], "delta_pct": p["speedup_pct"], "caliber": key,
             "pair": name, "source": f"{name} {p['key'][2]}"} for p in rep.paired], None


class Calibration:
    """The thresholds for one judged pair: its caliber's controls, its own left out."""

    def __init__(self, controls: Iterable[Control], caliber: Optional[Tuple], source: str,
                 false_alarm: float = DEFAULT_FALSE_ALARM, exclude: Sequence[str] = (),
                 refused: Optional[str] = None) -> None:
        self.false_alarm = check_false_alarm(false_alarm)
        self.source, self.caliber, self.refused = source, caliber, refused
        left_out = set(exclude)
        every = [c for c in controls if c["pair"] not in left_out]
        self.controls = [c for c in every if caliber is not None and c["caliber"] == caliber]
        self.other_caliber = len(every) - len(self.controls)
        self.classes = []
        for i, cname in enumerate(CLASS_NAMES):
            vals = [c["delta_pct"] for c in self.controls
                    if c["latency_ms"] >= MEASURABLE_MS and latency_class(c["latency_ms"]) == i]
            thr, bound = threshold(vals, self.false_alarm)
            judged, exceeded = _leave_one_out(vals, self.false_alarm)
            self.classes.append({"class": cname, "controls": len(vals), "threshold_pct": thr,
                                 "false_alarm_bound": bound,
                                 "false_alarm_bound_pct": None if bound is None else bound * 100,
                                 "loo_judged": judged,
                                 "loo_false_alarms": exceeded,
                                 "loo_false_alarm_rate": exceeded / judged if judged else None})

    def why_none(self) -> Optional[str]:
        """Why no shape can get a FASTER/SLOWER/SAME at all, or None."""
        if self.refused:
            return self.refused
        if self.caliber is None:
            return "the judged pair has no run_identity.json: its caliber is unknown"
        if not self.controls and not self.other_caliber:
            return f"no A/A control: {self.source}"
        if not self.controls:
            timed = " and timing (a shape on the direct fallback timer)" if dict(self.caliber).get(
                "timing") == DIRECT_TIMED else ""
            return (f"no A/A control measured with this pair's caliber{timed} ({self.other_caliber} "
                    f"measured with another caliber or timing): {self.source}")
        return None

    def judge(self, delta_pct: float, latency_ms: float, p: Optional[float] = None,
              alpha: Optional[float] = None, underpowered: str = "") -> Dict:
        """{'verdict', 'reason', 'latency_class', 'threshold_pct'} of one shape (speedup %,
        positive = B faster); p/alpha: the rank test when the shape has rounds."""
        i = latency_class(latency_ms)
        cls = self.classes[i]
        out = {"latency_class": cls["class"], "threshold_pct": cls["threshold_pct"],
               "false_alarm_bound": cls["false_alarm_bound"]}
        none = self.why_none()
        if none:
            return {**out, "verdict": UNCLEAR, "reason": none}
        if not latency_ms >= MEASURABLE_MS:
            return {**out, "verdict": UNCLEAR, "reason": (
                f"side A measured {latency_ms:.6f} ms per call, below {MEASURABLE_MS * 1000:g} us: "
                "no kernel work the timer resolves")}
        if cls["threshold_pct"] is None:
            return {**out, "verdict": UNCLEAR, "reason": (
                f"{cls['controls']} A/A control(s) in class {cls['class']}; the rule needs "
                f">= {min_controls(self.false_alarm)} for a {self.false_alarm:.0%} false-alarm bound")}
        thr = cls["threshold_pct"]
        if abs(delta_pct) <= thr:
            return {**out, "verdict": SAME, "reason": f"|{delta_pct:+.2f}%| <= A/A threshold {thr:.2f}%"}
        if underpowered:
            return {**out, "verdict": UNCLEAR, "reason": underpowered}
        if p is not None and alpha is not None and not p < alpha:
            return {**out, "verdict": UNCLEAR, "reason": (
                f"|{delta_pct:+.2f}%| > A/A threshold {thr:.2f}% but the rank test does not "
                f"agree (p={p:.3f} >= {alpha})")}
        word = FASTER if delta_pct > 0 else SLOWER
        return {**out, "verdict": word, "reason": f"|{delta_pct:+.2f}%| > A/A threshold {thr:.2f}%"
                + (f", p={p:.3f} < {alpha}" if p is not None and alpha is not None else "")}

    def rule(self) -> Dict:
        """The rule as the report states it: text, target, per-class thresholds and the
        leave-one-out false-alarm rate measured on the controls."""
        loo_j = sum(c["loo_judged"] for c in self.classes)
        loo_x = sum(c["loo_false_alarms"] for c in self.classes)
        return {"text": (f"FASTER/SLOWER when |delta| exceeds its latency class's threshold (the "
                         f"k-th smallest |A/A delta| of the class's n controls, k = ceil((n+1)"
                         f"(1-{self.false_alarm:g})): false-alarm rate <= {self.false_alarm:.0%} per "
                         f"shape); SAME within it; UNCLEAR below {min_controls(self.false_alarm)} "
                         "controls in the class, without a control of this caliber, or below "
                         f"{MEASURABLE_MS * 1000:g} us on side A (no kernel work resolved)"),
                "false_alarm_target": self.false_alarm,
                "min_controls_per_class": min_controls(self.false_alarm),
                "control_source": self.source, "controls": len(self.controls),
                "controls_other_caliber": self.other_caliber, "classes": self.classes,
                "loo_false_alarm_rate": loo_x / loo_j if loo_j else None,
                "loo_false_alarm_pct": loo_x / loo_j * 100 if loo_j else None,
                "false_alarm_target_pct": self.false_alarm * 100,
                "loo_judged": loo_j, "unusable": self.why_none()}


def band(rule: Dict) -> Optional[List[float]]:
    """The chart's calibrated band: +-(the largest class threshold), None without one."""
    thr = [c["threshold_pct"] for c in rule["classes"] if c["threshold_pct"] is not None]
    return [-max(thr), max(thr)] if thr and not rule["unusable"] else None


def summary(judged: Sequence[Dict], p_values: Optional[Sequence[Optional[float]]] = None,
            alpha: Optional[float] = None) -> Dict:
    """Verdict counts, the expected number of false FASTER/SLOWER verdicts if every shape
    judged FASTER/SLOWER/SAME were an A/A (the sum of the bounds each was judged with), and with
    rounds the Benjamini-Hochberg adjusted p-values across shapes (scipy)."""
    counts = {v: sum(1 for j in judged if j["verdict"] == v) for v in VERDICTS}
    decided = [j for j in judged if j["verdict"] != UNCLEAR]
    out = {"counts": counts, "shapes": len(judged), "decided": len(decided),
           "expected_false_verdicts": sum(j["false_alarm_bound"] for j in decided)}
    if p_values is not None and alpha is not None:
        idx = [i for i, p in enumerate(p_values) if p is not None]
        q: List[Optional[float]] = [None] * len(p_values)
        if idx:
            from scipy.stats import false_discovery_control
            adj = false_discovery_control([p_values[i] for i in idx], method="bh")
            for i, v in zip(idx, adj):
                q[i] = float(v)
        out["bh_q_values"] = q
        out["bh_discoveries"] = sum(1 for v in q if v is not None and v < alpha)
        out["bh_alpha"] = alpha
    return out


def text_lines(prefix: str, rule: Dict, summ: Dict) -> List[str]:
    """The console lines: counts, expected false verdicts, then the rule and its classes."""
    c = summ["counts"]
    lines = [f"{prefix}: verdicts (A/A-calibrated): " + ", ".join(f"{v}={c[v]}" for v in VERDICTS)
             + f"; expected false FASTER/SLOWER among {summ['decided']} decided shape(s) <= "
             f"{summ['expected_false_verdicts']:.2f}"]
    if "bh_discoveries" in summ:
        lines.append(f"{prefix}: Benjamini-Hochberg over {summ['shapes']} shape p-values: "
                     f"{summ['bh_discoveries']} below FDR {summ['bh_alpha']}")
    lines.append(f"{prefix}: rule: {rule['text']}")
    if rule["unusable"]:
        lines.append(f"{prefix}: every shape UNCLEAR: {rule['unusable']}")
    loo = rule["loo_false_alarm_rate"]
    lines.append(f"{prefix}: controls: {rule['controls']} A/A shape(s) from {rule['control_source']}"
                 + (f", leave-one-out false-alarm rate {loo:.1%} over {rule['loo_judged']}"
                    if loo is not None else ""))
    for cl in rule["classes"]:
        if cl["controls"]:
            thr = cl["threshold_pct"]
            lines.append(f"{prefix}:   {cl['class']:<12} n={cl['controls']:<4} " + (
                f"threshold {thr:.2f}% (false-alarm bound {cl['false_alarm_bound']:.1%})"
                if thr is not None else "too few controls: its shapes are UNCLEAR"))
    return lines


def rounds_controls(label: str, cells: Dict) -> Tuple[List[Control], List[str]]:
    """Controls from one campaign's same-side cells across rounds (r<i>_S vs r<j>_S, i < j):
    each such pair is an A/A when its code is identical at every level (checked per pair)."""
    controls: List[Control] = []
    rejected: List[str] = []
    for side in "AB":
        ks = sorted(k for k, s in cells if s == side)
        for x, i in enumerate(ks):
            for j in ks[x + 1:]:
                got, why = pair_controls(f"{label}:r{i}_{side}~r{j}_{side}", cells[(i, side)],
                                         cells[(j, side)])
                controls += got
                rejected += [why] if why else []
    return controls, rejected


def dir_controls(dirs: Sequence, runs) -> Tuple[List[Control], List[str]]:
    """Controls from --controls DIRs: a screen root (its every-level A/A cells) or an
    --ab-rounds root (its same-side cells across rounds). BadControls for anything else."""
    from pathlib import Path
    from zl.report import views
    from zl.runlog.stats import CELL_RE
    controls: List[Control] = []
    rejected: List[str] = []
    for d in map(Path, dirs):
        if (d / "screen.tsv").is_file():
            got, why = screen_controls(d, views.screen_result(d, runs)["ops"], runs)
        elif d.is_dir() and any(CELL_RE.match(c.name) and (c / "run.log").is_file() for c in d.iterdir()):
            cells = {(int(m.group(1)), m.group(2)): runs.get(c) for c in sorted(d.iterdir())
                     for m in [CELL_RE.match(c.name)] if m and (c / "run.log").is_file()}
            got, why = rounds_controls(str(d), cells)
        else:
            raise BadControls(f"--controls {d}: neither a screen root (screen.tsv) nor an "
                              "--ab-rounds root (r<k>_<A|B>/run.log)")
        controls += got
        rejected += why
    return controls, rejected


def screen_controls(root, ops: Sequence[Dict], runs) -> Tuple[List[Control], List[str]]:
    """Controls from a screen's every-level A/A cells (views.screen_result's `code.aa`)."""
    from pathlib import Path
    controls: List[Control] = []
    rejected: List[str] = []
    for o in ops:
        if not o["code"].get("aa"):
            continue
        got, why = pair_controls(pair_name(o["dirs"]["before"]), runs.get(Path(o["dirs"]["before"])),
                                 runs.get(Path(o["dirs"]["after"])), o["code"])
        controls += got
        rejected += [why] if why else []
    return controls, rejected


def pair_name(before_dir) -> str:
    """How a screen pair's controls are named, and left out when that pair is judged: its
    side A run directory, resolved (an --ab of that cell names the same pair)."""
    import os
    return os.path.realpath(before_dir)


class BadControls(ValueError):
    """A --controls directory that holds no A/A controls of a known layout (exit 2)."""


def apply(rows: Sequence[Dict], cal: Calibration, delta_key: str, latency_key: str,
          p_key: Optional[str] = None, alpha: Optional[float] = None, underpowered: str = "",
          rejected: Sequence[str] = ()) -> Dict:
    """Judge every row in place (aa_verdict, aa_reason, latency_class, threshold_pct, bound)
    and return {'rule', 'summary', 'band_pct', 'rejected_controls'} for the report dict."""
    judged = []
    for r in rows:
        j = cal.judge(r[delta_key], r[latency_key], r.get(p_key) if p_key else None, alpha,
                      underpowered)
        r.update({"aa_verdict": j["verdict"], "aa_reason": j["reason"],
                  "latency_class": j["latency_class"], "threshold_pct": j["threshold_pct"],
                  "false_alarm_bound": j["false_alarm_bound"]})
        judged.append(j)
    rule = cal.rule()
    if alpha is not None:
        rule["text"] += (f"; with rounds, FASTER/SLOWER also need the shape's Mann-Whitney "
                         f"p < {alpha} and enough rounds to reach it, else UNCLEAR")
        rule["alpha"] = alpha
    return {"rule": rule, "band_pct": band(rule), "rejected_controls": list(rejected),
            "summary": summary(judged, [r.get(p_key) for r in rows] if p_key else None, alpha)}


def judge_screen(result: Dict, runs, false_alarm: float = DEFAULT_FALSE_ALARM,
                 more: Sequence = (), allow_caliber_mismatch: bool = False) -> Dict:
    """Every screen cell's shapes judged (views.screen_result's ops, in place) against the
    screen's every-level A/A cells and those of the `more` roots (--controls: e.g. an A/A
    screen of the same nodes), the judged cell left out; one rule and summary over all. A cell
    the caliber guard refuses (its `caliber_problems`: the sides measured otherwise, a shared
    device, nothing pinned) gets UNCLEAR on every shape, naming them, unless allowed."""
    from pathlib import Path
    root = Path(result["root"])
    controls, rejected = screen_controls(root, result["ops"], runs)
    if more:
        extra, why = dir_controls(more, runs)
        controls, rejected = controls + extra, rejected + why
    where = "the screen's A/A cells (every level identical, binary included)" + (
        f" and --controls {' '.join(map(str, more))}" if more else "")
    rows: List[Dict] = []
    for o in result["ops"]:
        o["change_signature"] = cell_signature(o)   # the page's per-shape "change" column
        if not o.get("shapes"):
            continue
        problems = o.get("caliber_problems") or []
        refused = (f"not judged: the caliber guard refuses this pair ({'; '.join(problems)}); "
                   "--allow-caliber-mismatch judges it" if problems and not allow_caliber_mismatch else None)
        cal = Calibration(controls, pair_key(*(runs.get(Path(o["dirs"][s])) for s in ("before", "after"))),
                          f"{where}, this cell left out", false_alarm,
                          exclude=[pair_name(o["dirs"]["before"])], refused=refused)
        apply(o["shapes"], cal, "speedup_pct", "before_lat")
        o["aa_verdict_counts"] = {v: sum(1 for s in o["shapes"] if s["aa_verdict"] == v) for v in VERDICTS}
        rows += o["shapes"]
    first = next((o for o in result["ops"] if o.get("shapes")), None)
    everyone = Calibration(controls, pair_key(*(runs.get(Path(first["dirs"][s])) for s in ("before", "after")))
                           if first else None, f"{where} (the rule shown for the first measured cell's caliber)",
                           false_alarm)
    rule = everyone.rule()
    judged = [{"verdict": r["aa_verdict"], "false_alarm_bound": r["false_alarm_bound"]} for r in rows]
    # The screen's own A/A cells, each judged by the others: every FASTER/SLOWER among them is
    # a false alarm, measured, beside the number the bounds expect.
    aa = [{"verdict": s["aa_verdict"], "false_alarm_bound": s["false_alarm_bound"]}
          for o in result["ops"] if o["code"].get("aa") for s in o.get("shapes") or []]
    return {"rule": rule, "band_pct": band(rule), "rejected_controls": rejected,
            "summary": summary(judged), "aa_cells": summary(aa),
            "change_groups": change_groups(result["ops"])}


def aa_line(prefix: str, aa: Dict) -> str:
    """The measured false alarms of a screen's A/A cells, beside their expected number."""
    c = aa["counts"]
    return (f"{prefix}: A/A cells judged like the others: {c[FASTER] + c[SLOWER]} FASTER/SLOWER "
            f"(false alarms) among {aa['decided']} decided shape(s) of {aa['shapes']}, expected "
            f"<= {aa['expected_false_verdicts']:.2f}")


def lead(result: Dict, block: Dict) -> Dict:
    """The report dict with `verdicts` right after `results` (when a MISMATCH put it first),
    `mode` and `label`: the JSON reads in the order the page does."""
    head = [k for k in list(result)[:1] if k == "results"] + [k for k in ("mode", "label") if k in result]
    out = {k: result[k] for k in head}
    out["verdicts"] = block
    out.update((k, v) for k, v in result.items() if k not in out)
    return out


def _count_delta(counts: Dict[str, str], what: str, label: str) -> Optional[str]:
    try:
        d = int(counts.get(f"{what}_after") or "") - int(counts.get(f"{what}_before") or "")
    except ValueError:
        return None
    return f"{d:+d} {label}" if d else None


def cell_signature(o: Dict) -> Optional[str]:
    """A screen cell's change signature (change_groups), None for a cell whose code did not
    change (NO_IR_DIFF) or that measured nothing (NO_ROWS, NO_TRITON)."""
    if o["verdict"] in ("NO_IR_DIFF", "NO_ROWS", "NO_TRITON"):
        return None
    word = o["verdict"] if o["verdict"] == "WRONG_RESULTS" else o["code"].get("verdict") or o["verdict"]
    kernel_sig = (o.get("changes") or {}).get("signature")
    return ", ".join([word] + ([kernel_sig] if kernel_sig else [
        x for x in (_count_delta(o.get("counts") or {}, "kernels", "kernels"),
                    _count_delta(o.get("counts") or {}, "cvt", "convert_layout")) if x]))


def change_groups(ops: Sequence[Dict]) -> List[Dict]:
    """The screen's changed cells (code verdict other than NO_IR_DIFF, rows on both sides)
    grouped by one change signature: the first differing level (the code verdict, e.g.
    IR_CHANGED@llir; WRONG_RESULTS stays that), then the cell's per-kernel signature
    (zl.report.changes, e.g. "+1 convert_layout, -8 registers") where its run directories
    give one, else the screen.tsv counts that moved (kernels, ttg.convert_layout); with the
    shape verdicts of the group; largest group first, so a pattern across an inventory reads
    as one row, not hundreds."""
    groups: Dict[str, Dict] = {}
    for o in ops:
        sig = cell_signature(o)
        if sig is None or not o.get("shapes"):
            continue
        g = groups.setdefault(sig, {"signature": sig, "cells": [],
                                    "shape_verdicts": {v: 0 for v in VERDICTS}})
        g["cells"].append(o["cell"])
        for sh in o["shapes"]:
            g["shape_verdicts"][sh["aa_verdict"]] += 1
    return sorted(groups.values(), key=lambda g: (-len(g["cells"]), g["signature"]))
