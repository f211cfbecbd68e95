"""run_batch.py: run many FlagGems benchmark nodes through run_pytest.sh, one case directory
each, sharded over devices, one case at a time per device (--share-device N > 1: up to N at a
time, a functional sweep whose timings are invalid and marked so everywhere).

--resume --batch-dir B continues batch B: its cases, and the conditions batch.json recorded at
its start (backend, --dtypes, --dtype-fallback, --shape-file and a digest of its content,
--replay-root, --switch, --use-flagtune, the environment variables that change a measurement,
the compiler knobs the cases inherit (TRITON_*, FLAGTREE_*, MLIR_*, LLVM_*, DISABLE_LLVM_OPT;
not TRITON_CACHE_DIR or TRITON_HOME), the cases' toolchain (Python, torch, Triton's version and a digest of its package files), each
FlagGems tree's path and git commit + uncommitted changes, or a stat digest of a tree outside
git, the IR collector's rules for which launches are the operator's (zl.ir.RULES), the
GPU model of its devices by nvidia-smi, or --executor ray's batch device; none without a GPU).
Options left out are the batch's; a given option, the environment or a tree that differs exits
2 naming every difference, and so does another selection of cases. Reused untouched: cases
PASS/SKIP with .complete on every side (in a screen, with their screen.tsv row too); every
other case reruns, both sides.
One run_batch.py per batch directory (<batch>/.batch.lock, released when its holder dies,
however): a second exits 2 naming the holder's pid. A directory that already holds a batch
takes only --resume (exit 2 otherwise).
--share-device N (default 1): N cases at once per device. Screen verdicts (IR, results) stay
valid; every latency is measured under contention: each case gets ZL_DEVICE_SHARE=N (identity
device_share, refused by every comparison), ops_status notes shared_device=N. --resume keeps
a batch's caliber: 1 and > 1 never mix in one batch (exit 2).
--use-flagtune: USE_FLAGTUNE=1 for every case (the variable, inherited, works too).
--dtypes D: where upstream refuses D for an op ("can't be supported by this op"; about 77 of 1117
inventory nodes declare only integer or bool dtypes), --dtype-fallback all (default) reruns the
case without --dtypes, every declared dtype measured (note dtype_fallback); --dtype-fallback
first measures the op's first declared dtype in the same run (note dtype_fallback=first:<dtype>,
identity dtype_fallback=first, recorded in conditions). On an H100 judge screen at 16 cases per
device, 4 of 48 drawn nodes that refuse float16 timed out at 60 s running every declared dtype.
--switch NAME --retune: also side C (NAME=1 tuned live, <batch>/retuned) after B where A passed.
--switch NAME --judge-first: every node judged untimed into <batch>/judge, then only the changed
ones and --controls A/A controls timed into <batch>/timed; --baseline DIR takes the untimed
stage's side A from an earlier batch of the same FlagGems and toolchain (refused when its
conditions differ; every timed node checks it against a fresh side A, exit 5 on a drift).
--switch NAME --rounds R: rounds 2..R of each pair after round 1 (before, after, then side C of
--retune): <batch>/r2_B, r2_A, r3_A, r3_B, ... (ab_repeat.sh's cells and order), every one
replaying side before's record, run where both sides of round 1 passed; batch_summary.py
--screen reports each node's rounds (medians, interval, Mann-Whitney, A/A-calibrated verdicts).
--executor ray [--ray-address HOST:PORT]: every case (both sides of a screen) is one Ray task
holding one GPU of its node (1/N with --share-device N), returned compressed into this host's
batch directory; same tables, each row noting host=, node= and device_name=
(zl/batch/ray_executor.py; pip install -e '.[ray]'). Before the first case every GPU node is
checked: its FlagGems trees (each host's FLAGGEMS_DIR / FLAGGEMS_VLLM_DIR from its `ray start`
environment, else the driver's path) at the driver's commit and working state, its interpreter
(kit.sh, triton and flag_gems imports), its zl_bench checkout, its device; a timing batch runs
only on the batch's device (--ray-device-name, else the device of most GPUs) unless
--allow-mixed-hardware (the batch is then MIXED HARDWARE, everywhere it reports);
--ray-exclude-failing-nodes leaves refused nodes out (batch.json names each, with its reason).

Examples:
  python run_batch.py --all --devices 0,1,2,3 --dtypes float16 --op-timeout 1800
  python run_batch.py --all --judge --share-device 16 --dtypes float16 --dtype-fallback first
  python run_batch.py --ops softmax vllm:fused_marlin_moe nextafter_@nextafter_
  python run_batch.py --ops-file my_ops.txt --replay-root runs/batch_X
  python run_batch.py --resume --batch-dir runs/batch_X        # rerun only the unfinished
  python run_batch.py --ops-file list.txt --switch NAME --share-device 3   # functional screen
  python run_batch.py --ops softmax mm --switch NAME --rounds 6              # 6 timed rounds per pair
  python run_batch.py --all --judge --share-device 6 --batch-dir runs/base   # a baseline per build
  python run_batch.py --all --switch NAME --judge-first --judge-share 6 --baseline runs/base
  python run_batch.py --all --executor ray --ray-address head:6379            # on a Ray cluster

Outputs:
  <batch>/<repo>/<run_name>/ (a single run's layout), <batch>/ops_status.csv (one row per case,
  rewritten atomically after every change), <batch>/summary.csv (batch_summary.py),
  <batch>/console/<repo>/<run_name>.log (run_pytest.sh's console, all attempts),
  <batch>/batch.json (the start's conditions and cases, one entry per call),
  <batch>/costs.tsv (per case: the graph timer's, the results check's and the IR plugin's
  seconds, and the CPU seconds of the case's processes). Statuses: PASS, SKIP (runtime
  skip/xfail, no rows), NO_ROWS (exit 0, nothing measured), FAIL, TIMEOUT;
  PENDING/RUNNING/INTERRUPTED for cases not finished.

Exit codes:
  0    every case has a final status (the statuses carry the results)
  2    bad input (--rounds not an integer >= 1, or > 1 without --switch, with --judge or with
       --share-device N > 1; --dtype-fallback first without --dtypes), a batch directory in use,
       already holding a batch (without --resume), a file or not creatable, an input file
       missing or not UTF-8 (--ops-file, --dismiss, --balance, ops_status.csv, screen.tsv), a
       --balance time not a finite number >= 0, a batch.json or judge_first.json field of the
       wrong type, a --resume under other conditions
       (another --rounds, --dtype-fallback or GPU model included); --executor ray without Ray importable (the message gives the install
       command), its cluster unreachable or without GPUs, a GPU node whose FlagGems tree is
       not the driver's commit and working state, no node of the batch's device
  3    cases left unstarted (--budget-s reached; rerun with --resume)
  4    the interpreter cannot import triton or flag_gems (checked once, before the first case;
       with --executor ray on every GPU node, with its kit.sh and zl_bench checkout)
  5    --judge-first --baseline: a timed node's fresh side A compiled other code than the
       baseline's (judge_first.json baseline.check.drift; stage 1's verdicts void)
  130  interrupted (Ctrl-C, SIGTERM): running cases killed, their rows INTERRUPTED
"""

from __future__ import annotations

import argparse
from pathlib import Path

from zl import cli_help
from zl.batch import inventory as inv
from zl.shapes.dtype_fallback import POLICIES

OPS_DIR = Path(__file__).resolve().parents[2] / "ops"


def _positive(kind):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"must be > 0 (got {text})")
        return v
    return parse


def _share_count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {text}); 1 = one case at a time per device")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = cli_help.parser(__doc__, prog="run_batch.py")
    s = p.add_argument_group("selection")
    s.add_argument("--all", action="store_true", help="every inventory case but marked-skip and dismissed")
    s.add_argument("--ops", nargs="+", default=[], metavar="NAME", help="[repo:]run_name or [repo:]op")
    s.add_argument("--ops-file", type=Path, help="names, one per line, # comments")
    s.add_argument("--repo", action="append", choices=sorted(inv.REPO_ENV), help="with --all: only this repo")
    s.add_argument("--include-skipped", action="store_true", help="with --all: keep marked-skip cases")
    s.add_argument("--dismiss", type=Path, default=OPS_DIR / "dismiss.txt", help="left out of --all")
    s.add_argument("--list", action="store_true", help="print the cases and their devices, run nothing")
    d = p.add_argument_group("devices")
    d.add_argument("--backend", default=None, help="cuda/musa/rocm/ascend (default $ZL_BACKEND or cuda)")
    d.add_argument("--devices", default=None, help="comma separated ids (default: the backend's visible ones)")
    d.add_argument("--gpus", default=None, help="alias of --devices (giving both is an error)")
    d.add_argument("--balance", type=Path, help="screen.tsv or ops_status.csv: shard by measured time")
    d.add_argument("--share-device", type=_share_count, default=None, metavar="N",
                   help="run up to N cases at once per device (default 1, the only timing-valid "
                        "setting; N > 1 is a functional sweep: its timings are marked invalid; "
                        "with --resume: the batch's)")
    d.add_argument("--overlap", type=_share_count, default=None, metavar="N",
                   help="run up to N cases at once per device with exclusive timing: each do_bench "
                        "call holds the device's lock alone, each test's GPU work holds it shared, "
                        "start-up and compilation overlap (timings valid; identity device_overlap=N "
                        "and overlap_protocol, compared only with runs overlapped alike; "
                        "default 1; with --resume: the batch's)")
    r = p.add_argument_group("running")
    r.add_argument("--batch-dir", type=Path, help="output directory (default <runs>/batch_<timestamp>)")
    r.add_argument("--resume", action="store_true", help="with --batch-dir: continue that batch, under its conditions")
    r.add_argument("--op-timeout", type=_positive(float), default=1800.0,
                   help="seconds per attempt; under --overlap N the seconds an attempt waits for the device's "
                   "timing lock are not counted (up to N - 1 more --op-timeouts, one with --budget-s; a TIMEOUT "
                   "row notes lock_waited_s, and lock_wait_cut when it was killed still waiting)")
    r.add_argument("--kill-grace", type=_positive(float), default=10.0, help="seconds from TERM to KILL")
    r.add_argument("--retries", type=int, default=2, choices=range(0, 10), metavar="N",
                   help="retries after pytest rc 1 / a signal death (default 2)")
    r.add_argument("--dtypes", default=None, help="space or comma separated dtypes (with fallbacks)")
    r.add_argument("--dtype-fallback", choices=POLICIES, default=None,
                   help="with --dtypes, where upstream refuses them for an op: all (default) reruns the "
                        "case unrestricted, measuring every dtype the op declares (note dtype_fallback); "
                        "first measures the op's first declared dtype in the same run, no rerun (note "
                        "dtype_fallback=first:<dtype>; identity dtype_fallback=first, a caliber field; "
                        "with --resume: the batch's)")
    r.add_argument("--replay-root", type=Path, help="replay <root>/<repo>/<run_name> per case")
    r.add_argument("--shape-file", default=None, help="SHAPE_FILE for every case (default: upstream shapes)")
    r.add_argument("--use-flagtune", action="store_true", default=None,
                   help="USE_FLAGTUNE=1 for every case (FlagGems' widened tuning space)")
    r.add_argument("--judge", action="store_true", default=None,
                   help="time nothing: every side runs with ZL_JUDGE_ONLY=1 (code and results judged, "
                        "latencies nan, identity timer=none); with --resume: the batch's")
    r.add_argument("--judge-first", action="store_true",
                   help="with --switch: judge every node untimed into <batch>/judge, then time only the "
                        "changed ones and --controls A/A controls into <batch>/timed (zl/batch/judge_first.py)")
    r.add_argument("--judge-share", type=_share_count, default=None, metavar="N",
                   help="with --judge-first: cases at once per device in the untimed stage (default 1)")
    r.add_argument("--controls", type=int, default=10, metavar="N",
                   help="with --judge-first: NO_IR_DIFF nodes timed as A/A controls (default 10)")
    r.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                   help="with --judge-first: side A of the untimed stage from DIR, an earlier batch of the "
                        "same FlagGems and toolchain (plain --judge, or a screen of the same switch): only "
                        "side B runs where DIR's side A passed; its SKIPs, and its TIMEOUTs under no larger "
                        "--op-timeout and no fewer cases per device, end their nodes unjudged without a run; refused when DIR's conditions differ; "
                        "checked on every timed node, exit 5 when fresh side A compiles other code "
                        "(with --resume: the batch's)")
    # stage 1 of --judge-first gets the opened baseline here (zl/batch/judge_first.py)
    p.set_defaults(baseline_side=None)
    r.add_argument("--switch", metavar="NAME",
                   help="screen NAME: per case NAME=0 records into <batch>/before, then NAME=1 "
                        "replays it into <batch>/after; verdicts in <batch>/screen.tsv")
    r.add_argument("--retune", action=argparse.BooleanOptionalAction, default=None, help="with --switch: "
                   "side C, NAME=1 tuned live into <batch>/retuned (with --resume: the batch's)")
    r.add_argument("--rounds", default=None, metavar="R",
                   help="with --switch: R rounds per case (default 1; with --judge-first: of the timed "
                        "stage): after before/after, sides <batch>/r<k>_<A|B> of rounds 2..R, even "
                        "rounds B then A, odd A then B, each replaying side before's record "
                        "(with --resume: the batch's)")
    x = p.add_argument_group("cluster")
    x.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local (default): this host's devices; ray: one Ray task per case, one GPU "
                        "each, on the cluster's nodes (pip install -e '.[ray]')")
    x.add_argument("--ray-address", default=None, metavar="ADDRESS",
                   help="with --executor ray: the cluster's head (HOST:6379; default $RAY_ADDRESS, else "
                        "the cluster running on this host, else a new one-host cluster; local: a new one)")
    x.add_argument("--ray-retries", type=int, default=3, choices=range(0, 10), metavar="N",
                   help="with --executor ray: reruns of a case whose node or worker died (default 3)")
    x.add_argument("--ray-exclude-failing-nodes", action="store_true",
                   help="with --executor ray: leave out the GPU nodes its check refuses (another "
                        "FlagGems tree, a failing interpreter) instead of refusing the batch")
    x.add_argument("--ray-device-name", default=None, metavar="NAME",
                   help="with --executor ray: the device a timing batch runs on, as torch names it "
                        "(default: the device of most GPUs; --resume: the batch's)")
    x.add_argument("--allow-mixed-hardware", action="store_true",
                   help="run on devices of more than one GPU model (locally: --devices naming two "
                        "models; with --executor ray: nodes of other devices); the batch and its "
                        "reports say MIXED HARDWARE and each row names its device")
    r.add_argument("--bytecode-cache", choices=("auto", "shared", "off"), default="auto",
                   help="shared: this call's local cases cache Python bytecode in a TMPDIR folder "
                        "per side (PYTHONPYCACHEPREFIX; removed at the end); auto (default): shared when the "
                        "cases' torch ships no bytecode (every case would compile it from source); "
                        "off: as the environment says. A PYTHONPYCACHEPREFIX you set is kept")
    r.add_argument("--budget-s", type=_positive(float), default=None,
                   help="start no case that could end after this many seconds (then exit 3)")
    return p
