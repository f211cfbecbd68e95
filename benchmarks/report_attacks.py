#!/usr/bin/env python3
"""Rerun, as an adversary would, the ways a zl_bench report could look valid when it is not,
and say for each whether zl_bench held.

Each attack builds one adversarial situation on the CPU against the bundled fake FlagGems tree
(tests/fake_flaggems, Triton's interpreter, TRITON_INTERPRET=1) and runs zl_bench's real
commands on it (run_pytest.sh, batch_summary.py, run_batch.py, ab_rlc_test.sh, demo.sh):
reports that claim what is not true (an llir-only change called an A/A, a page without the
results verdict, a relative error against a ~0 torch reference, a 1e-320 latency, `$x$` in a
shape label), provenance the identity must carry (a replay paired with a run it did not
replay, a re-recorded side A, an edited or missed record, other hardware, an unfinished run
or screen), concurrency and outputs (two runs on one OUT_DIR or batch dir, a used batch dir,
a resume under other conditions, a page written into an input, a stale page), bad input and
environment (hostile SHAPE_FILEs, TMPDIR missing, OUT_DIR read-only or full) and quiet side
effects (the user's tuner cache, demo.sh's own defaults). zl_bench holds when it gives the
expected refusal (exit code and message), the expected INCOMPLETE or verdict text, or leaves
the output unwritten.

The shared runs (a record run A of the fake mm, replays B and C of A, A recorded again, a
replay of an edited record, a replay that misses every key) are made once at the start and
copied per attack; the whole list takes 1.5 minutes on two idle CPU cores (80-90 s measured),
longer on a loaded machine.

Prints one line per attack:
    HELD <name>: <what was tried> -> <what zl_bench did>
    BROKEN <name>: <what was tried> -> <what zl_bench did>; <each expectation missed>
    SKIPPED <name>: <why it cannot be built here> (not counted as tried)
then `attacks tried N, held M`.

Exit: 0 every attack tried held; 1 an attack got through (or could not be judged: its
shared run failed, a step timed out); 2 usage (unknown attack name, a --work-dir that is
not empty); 130 interrupted (the commands it started are stopped with it).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _attack_kit as kit  # noqa: E402
import _attacks_reports  # noqa: E402,F401  (registers the report attacks)
import _attacks_runs  # noqa: E402,F401  (registers the run, SHAPE_FILE and environment attacks)
import _attacks_campaigns  # noqa: E402,F401  (registers the batch, screen and side-effect attacks)

EXIT_HELD, EXIT_BROKEN, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", metavar="NAME[,NAME]", action="append", default=[],
                   help="run only these attacks (comma separated, repeatable; see --list)")
    p.add_argument("--list", action="store_true", help="print every attack's name and what it tries; run nothing")
    p.add_argument("--work-dir", type=Path, help="where the runs and attack copies go (empty or new; kept "
                   "afterwards). Default: a temporary directory, removed at the end")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the result as JSON")
    p.add_argument("--jobs", type=int, default=2, help="shared runs built at once (default 2)")
    p.add_argument("--zl-root", type=Path, default=kit.REPO, metavar="DIR",
                   help="the zl_bench checkout to attack, e.g. a git worktree of an older commit "
                   "(default: this one; the attacks and their helpers always come from this one)")
    return p.parse_args(argv)


def selected(only):
    names = [n.strip() for item in only for n in item.split(",") if n.strip()]
    unknown = [n for n in names if n not in kit.ATTACKS]
    if unknown:
        raise ValueError(f"report_attacks.py: unknown attack(s): {', '.join(unknown)} (see --list)")
    return [kit.ATTACKS[n] for n in dict.fromkeys(names)] if names else list(kit.ATTACKS.values())


def run_one(ctx, a):
    d = ctx.work / "attacks" / a.name
    d.mkdir(parents=True)
    t0 = time.monotonic()
    try:
        for need in a.needs:
            ctx.fixture(need)
        judge = a.func(ctx, d)
    except kit.FixtureError as exc:
        judge = kit.Judge(tried=a.summary, did="not judged", problems=[f"shared run unusable: {exc}"])
    except Exception as exc:  # an attack that cannot be judged is not credited as held
        judge = kit.Judge(tried=a.summary, did="not judged",
                          problems=[f"the attack itself failed: {type(exc).__name__}: {exc}"])
    return judge, time.monotonic() - t0


def line(a, j, work):
    """The attack's one line; paths inside its own directory are shown relative to it."""
    if j.skipped:
        text = f"SKIPPED {a.name}: {j.skipped}"
    else:
        tail = "" if j.held else "; " + "; ".join(j.problems)
        text = f"{'HELD' if j.held else 'BROKEN'} {a.name}: {j.tried} -> {j.did}{tail}"
    return text.replace(f"{work}/attacks/{a.name}/", "").replace(str(work), "<work>")


def _interrupted(signum, frame):
    """SIGTERM ends the script like Ctrl-C: the commands it started are stopped first."""
    raise KeyboardInterrupt


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        attacks = selected(args.only)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    if args.list:
        for a in attacks:
            print(f"{a.name}\t{a.summary}")
        return EXIT_HELD
    if args.jobs < 1:
        print("report_attacks.py: --jobs must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    if not (args.zl_root / "run_pytest.sh").is_file():
        print(f"report_attacks.py: --zl-root {args.zl_root} holds no run_pytest.sh", file=sys.stderr)
        return EXIT_USAGE
    if args.work_dir is not None:
        if args.work_dir.exists() and (not args.work_dir.is_dir() or any(args.work_dir.iterdir())):
            print(f"report_attacks.py: --work-dir {args.work_dir} is not an empty directory", file=sys.stderr)
            return EXIT_USAGE
        args.work_dir.mkdir(parents=True, exist_ok=True)
        work = args.work_dir.resolve()
    else:
        work = Path(tempfile.mkdtemp(prefix="zl_report_attacks."))
    signal.signal(signal.SIGTERM, _interrupted)
    t0 = time.monotonic()
    results = []
    ctx = kit.Ctx(work, args.zl_root, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        ctx.prepare({n for a in attacks for n in a.needs}, jobs=args.jobs)
        for a in attacks:
            judge, secs = run_one(ctx, a)
            results.append((a, judge, secs))
            print(line(a, judge, work), flush=True)
    except KeyboardInterrupt:
        print(f"report_attacks.py: interrupted after {len(results)} attack(s)", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        ctx.close()
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    tried = [r for r in results if not r[1].skipped]
    held = [r for r in tried if r[1].held]
    elapsed = time.monotonic() - t0
    print(f"attacks tried {len(tried)}, held {len(held)}")
    print(f"({elapsed:.0f} s{'' if args.work_dir is None else f'; work dir {work}'})", file=sys.stderr)
    if args.json:
        from zl import atomic
        atomic.write_json(args.json, {
            "tried": len(tried), "held": len(held), "seconds": round(elapsed, 1),
            "attacks": [{"name": a.name, "status": "skipped" if j.skipped else ("held" if j.held else "broken"),
                         "tried": j.tried, "did": j.did, "problems": j.problems, "skipped": j.skipped or None,
                         "seconds": round(s, 1)} for a, j, s in results]}, indent=2)
    return EXIT_HELD if len(held) == len(tried) else EXIT_BROKEN


if __name__ == "__main__":
    sys.exit(main())
