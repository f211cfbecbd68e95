#!/usr/bin/env python3
"""Evidence for the per-shape verdict rule (zl/report/verdicts.py) on one set of nodes: its
false-alarm rate on held-out A/A measurements, its SLOWER set under a real switch, and the
codegen-vs-retune split.

run_batch.py screens of the same nodes, each a batch directory under --out, in this order:

    aa1     run_batch.py --ops <nodes> --switch ZL_AA_NOOP --dtypes D --overlap K   (calibration)
    aa2     the same again, independent (held out: judged, never a control of its own shapes);
            only with --held-out aa2 (the default)
    switch  run_batch.py --ops <nodes> --switch NAME --retune --dtypes D --overlap K
            (without --retune when --retune-ops is given)
    retune  run_batch.py --ops <retune ops> --switch NAME --retune ...; only with --retune-ops

ZL_AA_NOOP changes nothing: side A records the autotune picks, side B replays them. --aa1 DIR
reuses an existing A/A screen batch (e.g. overlap_throughput.py's overlap-K folder, measured
at the same --overlap: controls count only with the judged pair's caliber) instead of aa1.
Two options cut the side runs (2 + 2 + 3 per node by default) to fit a device session:
--held-out nodes drops aa2 and measures (a) on aa1 itself, one node held out at a time;
--retune-ops NAME... runs side C only for those nodes (stage retune), not for every node.

The report (stdout markdown, OUT/verdict_evidence.json; batch_summary.py's own JSON and text
per stage under OUT/report/) reads `batch_summary.py --screen <stage> --controls <aa1>
--false-alarm F --json`, and for the noise figure (and --held-out nodes' (a)) `batch_summary.py
--screen <aa1>`:

(a) false alarms: the held-out A/A shapes read FASTER or SLOWER, as a share of their decided
    shapes (FASTER/SLOWER/SAME) against F, beside the expected count (the sum of the bounds
    each shape was judged with) and the binomial tail P(X >= observed | decided, F) (shapes of
    one node share a process: read it as indicative); per latency class from the per-shape
    rows. --held-out aa2: aa2's shapes, the controls aa1's A/A cells and aa2's other A/A cells
    (batch_summary.py always adds a screen's own A/A cells, the judged cell left out).
    --held-out nodes: aa1's shapes from `batch_summary.py --screen <aa1>` alone, each node
    judged against aa1's other A/A nodes: a screen cell is one node (its dtypes included) and
    the calibration leaves out the judged cell's whole pair, every shape of it, so this is a
    leave-one-node-out measurement on one A/A screen (no second screen's independence: a
    disturbance shared by the whole aa1 run is in the controls too).
(b) the switch: verdict counts; the nodes with a SLOWER shape against the nodes whose median
    slowdown exceeds the noise. Slowdown of a shape: -speedup_pct (speedup_pct = A/B - 1, %),
    in the unit the rule thresholds. Noise of a shape: aa1's threshold for its latency class
    (aa1's own rule: the k-th smallest |A/A delta| of the class, k = ceil((n+1)(1-F))). A node
    exceeds when the median of its shapes' slowdowns > the median of their noises; a node with
    a shape whose class has no aa1 threshold is undetermined; shapes below the rule's 1 us floor
    (no measured noise) are left out of both medians, and a node of only such is undetermined.
    Both sets, their symmetric difference, and whether they are equal (an undetermined node is
    in neither unless a shape of it read SLOWER); beside them, the SLOWER shapes of nodes whose
    median stays under the noise, against the false calls the rule's bound allows.
(c) codegen vs retune, per node with a side C (the switch stage's nodes, or with --retune-ops
    the retune stage's, its own A and B): A vs B median (code change at equal configs), A vs C
    median (after re-tuning), their difference, each one's verdict counts, C's picks against
    A's and what became of A's picks under the switch (zl/report/retune.py).

    python benchmarks/verdict_evidence.py --sample 32 --seed 1 --overlap 4 --out runs/ve
    python benchmarks/verdict_evidence.py --ops relu softmax --aa1 runs/ovl/overlap-4 --overlap 4 --out runs/ve
    python benchmarks/verdict_evidence.py --sample 40 --seed 11 --overlap 8 --held-out nodes --retune-ops NODE --out runs/ve
    python benchmarks/verdict_evidence.py --report-only --out <unpacked bundle>/ve
    python benchmarks/verdict_evidence.py --report-only --held-out nodes --aa1 <A/A screen> --out runs/aa_only

--report-only --held-out nodes --aa1 DIR on a folder that holds no stages reports (a) alone
for that A/A screen (a finished overlap_throughput.py batch, its raw bundle included); (b)
and (c) say they were not measured.

(NODE: one of the drawn nodes; a name that is not one is refused with the drawn ones named.)

Nodes: --ops, or --sample N drawn with --seed from the inventory (as overlap_throughput.py
draws). OUT/verdict_evidence.args.json records the nodes and options (--held-out, --retune-ops
included) at the first call; a batch directory that exists is resumed (run_batch.py --resume),
so the tool can be called again after a time limit; --report-only reads the recorded options.
Exit status: 0 report written; 2 bad arguments (no nodes, --false-alarm outside (0, 0.5], an
--overlap < 1, --aa1 not an A/A screen batch, a --retune-ops name that is not one of the nodes,
another node set, switch, --held-out or --retune-ops than the output folder's, --report-only on
a folder without the screens its options need); 3 a batch left cases unrun (no report: the
later stages wait; call again to resume); 4 a stage's run_batch.py refused (exit 2: e.g. a
resume whose conditions differ) or batch_summary.py could not read a stage (the stage and its
log named); 130 stopped by SIGTERM or Ctrl-C (call again to resume).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# the same inventory draw, options and run_batch.py call (this script's folder is on sys.path)
from overlap_throughput import (add_node_options, draw, exit_status, interrupt_on_sigterm, read_walls, run_batch_call,
                                summarize)
from zl import atomic
from zl.report.verdicts import MEASURABLE_MS

ROOT = Path(__file__).resolve().parents[1]
AA_SWITCH = "ZL_AA_NOOP"
ARGS_FILE = "verdict_evidence.args.json"
VERDICTS = ("FASTER", "SLOWER", "SAME", "UNCLEAR")


class Failed(Exception):
    """A stage that could not run or be read: exit 4 with this message."""


# --held-out: the screen (a) judges and what its controls are
HELD_OUT = {"aa2": ("aa2", "a second A/A screen, judged against aa1's A/A nodes and aa2's other A/A "
                           "nodes, the judged node's own pair left out"),
            "nodes": ("aa1", "each node of aa1 judged against aa1's other A/A nodes, its own pair left out: "
                             "leave one node out on one A/A screen")}


def stages_of(switch: str, nodes: List[str], held_out: str, retune_ops: List[str], aa1_given: bool):
    """[(stage, switch, nodes, --retune)] in run order."""
    return ([] if aa1_given else [("aa1", AA_SWITCH, nodes, False)]) + (
        [("aa2", AA_SWITCH, nodes, False)] if held_out == "aa2" else []) + [
        ("switch", switch, nodes, not retune_ops)] + ([("retune", switch, retune_ops, True)] if retune_ops else [])


def run_stage(stage: str, switch: str, nodes: List[str], retune: bool, args, out: Path) -> int:
    """One run_batch.py call for a stage (a new batch, or --resume); its wall appended to
    walls-<stage>.json, its console to console-<stage>.log. -> its exit status."""
    bd = out / stage
    cmd = [sys.executable, str(ROOT / "run_batch.py"), "--switch", switch, "--overlap", str(args.overlap),
           "--dtypes", args.dtypes, "--op-timeout", str(args.op_timeout), "--batch-dir", str(bd)]
    cmd += ["--resume"] if (bd / "batch.json").is_file() else ["--ops", *nodes] + (["--retune"] if retune else [])
    if args.devices:
        cmd += ["--devices", args.devices]
    if args.budget_s:   # what is left of this call's budget (the stages before used the rest)
        cmd += ["--budget-s", str(max(1.0, round(args.deadline - time.monotonic(), 1)))]
    rc = run_batch_call(cmd, out / f"console-{stage}.log", out / f"walls-{stage}.json")
    if rc == 2:
        raise Failed(f"stage {stage}: run_batch.py refused (exit 2); see {out / f'console-{stage}.log'}")
    return rc


def summary_json(stage: str, screen: Path, controls: Optional[Path], false_alarm: float, out: Path) -> Optional[Dict]:
    """batch_summary.py --screen's JSON of one stage (OUT/report/<stage>.json, its text beside);
    None when the screen judged no cell (its exit 5)."""
    rep = out / "report"
    rep.mkdir(exist_ok=True)
    cmd = [sys.executable, str(ROOT / "batch_summary.py"), "--screen", str(screen), "--false-alarm",
           str(false_alarm), "--json", str(rep / f"{stage}.json")]
    cmd += ["--controls", str(controls)] if controls else []
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    (rep / f"{stage}.txt").write_text(r.stdout + r.stderr)
    if r.returncode == 5:
        return None
    if r.returncode != 0:
        raise Failed(f"stage {stage}: batch_summary.py --screen {screen} exited {r.returncode}: "
                     f"{(r.stderr or r.stdout).strip()[-400:]}")
    return json.loads((rep / f"{stage}.json").read_text())


def node_of(o: Dict) -> str:
    return Path(o["dirs"]["before"]).name   # the case's run name


def false_alarms(doc: Optional[Dict], f: float, held_out: str) -> Dict:
    """(a): FASTER/SLOWER among the held-out screen's decided shapes (HELD_OUT), overall and
    per latency class (from the per-shape rows: the JSON's summary has no per-class counts)."""
    screen, how = HELD_OUT[held_out]
    mode = {"held_out": held_out, "screen": screen, "controls_text": how}
    if doc is None:
        return {**mode, "note": f"{screen} judged no cell"}
    from scipy.stats import binom

    def part(shapes: List[Dict]) -> Dict:
        counts = {v: sum(s["aa_verdict"] == v for s in shapes) for v in VERDICTS}
        decided = len(shapes) - counts["UNCLEAR"]
        alarms = counts["FASTER"] + counts["SLOWER"]
        return {"shapes": len(shapes), "counts": counts, "decided": decided, "false_alarms": alarms,
                "share": alarms / decided if decided else None,
                "expected": sum(s["false_alarm_bound"] for s in shapes if s["aa_verdict"] != "UNCLEAR"),
                "within_bound": (alarms / decided <= f) if decided else None,
                "binom_tail_p": float(binom.sf(alarms - 1, decided, f)) if decided else None}

    shapes = [s for o in doc["ops"] for s in o.get("shapes") or []]
    classes = sorted({s["latency_class"] for s in shapes})
    return {**mode, "bound": f, **part(shapes), "aa_cells_only": part(
                [s for o in doc["ops"] if o["code"].get("aa") for s in o.get("shapes") or []]),
            "per_class": {c: part([s for s in shapes if s["latency_class"] == c]) for c in classes},
            "controls": doc["verdicts"]["rule"]["controls"],
            "rejected_controls": doc["verdicts"]["rejected_controls"]}


def switch_part(doc: Optional[Dict], aa1: Optional[Dict]) -> Dict:
    """(b): verdict counts; nodes with a SLOWER shape vs nodes whose median slowdown exceeds
    the median of their shapes' aa1 class thresholds."""
    if doc is None:
        return {"note": "the switch screen judged no cell"}
    noise = {c["class"]: c["threshold_pct"] for c in aa1["verdicts"]["rule"]["classes"]} if aa1 else {}
    nodes, slower, exceeds, undetermined = {}, set(), set(), []
    for o in doc["ops"]:
        shapes = o.get("shapes") or []
        if not shapes:
            continue
        n = node_of(o)
        # a shape below the rule's 1 us floor has no measured noise (the rule never judges or
        # calibrates one): the medians are over the others; a node of none is undetermined
        # (unbind, a view with no kernel, read +41.67 % "over the noise" before)
        timed = [s for s in shapes if (s.get("before_lat") or 0) >= MEASURABLE_MS]
        thr = [noise.get(s["latency_class"]) for s in timed]
        slow = median(-s["speedup_pct"] for s in timed) if timed else None
        nz = median(thr) if timed and None not in thr else None
        counts = {v: sum(s["aa_verdict"] == v for s in shapes) for v in VERDICTS}
        nodes[n] = {"code": o["verdict"], "shapes": len(shapes), "counts": counts,
                    "median_slowdown_pct": slow, "noise_pct": nz,
                    "exceeds_noise": None if nz is None else slow > nz}
        nodes[n]["slower_shapes"] = counts["SLOWER"]
        if counts["SLOWER"]:
            slower.add(n)
        if nz is None:
            undetermined.append(n)
        elif slow > nz:
            exceeds.add(n)
    return {"counts": doc["verdicts"]["summary"]["counts"],
            "expected_false_verdicts": doc["verdicts"]["summary"]["expected_false_verdicts"],
            "slower_nodes": sorted(slower), "exceeds_noise_nodes": sorted(exceeds),
            "symmetric_difference": sorted(slower ^ exceeds), "undetermined": sorted(undetermined),
            # SLOWER calls on nodes whose median stays under the noise: one shape of five is enough
            # to call a node, so set them beside the false calls the rule's bound allows
            "slower_shapes_off_median": sum(v["slower_shapes"] for m, v in nodes.items()
                                            if m not in exceeds and m not in undetermined),
            # an undetermined node is in neither set: the rule reads its unmeasured shapes UNCLEAR
            "agree": slower == exceeds, "nodes": nodes}


def shape_key(s: Dict) -> tuple:
    return (s.get("dtype"), s.get("size_detail"), s.get("occurrence"))


def checked_again(b: Dict, sw_doc: Optional[Dict], rt_doc: Optional[Dict]) -> Dict:
    """Each node of the symmetric difference that the retune stage measured again (its own A vs B
    pair, another sitting): its SLOWER shapes of the switch stage and their verdict there. A
    shape SLOWER in both pairs is a real shape-level change a node median can hide."""
    if "note" in b or not rt_doc or rt_doc is sw_doc:
        return {}
    again = {node_of(o): {shape_key(s): s for s in o.get("shapes") or []} for o in rt_doc["ops"]}
    out = {}
    for o in sw_doc["ops"]:
        n = node_of(o)
        if n in b["symmetric_difference"] and n in again:
            pairs = [(s, again[n].get(shape_key(s), {})) for s in o.get("shapes") or [] if s["aa_verdict"] == "SLOWER"]
            out[n] = [{"shape": s.get("size_detail"), "switch_pct": s["speedup_pct"], "again_pct": a.get("speedup_pct"),
                       "again_verdict": a.get("aa_verdict", "not measured")} for s, a in pairs]
    return out


def retune_part(doc: Optional[Dict], stage: str) -> Dict:
    """(c): per node with a side C (the `stage` screen's), A vs B and A vs C side by side with
    the picks."""
    if doc is None or "retune" not in doc:
        return {"stage": stage, "note": f"no side C (the {stage} screen ran without --retune or judged no cell)"}
    nodes = {}
    for o in doc["ops"]:
        r = o.get("retune")
        if not r:
            continue
        ab, ac, p = r["a_vs_b"], r.get("a_vs_c") or {}, r.get("picks") or {}
        b, c = ab.get("median_pct"), ac.get("median_pct")
        nodes[node_of(o)] = {"side_c": r["side_c"]["status"], "a_vs_b_median_pct": b, "a_vs_c_median_pct": c,
                             "retune_minus_codegen_pct": None if b is None or c is None else c - b,
                             "a_vs_b_verdicts": ab.get("aa_verdict_counts"),
                             "a_vs_c_verdicts": ac.get("aa_verdict_counts"),
                             "c_picks": p.get("counts"), "a_under_switch": p.get("under_switch")}
    block = doc["retune"]
    split = sorted(n for n, v in nodes.items() if (v["c_picks"] or {}).get("other")
                   or v["a_vs_b_verdicts"] != v["a_vs_c_verdicts"])
    return {"stage": stage, "a_vs_c_counts": block["summary"]["counts"], "picks": block["picks"],
            "under_switch": block["under_switch"], "side_c_not_run": block["side_c_not_run"],
            "split_nodes": split, "nodes": nodes}


def pct(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:+.2f}%"


def nz(counts: Optional[Dict[str, int]]) -> str:
    return " ".join(f"{k}={n}" for k, n in (counts or {}).items() if n) or "-"


def markdown(rep: Dict) -> str:
    a, b, c = rep["false_alarm"], rep["switch"], rep["retune"]
    out = [f"# verdict evidence: {len(rep['nodes'])} node(s), switch {rep['switch_name']}, "
           f"false-alarm target {rep['false_alarm_target']:g}", "",
           f"## (a) false alarms on {a['screen']} (--held-out {a['held_out']}: {a['controls_text']})", ""]
    if "note" in a:
        out.append(a["note"])
    else:
        out += ["| part | shapes | decided | FASTER/SLOWER | share | bound | expected | within | P(X>=obs) |",
                "|---|---|---|---|---|---|---|---|---|"]
        for name, p in [("all", a), ("A/A cells only", a["aa_cells_only"])] + list(a["per_class"].items()):
            share = "n/a" if p["share"] is None else f"{p['share']:.2%}"
            tail = "n/a" if p["binom_tail_p"] is None else f"{p['binom_tail_p']:.3f}"
            out.append(f"| {name} | {p['shapes']} | {p['decided']} | {p['false_alarms']} | {share} | "
                       f"{a['bound']:.0%} | {p['expected']:.2f} | {p['within_bound']} | {tail} |")
    out += ["", "## (b) the switch: SLOWER nodes vs median slowdown over aa1's noise", ""]
    if "note" in b:
        out.append(b["note"])
    else:
        out += [f"verdicts: {nz(b['counts'])} (expected false <= {b['expected_false_verdicts']:.2f})",
                f"nodes with a SLOWER shape: {' '.join(b['slower_nodes']) or '-'}",
                f"nodes whose median slowdown exceeds the noise: {' '.join(b['exceeds_noise_nodes']) or '-'}",
                f"symmetric difference: {' '.join(b['symmetric_difference']) or '-'}; undetermined: "
                f"{' '.join(b['undetermined']) or '-'}; agree: {b['agree']}",
                f"SLOWER shapes on nodes whose median stays under the noise: {b['slower_shapes_off_median']} "
                f"(false FASTER/SLOWER the rule allows: <= {b['expected_false_verdicts']:.2f})"]
        for n, shapes in (b.get("checked_again") or {}).items():
            out.append(f"{n}, measured again by the retune stage's A vs B: " + "; ".join(
                f"{x['shape']} {pct(x['switch_pct'])} -> {x['again_verdict']} {pct(x['again_pct'])}" for x in shapes))
        out += ["",
                "| node | code | shapes | verdicts | median slowdown | noise (aa1) |", "|---|---|---|---|---|---|"]
        for n, v in b["nodes"].items():
            out.append(f"| {n} | {v['code']} | {v['shapes']} | {nz(v['counts'])} | "
                       f"{pct(v['median_slowdown_pct'])} | {pct(v['noise_pct'])} |")
    out += ["", f"## (c) codegen (A vs B) vs after re-tuning (A vs C), stage {c['stage']}", ""]
    if "note" in c:
        out.append(c["note"])
    else:
        out += [f"A vs C verdicts: {nz(c['a_vs_c_counts'])}; C's picks vs A's: {nz(c['picks'])}; "
                f"A's picks under the switch: {nz(c['under_switch'])}; split nodes: {' '.join(c['split_nodes']) or '-'}",
                "", "| node | side C | A vs B | A vs C | C - B | A vs B verdicts | A vs C verdicts | C's picks | "
                "A's under switch |", "|---|---|---|---|---|---|---|---|---|"]
        for n, v in c["nodes"].items():
            out.append(f"| {n} | {v['side_c']} | {pct(v['a_vs_b_median_pct'])} | {pct(v['a_vs_c_median_pct'])} | "
                       f"{pct(v['retune_minus_codegen_pct'])} | {nz(v['a_vs_b_verdicts'])} | "
                       f"{nz(v['a_vs_c_verdicts'])} | {nz(v['c_picks'])} | {nz(v['a_under_switch'])} |")
    walls = ", ".join(f"{k} {v} s" for k, v in rep["walls_s"].items())
    out += ["", f"walls: {walls or '-'}; run_batch.py exit: {rep['rc'] or '-'}"]
    if rep.get("pace"):
        out += ["", "## pace of the screens run here (overlap_throughput.py's figures)", "",
                "| stage | overlap | wall s | side runs | side runs/h | nodes finished | lock held alone | "
                "lock waits s | share waits s | cores busy |", "|---|---|---|---|---|---|---|---|---|---|"]
        for st, p in rep["pace"].items():
            held = "n/a" if p.get("lock_held_share") is None else f"{p['lock_held_share']:.1%}"
            out.append(f"| {st} | {p['overlap']} | {p['wall_s']} | {p['side_runs']} | {p['side_runs_per_hour']} | "
                       f"{p['nodes_finished']} | {held} | {p['lock_waited_s']} | {p['share_waited_s']} | "
                       f"{p['cores_busy']} |")
    return "\n".join(out)


def publish(rep: Dict, out: Path) -> None:
    """The report: OUT/verdict_evidence.json and .md first, then stdout."""
    text = markdown(rep)
    atomic.write_json(out / "verdict_evidence.json", rep, indent=1, sort_keys=False)
    atomic.write_text(out / "verdict_evidence.md", text + "\n")
    print(text)


def aa1_only(aa1: Path, f: float, out: Path) -> int:
    """--report-only of (a) alone: one A/A screen, each node against its other A/A nodes."""
    from zl.batch.screen import read_screen_rows
    out.mkdir(parents=True, exist_ok=True)
    not_run = "not measured: --report-only of (a) alone, from --aa1 (no switch stage in --out)"
    rep = {"nodes": sorted(r["run_name"] for r in read_screen_rows(aa1 / "screen.tsv").values()),
           "switch_name": "none", "aa1": str(aa1), "false_alarm_target": f, "held_out": "nodes",
           "retune_ops": [], "rc": {}, "walls_s": {},
           "false_alarm": false_alarms(summary_json("aa1", aa1, None, f, out), f, "nodes"),
           "switch": {"note": not_run}, "retune": {"stage": "switch", "note": not_run}}
    publish(rep, out)
    return 0


def is_aa_screen(d: Path) -> bool:
    try:
        return json.loads((d / "batch.json").read_text()).get("switch") == AA_SWITCH and (d / "screen.tsv").is_file()
    except (OSError, ValueError, AttributeError):
        return False


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="verdict_evidence.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_options(ap)
    ap.add_argument("--switch", default="DISABLE_LLVM_OPT", help="the real switch of stage `switch`")
    ap.add_argument("--false-alarm", type=float, default=0.05, metavar="F", help="the rule's target, (0, 0.5]")
    ap.add_argument("--aa1", type=Path, default=None, metavar="DIR",
                    help="an existing A/A screen batch (--switch ZL_AA_NOOP) used as aa1 instead of running it")
    ap.add_argument("--overlap", type=int, default=1, help="run_batch.py --overlap of every stage")
    ap.add_argument("--held-out", choices=sorted(HELD_OUT), default=None,
                    help="what (a) judges: aa2 (default), a second A/A screen against aa1; nodes, no aa2 "
                         "stage: each node of aa1 against aa1's other A/A nodes, its own pair left out "
                         "(--report-only: the folder's)")
    ap.add_argument("--retune-ops", nargs="+", default=None, metavar="NAME",
                    help="side C only for these nodes (of the node set): the switch stage runs without "
                         "--retune, stage `retune` runs them with it, and (c) reads that stage "
                         "(--report-only: the folder's)")
    ap.add_argument("--budget-s", type=float, default=None, help="this call's budget: each stage gets run_batch.py --budget-s of what is left")
    ap.add_argument("--out", type=Path, required=True, help="folder: one batch per stage, the report")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: the report of the stages already in --out (e.g. a returned bundle)")
    args = ap.parse_args(argv)
    interrupt_on_sigterm()
    if not 0 < args.false_alarm <= 0.5:
        ap.error(f"--false-alarm must be in (0, 0.5], got {args.false_alarm}")
    if args.overlap < 1:
        ap.error("--overlap must be >= 1")
    out = args.out.resolve()
    if args.aa1 is not None and not is_aa_screen(args.aa1):
        ap.error(f"--aa1 {args.aa1}: not an A/A screen batch (batch.json with switch {AA_SWITCH}, screen.tsv)")
    saved = json.loads((out / ARGS_FILE).read_text()) if (out / ARGS_FILE).is_file() else None
    # left out: the default, or with --report-only the folder's (one recorded before these
    # options existed ran their defaults)
    was = {"held_out": (saved or {}).get("held_out", "aa2"), "retune_ops": (saved or {}).get("retune_ops", [])}
    held_out = args.held_out or (was["held_out"] if args.report_only else "aa2")
    retune_ops = list(dict.fromkeys(args.retune_ops or (was["retune_ops"] if args.report_only else [])))
    if saved is not None and held_out != was["held_out"]:
        ap.error(f"{out} holds another --held-out ({was['held_out']}, {ARGS_FILE}); give another --out")
    if saved is not None and set(retune_ops) != set(was["retune_ops"]):
        ap.error(f"{out} holds other --retune-ops ({' '.join(was['retune_ops']) or 'none'}, {ARGS_FILE}); "
                 "give another --out")
    rc: Dict[str, int] = {}
    try:
        if args.report_only and saved is None and args.aa1 is not None and held_out == "nodes":
            return aa1_only(args.aa1.resolve(), args.false_alarm, out)
        if args.report_only:
            need = [s for s, *_ in stages_of("", [], held_out, retune_ops, True)]
            if saved is None or not all((out / s / "screen.tsv").is_file() for s in need):
                ap.error(f"--report-only: {out} holds no {' and '.join(need)} screens ({ARGS_FILE})")
            nodes, switch = saved["nodes"], saved["switch"]
            aa1 = args.aa1.resolve() if args.aa1 else out / "aa1" if is_aa_screen(out / "aa1") else Path(saved["aa1"])
            if not is_aa_screen(aa1):
                ap.error(f"--report-only: no aa1 screen in {out} nor at {aa1}: give --aa1 DIR")
        else:
            nodes = list(args.ops) or (draw(args.sample, args.seed) if args.sample > 0 else [])
            if not nodes:
                ap.error("no nodes: give --ops or --sample N")
            switch = args.switch
            if saved is not None and (saved["nodes"] != nodes or saved["switch"] != switch):
                ap.error(f"{out} holds another node set or switch ({ARGS_FILE}); give another --out")
            stray = [n for n in retune_ops if n not in nodes]
            if stray:
                ap.error(f"--retune-ops {' '.join(stray)}: not among the {len(nodes)} node(s): {' '.join(nodes)}")
            aa1 = args.aa1.resolve() if args.aa1 else out / "aa1"
            out.mkdir(parents=True, exist_ok=True)
            atomic.write_json(out / ARGS_FILE, {"nodes": nodes, "switch": switch, "aa1": str(aa1), "dtypes": args.dtypes,
                                         "overlap": args.overlap, "false_alarm": args.false_alarm,
                                         "held_out": held_out, "retune_ops": retune_ops})
            args.deadline = time.monotonic() + (args.budget_s or 0)
            for stage, sw, ops, retune in stages_of(switch, nodes, held_out, retune_ops, args.aa1 is not None):
                rc[stage] = run_stage(stage, sw, ops, retune, args, out)
                if rc[stage] == 3:   # out of --budget-s: the later stages wait for the next call
                    break
        if 3 in rc.values():
            print(f"!!! verdict_evidence.py: stage {next(k for k, v in rc.items() if v == 3)} left cases "
                  "unrun (--budget-s); call again to resume", file=sys.stderr)
            return 3
        aa1_doc = summary_json("aa1", aa1, None, args.false_alarm, out)
        rep = {"nodes": nodes, "switch_name": switch, "aa1": str(aa1), "false_alarm_target": args.false_alarm,
               "held_out": held_out, "retune_ops": retune_ops,
               "rc": rc, "walls_s": {s: round(sum(read_walls(out / f"walls-{s}.json")), 3) for s in
                                     ("aa1", "aa2", "switch", "retune") if (out / f"walls-{s}.json").is_file()},
               # --held-out nodes: aa1's own document, each of its cells judged with its pair left out
               "false_alarm": false_alarms(summary_json("aa2", out / "aa2", aa1, args.false_alarm, out)
                                           if held_out == "aa2" else aa1_doc, args.false_alarm, held_out)}
        # the pace of each record/replay screen run into OUT (side C's stage has a third side)
        keep = ("overlap", "wall_s", "calls", "side_runs", "side_runs_per_hour", "nodes_finished", "lock_held_share",
                "lock_waited_s", "share_waited_s", "cores_busy")
        overlap = saved["overlap"] if args.report_only else args.overlap
        rep["pace"] = {s: {k: v for k, v in summarize(overlap, out / s, rc.get(s), s).items() if k in keep}
                       for s in ("aa1", "aa2", "switch") if (out / f"walls-{s}.json").is_file()
                       and (out / s / "before" / "ops_status.csv").is_file()}
        sw_doc = summary_json("switch", out / "switch", aa1, args.false_alarm, out)
        rt_doc = summary_json("retune", out / "retune", aa1, args.false_alarm, out) if retune_ops else sw_doc
        rep["switch"], rep["retune"] = switch_part(sw_doc, aa1_doc), retune_part(rt_doc, "retune" if retune_ops else "switch")
        if "note" not in rep["switch"]:
            rep["switch"]["checked_again"] = checked_again(rep["switch"], sw_doc, rt_doc)
    except Failed as exc:
        print(f"!!! verdict_evidence.py: {exc}", file=sys.stderr)
        return 4
    publish(rep, out)
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
