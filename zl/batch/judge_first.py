"""run_batch.py --switch NAME --judge-first: judge every node untimed, time only what changed.

Stage 1, `<batch>/judge`: the screen with ZL_JUDGE_ONLY=1 on both sides (code at every level
and results; nothing timed, so `--judge-share N` cases per device cost no validity).
Stage 2, `<batch>/timed`: the timed screen (record/replay, --rounds R of it, under the
--overlap/--share-device given) of the nodes stage 1 found changed (`CHANGED`), plus up to
`--controls N` NO_IR_DIFF nodes as A/A controls: the verdict rule calibrates its noise on
them, so the report can call a changed node FASTER or SLOWER. Controls are the N nodes with
the smallest hash of their name, so a resume draws the same ones.
`<batch>/judge_first.json` (rewritten after each stage): the verdict counts of stage 1, the
changed nodes, the controls, and every node stage 1 could not judge with its reason.

Each stage is an ordinary batch directory; `--resume --batch-dir <batch>` continues the first
unfinished one under its recorded conditions.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Dict

from zl import atomic
from zl.batch.batchdir import BatchDirError, DirLock
from zl.batch.partition import REPEAT_VERDICTS, verdict_selected
from zl.batch.screen import read_screen_rows
from zl.batch.status import read_rows
from zl.ir.fingerprint import NO_IR_DIFF, VARIANTS_DIFFER
from zl.screen_verdict import WRONG_RESULTS

REPO_ROOT = Path(__file__).resolve().parents[2]
SUMMARY = "judge_first.json"
JUDGE, TIMED = "judge", "timed"
# stage-1 verdicts that send a node to the timed stage: campaign.sh's code changes, plus
# variant sets that differ (a timed shape may run another variant) and wrong results (the
# report puts those first; their timing is shown, never a win)
TIMED_VERDICTS = f"{REPEAT_VERDICTS},{VARIANTS_DIFFER},{WRONG_RESULTS}"
SAME = NO_IR_DIFF


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
        unjudged[node] = why
    return {"counts": dict(sorted(counts.items())), "changed": changed,
            "controls": sorted(same[:controls]), "unjudged": dict(sorted(unjudged.items()))}


def report(root: Path, log: Callable[[str], None]) -> None:
    """The timed stage's screen report (per-shape verdicts calibrated on its A/A controls):
    terminal, <batch>/report.json and <batch>/report.html."""
    r = subprocess.run([sys.executable, str(REPO_ROOT / "batch_summary.py"), "--screen", str(root / TIMED),
                        "--json", str(root / "report.json"), "--html", str(root / "report.html")],
                       capture_output=True, text=True)
    print((r.stdout + r.stderr).strip(), flush=True)
    log(f"judge-first report: {root / 'report.html'} (exit {r.returncode}); stage 1: {root / SUMMARY}")


def _stage_args(args, batch_dir: Path, **changes):
    out = copy.copy(args)
    out.batch_dir = batch_dir
    out.judge_first, out.judge_share, out.controls = False, None, 10
    out.resume = (batch_dir / "batch.json").is_file()
    for k, v in changes.items():
        setattr(out, k, v)
    return out


def run(args, run_stage: Callable[[object], int], log: Callable[[str], None]) -> int:
    """Both stages in `args.batch_dir`; `run_stage(args)` is run_batch's own run()."""
    root = Path(args.batch_dir).resolve()
    summary_path = root / SUMMARY
    if args.resume and not summary_path.is_file():
        raise BatchDirError(f"--resume --judge-first: {root} holds no judge-first batch (no {SUMMARY})")
    if not args.resume and summary_path.is_file():
        raise BatchDirError(f"--batch-dir {root} already holds a judge-first batch; continue it with --resume")
    held = DirLock(root)
    root.mkdir(parents=True, exist_ok=True)
    held.take()
    try:
        record = json.loads(summary_path.read_text()) if summary_path.is_file() else {
            "switch": args.switch, "controls_asked": args.controls, "judge_share": args.judge_share}
        if args.resume and (record.get("switch"), record.get("controls_asked")) != (args.switch, args.controls):
            raise BatchDirError(f"--resume --judge-first: the batch screens {record.get('switch')} with "
                                f"--controls {record.get('controls_asked')}; this call gives {args.switch} "
                                f"with --controls {args.controls}")
        # --rounds belongs to stage 2; recorded when > 1 (a resume keeps it, as batch.json does)
        rounds = int(record.get("rounds", 1)) if args.resume else args.rounds or 1
        if args.rounds not in (None, rounds):
            raise BatchDirError(f"--resume --judge-first: the batch times --rounds {rounds}; this call "
                                f"gives --rounds {args.rounds}")
        args.rounds = rounds
        record.update({"rounds": rounds} if rounds > 1 else {})
        atomic.write_json(summary_path, record)
        log(f"judge-first stage 1: every node of {args.switch} judged untimed -> {root / JUDGE}")
        # side C (--retune) and rounds belong to the timed stage: untimed, they judge nothing more
        code = run_stage(_stage_args(args, root / JUDGE, judge=True, overlap=1, retune=False,
                                     share_device=args.judge_share or 1, rounds=1))
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
        code = run_stage(timed)
        record.update(stage2={"nodes": to_time, "exit": code})
        atomic.write_json(summary_path, record)
        if code == 0:
            report(root, log)
        return code
    finally:
        held.release()
