"""Helper, not a tool (report_attacks.py): attacks on run_batch.py's batch directory, on a
screen stopped mid-list and on what the drivers leave behind (the user's tuner cache, demo.sh's
own defaults); each starts zl_bench's real commands against the fake tree."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
from pathlib import Path

from _attack_kit import PY, Judge, attack, hold_env, quote_line, read_text, stop, strict_json, wait_for

WAIT_S = 240
SOFTMAX_SHAPES = "softmax:\n  shapes:\n    - [64, 64]\n"


def _batch(ctx, d: Path, *args, home=None, popen_log: Path = None, **env_over):
    argv = [PY, ctx.root / "run_batch.py", *args]
    env = ctx.env(home, ZL_RUNS_ROOT=d / "runs", **env_over)
    if popen_log is not None:
        return ctx.start(argv, d, env, popen_log)
    return ctx.run(argv, d, env, timeout=WAIT_S + 60)


def _shape_file(d: Path) -> Path:
    p = d / "batch_shapes.yaml"
    p.write_text(SOFTMAX_SHAPES)
    return p


BATCH_ARGS = ("--ops", "softmax", "--devices", "0", "--dtypes", "float32", "--retries", "0",
              "--op-timeout", "240")


def _finished_batch(ctx, d: Path) -> Path:
    bd = d / "batch"
    r = _batch(ctx, d, *BATCH_ARGS, "--batch-dir", bd, "--shape-file", _shape_file(d))
    if r.rc != 0:
        raise RuntimeError(f"the honest batch failed (exit {r.rc}): {quote_line(r.text, '!!!')}")
    return bd


def _status_bytes(bd: Path) -> dict:
    return {n: (bd / n).read_bytes() for n in ("ops_status.csv", "batch.json") if (bd / n).is_file()}


@attack("two_batches_on_one_batch_dir")
def two_batches(ctx, d):
    """a second run_batch.py on a batch directory while the first one runs"""
    bd = d / "batch"
    first = _batch(ctx, d, *BATCH_ARGS, "--batch-dir", bd, "--shape-file", _shape_file(d),
                   popen_log=d / "first.log", **hold_env(ctx, d))
    j = Judge("two run_batch.py on one --batch-dir at once")
    try:
        if not j.want(wait_for(lambda: (d / "ready").is_file(), first, WAIT_S),
                      f"the first batch's case never reached pytest (exit {first.poll()}): "
                      f"{quote_line(read_text(d / 'first.log'))}"):
            return j
        before = _status_bytes(bd)
        for extra in ((), ("--resume",)):
            second = _batch(ctx, d, *BATCH_ARGS, "--batch-dir", bd, *extra)
            j.saw(second, "in use by another run_batch.py")
            j.rc(second, 2)
            j.has(second.err, f"is in use by another run_batch.py (pid {first.pid})",
                  "the refusal" + (" of --resume" if extra else ""))
        j.want(_status_bytes(bd) == before, "the second batch rewrote ops_status.csv or batch.json")
        (d / "go").write_text("")
        rc = first.wait(timeout=WAIT_S)
    finally:
        stop(first)
    j.want(rc == 0, f"the first batch exited {rc}")
    with open(bd / "ops_status.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    j.want([(x["run_name"], x["status"]) for x in rows] == [("softmax", "PASS")],
           f"ops_status.csv: {[(x['run_name'], x['status']) for x in rows]}")
    return j


@attack("used_batch_dir_without_resume")
def used_batch_dir(ctx, d):
    """a new batch into a directory that holds a finished batch, without --resume"""
    bd = _finished_batch(ctx, d)
    before = _status_bytes(bd)
    r = _batch(ctx, d, "--ops", "relu", "--devices", "0", "--batch-dir", bd)
    j = Judge("run_batch.py --ops relu into a finished batch's directory, no --resume")
    j.saw(r, "already holds a batch")
    j.rc(r, 2)
    j.has(r.err, "already holds a batch", "the refusal")
    j.want(_status_bytes(bd) == before, "ops_status.csv or batch.json changed")
    return j


@attack("resume_with_other_dtypes")
def resume_dtypes(ctx, d):
    """--resume of a float32 batch with --dtypes float16"""
    bd = _finished_batch(ctx, d)
    before = _status_bytes(bd)
    r = _batch(ctx, d, "--resume", "--batch-dir", bd, "--devices", "0", "--dtypes", "float16")
    j = Judge("run_batch.py --resume --dtypes float16 on a float32 batch")
    j.saw(r, "dtypes: batch")
    j.rc(r, 2)
    j.has(r.err, "dtypes: batch 'float32', this call 'float16'", "the refusal")
    j.want(_status_bytes(bd) == before, "ops_status.csv or batch.json changed")
    same = _batch(ctx, d, "--resume", "--batch-dir", bd, "--devices", "0")
    j.want(same.rc == 0, f"a resume under the batch's own conditions exits {same.rc} too: the refusal "
           "above may not be about the dtypes")
    return j


@attack("resume_with_another_shape_file")
def resume_shape_file(ctx, d):
    """--resume with another --shape-file, then with the batch's own file edited"""
    bd = _finished_batch(ctx, d)
    before = _status_bytes(bd)
    other = d / "other_shapes.yaml"
    other.write_text(SOFTMAX_SHAPES.replace("[64, 64]", "[128, 128]"))
    j = Judge("run_batch.py --resume --shape-file <another file>, then the batch's file edited")
    r = _batch(ctx, d, "--resume", "--batch-dir", bd, "--devices", "0", "--shape-file", other)
    j.rc(r, 2)
    j.has(r.err, "shape_file: batch", "the refusal of another file")
    (d / "batch_shapes.yaml").write_text(SOFTMAX_SHAPES.replace("[64, 64]", "[64, 128]"))
    r = _batch(ctx, d, "--resume", "--batch-dir", bd, "--devices", "0")
    j.saw(r, "shape_file_sha256")
    j.rc(r, 2)
    j.has(r.err, "shape_file_sha256: batch", "the refusal of the edited file")
    j.want(_status_bytes(bd) == before, "ops_status.csv or batch.json changed")
    return j


@attack("resume_with_another_flaggems_tree")
def resume_tree(ctx, d):
    """--resume of a batch with FLAGGEMS_DIR pointing at another tree"""
    bd = _finished_batch(ctx, d)
    before = _status_bytes(bd)
    other = d / "other_flaggems"
    shutil.copytree(ctx.fake, other, ignore=shutil.ignore_patterns("__pycache__"))
    r = _batch(ctx, d, "--resume", "--batch-dir", bd, "--devices", "0", FLAGGEMS_DIR=other)
    j = Judge("run_batch.py --resume with FLAGGEMS_DIR=<a copy of the batch's tree>")
    j.saw(r, "flaggems.main.path")
    j.rc(r, 2)
    j.has(r.err, "flaggems.main.path: batch", "the refusal")
    j.want(_status_bytes(bd) == before, "ops_status.csv or batch.json changed")
    return j


# ------------------------------------------------------------------ the screen and side effects

SCREEN_SHAPES = "relu:\n  shapes:\n    - [64, 64]\nabs:\n  shapes:\n    - [64, 64]\nexp:\n  shapes:\n    - [64, 64]\n"


def _screen_stopped(ctx, d: Path, when):
    """ab_rlc_test.sh over relu, abs, exp (private HOME), SIGTERM once `when(root)` holds;
    (root, its exit status, whether the signal went out)."""
    root, home = d / "screen", d / "screen_home"
    home.mkdir()
    shapes = d / "screen_shapes.yaml"
    shapes.write_text(SCREEN_SHAPES)
    env = ctx.env(home, AB_ROOT=root, OPS="relu abs exp", SWITCH="ZL_TEST_SWITCH", SHAPE_FILE=shapes,
                  TELEMETRY_INTERVAL="0")
    proc = ctx.start(["bash", ctx.root / "ab_rlc_test.sh"], d, env, d / "screen.log")
    try:
        reached = wait_for(lambda: when(root), proc, WAIT_S)
        if reached:
            proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=WAIT_S)
    finally:
        stop(proc)
    return root, rc, reached


def _screen_report(ctx, d: Path, j: Judge, root: Path, code: int, never: list) -> Judge:
    js = d / "screen.json"
    r = ctx.bs(d, "--screen", root, "--json", js)
    j.saw(r, "INCOMPLETE")
    j.rc(r, code)
    j.has(r.out, "!!! [screen] INCOMPLETE", "the console")
    j.has(r.out, " ".join(never), "the console's list of cells never judged")
    completion = (strict_json(js).get("completion") or {}) if js.is_file() else {}
    j.want(completion.get("complete") is False and completion.get("never_judged") == never,
           f"the JSON's completion is {completion}")
    return j


@attack("screen_stopped_mid_list")
def screen_stopped(ctx, d):
    """ab_rlc_test.sh over relu, abs, exp stopped by SIGTERM after relu's verdict"""
    root, rc, judged = _screen_stopped(ctx, d, lambda root: len(read_text(root / "screen.tsv").splitlines()) >= 2)
    j = Judge("SIGTERM to ab_rlc_test.sh after 1 of 3 cells, then batch_summary.py --screen")
    if not j.want(judged and rc == 143, f"the screen was not stopped mid-list (signalled={judged}, exit {rc})"):
        return j
    return _screen_report(ctx, d, j, root, 0, ["abs", "exp"])


@attack("screen_stopped_in_its_first_cell")
def screen_first_cell(ctx, d):
    """ab_rlc_test.sh over relu, abs, exp stopped by SIGTERM while relu's first side runs"""
    root, rc, started = _screen_stopped(ctx, d, lambda root: (root / "relu_before" / "run.log").is_file())
    j = Judge("SIGTERM to ab_rlc_test.sh during its first cell (nothing judged), then batch_summary.py --screen")
    if not j.want(started and rc == 143, f"the screen was not stopped in its first cell (signalled={started}, exit {rc})"):
        return j
    return _screen_report(ctx, d, j, root, 5, ["relu", "abs", "exp"])


@attack("campaign_preflight_writes_the_users_tuner_cache")
def preflight_home(ctx, d):
    """an A/B driver's interpreter check with tuner isolation on: ~/.flaggems must stay unmade"""
    probe = d / "probe_home"
    probe.mkdir()
    made = ctx.run([PY, "-c", "import flag_gems"], d, ctx.env(probe))
    j = Judge("ab_rlc_test.sh (isolation on, HOME private) over one relu cell")
    if not j.want(made.rc == 0 and (probe / ".flaggems").exists(),
                  "importing the fake flag_gems does not create ~/.flaggems here: the attack could not see a leak"):
        return j
    root, home = d / "screen", d / "home"
    home.mkdir()
    shapes = d / "screen_shapes.yaml"
    shapes.write_text(SCREEN_SHAPES)
    r = ctx.run(["bash", ctx.root / "ab_rlc_test.sh"], d, ctx.env(home, AB_ROOT=root, OPS="relu",
                SWITCH="ZL_TEST_SWITCH", SHAPE_FILE=shapes, TELEMETRY_INTERVAL="0"), timeout=WAIT_S + 60)
    j.rc(r, 0)
    leaked = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    j.want(not (home / ".flaggems").exists(), f"HOME holds {leaked[:4]}")
    j.did = f"exit {r.rc}; HOME afterwards: {leaked[:3] or 'empty'}"
    return j


@attack("demo_warns_about_its_own_defaults")
def demo_defaults(ctx, d):
    """demo.sh's real job (FLAGGEMS_DIR set, a device visible) with every other default"""
    home, root, bin_dir = d / "home", d / "demo", d / "bin"
    home.mkdir()
    bin_dir.mkdir()
    # A device for demo.sh's probe (a stub nvidia-smi); the runs are the fake tree in the interpreter.
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Stub H200 (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    env = ctx.env(home, ZL_RUNS_ROOT=d / "runs", DEMO_ROOT=root, SHAPE_FILE="upstream",
                  PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    r = ctx.run(["bash", ctx.root / "demo.sh"], d, env, timeout=WAIT_S * 2)
    j = Judge("bash demo.sh in real mode (FLAGGEMS_DIR set, a device seen), nothing else set")
    j.saw(r, "warning", "page:")
    if not j.rc(r, 0):
        return j
    j.lacks(r.text, "CPU DEMO", "the console (real mode expected)")
    j.lacks(r.text, "shared tuner cache", "the demo's console")
    j.lacks(r.text, "warning [caliber]", "the demo's console")
    for side in ("before", "after"):
        ident = json.loads((root / side / "run_identity.json").read_text())
        j.want(ident.get("tuner_cache") == "isolated", f"{side}: tuner_cache={ident.get('tuner_cache')!r}")
    report = json.loads((root / "report.json").read_text())
    j.want(not report.get("caliber_hazards"), f"the report lists hazards: {report.get('caliber_hazards')}")
    j.want(not (home / ".flaggems").exists(), "HOME/.flaggems was written")
    j.did = (f"exit 0; hazards {report.get('caliber_hazards') or 'none'}; "
             f"tuner_cache {ident.get('tuner_cache')} on both sides")
    return j
