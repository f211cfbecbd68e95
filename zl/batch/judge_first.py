"""run_batch.py --switch NAME --judge-first: judge every node untimed, time only what changed.

Stage 1, `<batch>/judge`: the screen with ZL_JUDGE_ONLY=1 on both sides (code at every level
and results; nothing timed, so `--judge-share N` cases per device cost no validity).
Stage 2, `<batch>/timed`: the timed screen (record/replay, --rounds R of it, under the
--overlap/--share-device given) of the nodes stage 1 found changed (`CHANGED`), plus up to
`--controls N` NO_IR_DIFF nodes as A/A controls: the verdict rule calibrates its noise on
them, so the report can call a changed node FASTER or SLOWER. Controls are the N nodes with
the smallest hash of their name, so a resume draws the same ones.
`<batch>/judge_first.json` (rewritten after each stage): the verdict counts of stage 1, the
changed nodes, the controls, every node stage 1 could not judge with its reason, each
stage's wall per call (`walls`) and its cases' CPU seconds and cores busy (`cpu`).

Each stage is an ordinary batch directory; `--resume --batch-dir <batch>` continues the first
unfinished one under its recorded conditions.

`--baseline DIR` reuses side A of stage 1 from an earlier batch of the same FlagGems and
toolchain: a plain batch (`run_batch.py --judge`, no switch: side A leaves the switch unset)
or a screen/judge-first batch of the same switch (its side A set it to 0). The baseline is
refused when its conditions (batch.json: options, measured environment (whether it was timed
apart), compiler knobs, toolchain with
Triton's package digest, FlagGems commit and working state (the files its own benchmark runs
write apart: conditions.RUN_BYPRODUCTS), GPU model) differ from stage 1's
in anything but the switch. Each node whose baseline row PASSed is linked into `judge/before/` (hard links:
no copy, never written) and only side B runs, replaying the baseline's picks; any other node
runs side A fresh. A pair whose run identities differ on a field that changes what is judged
(BASELINE_FIELDS: device model, versions, shapes, seed...) reads BASELINE_MISMATCH, not a
verdict. Stage 2 times every chosen node with a fresh side A; each one whose stage-1 side A
came from the baseline is a check of it: fresh A must compile the baseline's code at every
level, else the baseline did not stand for side A, stage 1 is void, and the batch exits 5.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from zl import atomic
from zl.batch import conditions as conds
from zl.batch.batchdir import BatchDirError, DirLock, check_fields, check_started, make
from zl.batch.case import COMPLETE_MARK, case_dir
from zl.batch.partition import REPEAT_VERDICTS, verdict_selected
from zl.batch.screen import BASELINE_MISMATCH, baseline_differences, read_screen_rows
from zl.batch.status import StatusFileError, read_rows
from zl.ir.fingerprint import NO_IR, NO_IR_DIFF, VARIANTS_DIFFER
from zl.runlog.costs import zl_costs
from zl.screen_verdict import WRONG_RESULTS, code_verdict

REPO_ROOT = Path(__file__).resolve().parents[2]
SUMMARY = "judge_first.json"
JUDGE, TIMED = "judge", "timed"
# stage-1 verdicts that send a node to the timed stage: campaign.sh's code changes, plus
# variant sets that differ (a timed shape may run another variant) and wrong results (the
# report puts those first; their timing is shown, never a win)
TIMED_VERDICTS = f"{REPEAT_VERDICTS},{VARIANTS_DIFFER},{WRONG_RESULTS}"
SAME = NO_IR_DIFF
EXIT_BASELINE_DRIFT = 5
BASELINE_MARK = ".baseline"          # in a linked case directory: the baseline case it came from
# conditions a baseline may differ in: the switch is what the screen adds; --retune and
# --rounds belong to the timed stage
BASELINE_FREE = ("switch", "retune", "rounds")


class BaselineError(ValueError):
    """--baseline names no usable batch, or one measured under other conditions (exit 2)."""


@dataclass
class Baseline:
    given: Path                          # what --baseline named
    batch_dir: Path                      # the batch holding side A (its batch.json)
    side_dir: Path                       # its side A's case directories and ops_status.csv
    conditions: Dict
    rows: Dict[Tuple[str, str], Dict[str, str]]
    op_timeout_s: float = 0.0            # the baseline's --op-timeout (its TIMEOUTs are carried under it)
    share: int = 1                       # its cases per device (--share-device or --judge-share)


def stage_one(path: Path) -> Path:
    """The batch directory holding a judge-first batch's stage 1 (`<path>/judge`); any other
    batch directory is itself."""
    return Path(path) / JUDGE if (Path(path) / SUMMARY).is_file() else Path(path)


def linked(side_dir: Path, row: Dict[str, str]) -> bool:
    """Whether a side-A row of `side_dir` was linked from a baseline (it ran in the baseline's
    batch): adopt's note names the baseline case, and its directory holds the mark (a bundle
    that keeps no dotfiles loses the mark, never the note)."""
    return ("baseline=" in row.get("notes", "")
            or (Path(side_dir) / row["repo"] / Path(row["out_dir"]).name / BASELINE_MARK).is_file())


def open_baseline(given: Path, switch: str) -> Baseline:
    """The side A of `given`: a plain batch, or a screen (judge-first) batch of `switch`."""
    root = Path(given).resolve()
    batch_dir = stage_one(root)
    try:
        started = json.loads((batch_dir / "batch.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BaselineError(f"--baseline {given}: no readable batch.json in {batch_dir} ({exc})") from None
    cond = started.get("conditions") if isinstance(started, dict) else None
    if not isinstance(cond, dict):
        raise BaselineError(f"--baseline {given}: {batch_dir / 'batch.json'} records no conditions")
    check_started(batch_dir / "batch.json", started, f"--baseline {given}")
    other = cond.get("switch") or ""
    if other and other != switch:
        raise BaselineError(f"--baseline {given} screens {other}: its side A ran with {other}=0, not as side A "
                            f"of a screen of {switch}; give a plain batch (run_batch.py --judge, no --switch) "
                            f"or a screen of {switch}")
    side_dir = batch_dir / "before" if other else batch_dir
    try:
        rows = read_rows(side_dir / "ops_status.csv")
    except StatusFileError as exc:
        raise BaselineError(f"--baseline {given}: {exc}") from None
    if not rows:
        raise BaselineError(f"--baseline {given}: {side_dir / 'ops_status.csv'} holds no case")
    try:
        limit = float(started.get("op_timeout_s") or 0)
        share = int(started.get("share_device") or 1)
    except (TypeError, ValueError):
        limit, share = 0.0, 1
    return Baseline(Path(given), batch_dir, side_dir, cond, rows, limit, share)


def _comparable(cond: Dict) -> Dict:
    out = {k: v for k, v in cond.items() if k not in BASELINE_FREE}
    # stage 1 judges: a timed baseline's side A compiled and computed what an untimed one would
    out["environment"] = {k: v for k, v in (cond.get("environment") or {}).items() if k != "ZL_JUDGE_ONLY"}
    # a git checkout is named by its commit and working state, wherever it sits
    out["flaggems"] = {repo: {k: v for k, v in tree.items() if not (k == "path" and tree.get("commit"))}
                       for repo, tree in (cond.get("flaggems") or {}).items()}
    return out


def check_baseline(base: Baseline, now: Dict) -> None:
    """BaselineError naming every condition in which the baseline differs from stage 1."""
    diffs = conds.differences(_comparable(base.conditions), _comparable(now), stored_label="baseline")
    if diffs:
        raise BaselineError(f"--baseline {base.given} was measured under other conditions than this screen "
                            "(its batch.json); it cannot stand for side A. Differences:\n  "
                            + "\n  ".join(diffs)
                            + conds.older_record_note(base.conditions))


def _link_tree(src: Path, dst: Path) -> None:
    def link(a, b):
        try:
            os.link(a, b)
        except OSError:      # another filesystem: a copy
            shutil.copy2(a, b)
    shutil.copytree(src, dst, symlinks=True, copy_function=link)


# Side A statuses a node takes from the baseline. PASS is linked and side B runs beside it. SKIP
# (upstream's own skip on this GPU) and TIMEOUT end the node unjudged, as a fresh side A would:
# the batch never retries a timeout (it repeats), and on the H100's 48-node baseline six
# TIMEOUTs at 60 s took 30 % of the case seconds. A TIMEOUT is carried only when this screen
# allows no more time than the baseline did and runs at least as many cases per device (a judge
# side run is CPU-bound: fewer neighbours may let it finish); otherwise the node runs fresh.
CARRIED = ("PASS", "SKIP", "TIMEOUT")


def _unusable(base: Baseline, key: Tuple[str, str], src: Path, op_timeout: float = 0.0, share: int = 1) -> str:
    """Why a case's side A cannot come from the baseline ("" when it can)."""
    row = base.rows.get(key)
    if row is None:
        return "not in the baseline"
    status = row.get("status")
    if status not in CARRIED:
        return f"baseline {status}"
    if status == "TIMEOUT":
        if not base.op_timeout_s:
            return "baseline TIMEOUT under an --op-timeout its batch.json does not record"
        if op_timeout > base.op_timeout_s:
            return (f"baseline TIMEOUT at --op-timeout {base.op_timeout_s:g} s; this screen allows "
                    f"{op_timeout:g} s")
        if share < base.share:
            return (f"baseline TIMEOUT at {base.share} case(s) per device; this screen runs {share}")
        return "" if src.is_dir() else "baseline case missing"
    return "" if (src / COMPLETE_MARK).is_file() else "baseline case incomplete"


def adopt(base: Baseline, cases, side_dir: Path, skip, op_timeout: float = 0.0,
          share: int = 1) -> Dict[Tuple[str, str], Dict[str, str]]:
    """Link each case's baseline directory whose status is CARRIED into `side_dir`: {key: its
    side-A row}. `skip`: keys a --resume reuses. The other cases run side A fresh."""
    adopted = {}
    for c in cases:
        key = (c.repo, c.run_name)
        row, src = base.rows.get(key), case_dir(base.side_dir, c)
        if key in skip or _unusable(base, key, src, op_timeout, share):
            continue
        dst = case_dir(side_dir, c)
        if (dst / BASELINE_MARK).is_file():
            shutil.rmtree(dst)          # linked by an earlier call: nothing measured here
        elif dst.exists():              # side A ran here in an earlier call: it runs here again,
            continue                    # its earlier attempts kept by the case runner
        dst.parent.mkdir(parents=True, exist_ok=True)
        _link_tree(src, dst)
        atomic.write_text(dst / BASELINE_MARK, f"{src}\n")
        notes = ";".join(p for p in (row.get("notes", ""), f"baseline={src}") if p)
        adopted[key] = dict(row, out_dir=str(dst), notes=notes)
    return adopted


def baseline_summary(base: Baseline, judge_dir: Path, op_timeout: float = 0.0, share: int = 1) -> Dict:
    """What stage 1 took from the baseline: its directories, the number of nodes whose PASSed
    side A was linked, each node whose SKIP or TIMEOUT was carried (unjudged, no side run here),
    and each node that ran side A fresh with the reason."""
    rows = read_rows(judge_dir / "before" / "ops_status.csv")
    taken = {k for k in rows if linked(judge_dir / "before", rows[k])}
    carried = {f"{r}:{n}": rows[(r, n)]["status"] for (r, n) in sorted(taken) if rows[(r, n)]["status"] != "PASS"}
    fresh = {f"{r}:{n}": _unusable(base, (r, n), base.side_dir / r / n, op_timeout, share)
             or "side A ran here in an earlier call" for (r, n) in rows if (r, n) not in taken}
    return {"dir": str(base.given), "side_a": str(base.side_dir), "linked": len(taken) - len(carried),
            "carried": carried, "fresh": dict(sorted(fresh.items()))}


def drift(root: Path, nodes: List[str]) -> Dict:
    """Stage 2's check of the baseline: for each timed node whose stage-1 side A was linked
    from it, fresh side A (timed/before) against the baseline's code, every level."""
    checked, drifted, unverifiable = [], {}, {}
    for node in nodes:
        repo, name = node.split(":", 1)
        base_a = root / JUDGE / "before" / repo / name
        fresh_a = root / TIMED / "before" / repo / name
        if not (base_a / BASELINE_MARK).is_file():
            continue
        verdict = code_verdict(base_a, fresh_a)["verdict"]
        checked.append(node)
        if verdict in (NO_IR_DIFF, VARIANTS_DIFFER):
            continue
        (unverifiable if verdict == NO_IR else drifted)[node] = verdict
    return {"checked": checked, "drift": drifted, "unverifiable": unverifiable}


def _changed(verdict: str) -> bool:
    return verdict_selected(verdict, TIMED_VERDICTS)


def _rank(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def select(judge_dir: Path, controls: int) -> Dict:
    """Stage 1's outcome: {counts, changed, controls, unjudged: {node: reason}}."""
    screen = {f"{repo}:{name}": r for (repo, name), r in read_screen_rows(judge_dir / "screen.tsv").items()}
    status = {f"{repo}:{name}": r for (repo, name), r in read_rows(judge_dir / "before" / "ops_status.csv").items()}
    counts = Counter(r["verdict"] for r in screen.values())
    changed = sorted(n for n, r in screen.items() if _changed(r["verdict"]))
    same = sorted((n for n, r in screen.items() if r["verdict"] == SAME), key=_rank)
    unjudged = {}
    for node, row in status.items():
        if node in screen and (_changed(screen[node]["verdict"]) or screen[node]["verdict"] == SAME):
            continue
        if row["status"] != "PASS" or node not in screen:
            why = f"side A {row['status']}" + (f" ({row['notes']})" if row.get("notes") else "")
        else:
            why = f"screen verdict {screen[node]['verdict']}"
            if screen[node]["verdict"] == BASELINE_MISMATCH:
                repo, name = node.split(":", 1)
                why += ": " + "; ".join(baseline_differences(judge_dir / "before" / repo / name,
                                                             judge_dir / "after" / repo / name))
        unjudged[node] = why
    return {"counts": dict(sorted(counts.items())), "changed": changed,
            "controls": sorted(same[:controls]), "unjudged": dict(sorted(unjudged.items()))}


def report(root: Path, log: Callable[[str], None]) -> None:
    """The batch's report, `batch_summary.py --screen <batch>` (zl/report/screen.py): the timed
    stage's per-shape verdicts calibrated on its A/A controls, with stage 1 beside them;
    terminal, <batch>/report.json and <batch>/report.html."""
    r = subprocess.run([sys.executable, str(REPO_ROOT / "batch_summary.py"), "--screen", str(root),
                        "--json", str(root / "report.json"), "--html", str(root / "report.html")],
                       capture_output=True, text=True)
    print((r.stdout + r.stderr).strip(), flush=True)
    log(f"judge-first report: {root / 'report.html'} (exit {r.returncode}); stage 1: {root / SUMMARY}")


def _stage_args(args, batch_dir: Path, **changes):
    out = copy.copy(args)
    out.batch_dir = batch_dir
    out.judge_first, out.judge_share, out.controls = False, None, 10
    out.baseline, out.baseline_side = None, None
    out.resume = (batch_dir / "batch.json").is_file()
    for k, v in changes.items():
        setattr(out, k, v)
    return out


def stage_cpu(stage_dir: Path) -> Dict:
    """CPU seconds of the stage's side runs (each case's final attempt, run_pytest.sh's CPU
    line), leaving out side A linked from a baseline: it ran in the baseline's batch."""
    total, runs = 0.0, 0
    for table in sorted(Path(stage_dir).glob("*/ops_status.csv")):
        for row in read_rows(table).values():
            if linked(table.parent, row):
                continue
            case = table.parent / row["repo"] / Path(row["out_dir"]).name
            try:
                cpu = zl_costs((case / "run.log").read_text(errors="replace")).get("cpu_s")
            except OSError:
                continue
            if cpu is not None:
                total, runs = total + cpu, runs + 1
    return {"cpu_s": round(total, 1), "side_runs": runs}


def _wall(record: Dict, stage: str, started: float, log: Callable[[str], None], stage_dir: Path) -> None:
    """One `walls` entry per stage per call (the seconds this call spent in the stage), and
    the stage's CPU over its walls in all calls: the cores its cases kept busy on average (near
    the host's core count, --judge-share is bounded by the CPU, not the GPU)."""
    wall = time.monotonic() - started
    record["walls"] = list(record.get("walls") or []) + [{"stage": stage, "wall_s": round(wall, 1)}]
    log(f"judge-first: stage {stage} took {wall / 60:.1f} min in this call")
    cpu = stage_cpu(stage_dir)
    walls = sum(w["wall_s"] for w in record["walls"] if w["stage"] == stage)
    cpu["cores_busy"] = round(cpu["cpu_s"] / walls, 2) if walls > 0 and cpu["side_runs"] else None
    record["cpu"] = {**(record.get("cpu") or {}), stage: cpu}
    if cpu["cores_busy"] is not None:
        log(f"judge-first: stage {stage}: {cpu['side_runs']} side run(s) used {cpu['cpu_s']:.0f} CPU-s, "
            f"{cpu['cores_busy']:.1f} cores on average over its {walls / 60:.1f} min")


def _baseline_verdict(check: Dict, log: Callable[[str], None]) -> int:
    if check["drift"]:
        log(f"!!! judge-first: the baseline did not stand for side A: {len(check['drift'])} of "
            f"{len(check['checked'])} checked node(s) compiled other code with a fresh side A; stage 1's "
            "verdicts are void (the timed stage's report compares fresh sides and holds); exit 5")
        return EXIT_BASELINE_DRIFT
    log(f"judge-first: baseline checked on {len(check['checked'])} timed node(s): fresh side A compiled "
        "the baseline's code" + (f" ({len(check['unverifiable'])} without IR to compare)"
                                 if check["unverifiable"] else ""))
    return 0


# judge_first.json fields a --resume reads, by kind (batchdir.KINDS); null reads as left out
# for SUMMARY_NULL (judge_share is null when --judge-share was not given)
SUMMARY_FIELDS = {"switch": "text", "baseline_asked": "text", "judge_share": "count", "rounds": "count",
                  "walls": "objects", "cpu": "object"}
SUMMARY_NULL = ("baseline_asked", "judge_share", "walls", "cpu")
WALL_FIELDS = {"stage": "text", "wall_s": "seconds"}


def read_summary(path: Path) -> Dict:
    """judge_first.json of the batch a --resume continues; unreadable, not a JSON object, or a
    field of SUMMARY_FIELDS of another kind: BatchDirError naming the file (exit 2)."""
    label = "--resume --judge-first"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BatchDirError(f"{label}: {path} is unreadable: {exc}") from None
    if not isinstance(record, dict):
        raise BatchDirError(f"{label}: {path} is not a judge-first record (a JSON object)")
    check_fields(path, record, SUMMARY_FIELDS, label, nullable=SUMMARY_NULL)
    for i, wall in enumerate(record.get("walls") or []):
        check_fields(path, wall, WALL_FIELDS, label, f"walls[{i}].", required=tuple(WALL_FIELDS))
    return record


def run(args, run_stage: Callable[[object], int], log: Callable[[str], None]) -> int:
    """Both stages in `args.batch_dir`; `run_stage(args)` is run_batch's own run()."""
    root, call_started = Path(args.batch_dir).resolve(), time.monotonic()
    summary_path = root / SUMMARY
    if args.resume and not summary_path.is_file():
        raise BatchDirError(f"--resume --judge-first: {root} holds no judge-first batch (no {SUMMARY})")
    if not args.resume and summary_path.is_file():
        raise BatchDirError(f"--batch-dir {root} already holds a judge-first batch; continue it with --resume")
    held = DirLock(root)
    make(root)
    held.take()
    try:
        record = read_summary(summary_path) if summary_path.is_file() else None
        if record is not None and args.baseline is None:     # a --resume keeps the batch's
            args.baseline = record.get("baseline_asked") or None
        if record is not None and args.judge_share is None:
            args.judge_share = record.get("judge_share")
        asked = str(Path(args.baseline).resolve()) if args.baseline else ""
        record = record or {"switch": args.switch, "controls_asked": args.controls,
                            "judge_share": args.judge_share, "baseline_asked": asked}
        if args.resume and (record.get("switch"), record.get("controls_asked"), record.get("baseline_asked", "")) \
                != (args.switch, args.controls, asked):
            raise BatchDirError(f"--resume --judge-first: the batch screens {record.get('switch')} with "
                                f"--controls {record.get('controls_asked')} and --baseline "
                                f"{record.get('baseline_asked') or '(none)'}; this call gives {args.switch} "
                                f"with --controls {args.controls} and --baseline {asked or '(none)'}")
        base = open_baseline(Path(args.baseline), args.switch) if args.baseline else None
        # --rounds belongs to stage 2; recorded when > 1 (a resume keeps it, as batch.json does)
        rounds = int(record.get("rounds", 1)) if args.resume else args.rounds or 1
        if args.rounds not in (None, rounds):
            raise BatchDirError(f"--resume --judge-first: the batch times --rounds {rounds}; this call "
                                f"gives --rounds {args.rounds}")
        args.rounds = rounds
        record.update({"rounds": rounds} if rounds > 1 else {})
        atomic.write_json(summary_path, record)
        log(f"judge-first stage 1: every node of {args.switch} judged untimed -> {root / JUDGE}"
            + (f"; side A from the baseline {base.side_dir} where it passed" if base else ""))
        # side C (--retune) and rounds belong to the timed stage: untimed, they judge nothing more
        started = time.monotonic()
        try:
            code = run_stage(_stage_args(args, root / JUDGE, judge=True, overlap=1, retune=False,
                                         share_device=args.judge_share or 1, rounds=1, baseline_side=base))
        except BaselineError:
            if not args.resume:     # refused before stage 1 wrote anything: no batch to resume
                summary_path.unlink()
            raise
        if base is not None and (root / JUDGE / "before" / "ops_status.csv").is_file():
            record.update(baseline=baseline_summary(base, root / JUDGE, float(args.op_timeout),
                                                    args.judge_share or 1))
            atomic.write_json(summary_path, record)
            carried = Counter(record["baseline"]["carried"].values())
            log(f"judge-first: side A of {record['baseline']['linked']} node(s) linked from the baseline, "
                f"{len(record['baseline']['fresh'])} run fresh"
                + "".join(f", {n} {s} carried (not judged)" for s, n in sorted(carried.items())))
        _wall(record, JUDGE, started, log, root / JUDGE)
        atomic.write_json(summary_path, record)
        if code != 0:
            log(f"judge-first: stage 1 ended with exit {code}; nothing is timed until every node is judged")
            return code
        chosen = select(root / JUDGE, args.controls)
        record.update(stage1=chosen)
        atomic.write_json(summary_path, record)
        log(f"judge-first: {len(chosen['changed'])} changed, {len(chosen['controls'])} control(s), "
            f"{len(chosen['unjudged'])} not judged; verdicts " +
            ", ".join(f"{k}={v}" for k, v in chosen["counts"].items()))
        for node, why in chosen["unjudged"].items():
            log(f"  not judged: {node}: {why}")
        to_time = chosen["changed"] + chosen["controls"]
        if not to_time:
            log("judge-first: nothing changed and no control to time; no stage 2")
            return 0
        log(f"judge-first stage 2: {len(to_time)} node(s) timed -> {root / TIMED}")
        timed = _stage_args(args, root / TIMED, judge=False, all=False, ops=to_time, ops_file=None)
        if timed.resume:
            timed.ops = []      # the batch's own case list, as recorded
        if args.budget_s is not None:   # one --budget-s per call: stage 2 gets what stage 1 left
            timed.budget_s = max(args.budget_s - (time.monotonic() - call_started), 0.001)
            log(f"judge-first: stage 2 gets the {timed.budget_s:.0f} s left of --budget-s {args.budget_s:g}")
        started = time.monotonic()
        code = run_stage(timed)
        _wall(record, TIMED, started, log, root / TIMED)
        record.update(stage2={"nodes": to_time, "exit": code})
        if base is not None and code == 0:
            record["baseline"]["check"] = check = drift(root, to_time)
            for node, verdict in check["drift"].items():
                log(f"!!! baseline drift: {node}: fresh side A vs the baseline's: {verdict}")
        atomic.write_json(summary_path, record)
        if code == 0:
            report(root, log)
        if base is not None and code == 0:
            return _baseline_verdict(record["baseline"]["check"], log)
        return code
    finally:
        held.release()
