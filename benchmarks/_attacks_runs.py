"""Helper, not a tool (report_attacks.py): attacks on the runs, the batch, the screen and the
environment zl_bench runs in; each starts zl_bench's real commands against the fake tree."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from _attack_kit import (PY, RUN_ENV, Judge, attack, hold_env, quote_line, stop, strict_json, tree,
                         wait_for)

WAIT_S = 240
SHAPE_PREFLIGHT_S = 60
SOFTMAX_SHAPES = "softmax:\n  shapes:\n    - [64, 64]\n"


# ------------------------------------------------------------------ SHAPE_FILE

def _alias_bomb() -> str:
    rows = ["a0: &a0 [4, 64]"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    return "\n".join(rows) + "\nrelu:\n  shapes: [*a9]\n"


SHAPE_ATTACKS = (
    ("shape_file_recursive_alias", "a recursive yaml alias", "relu: &a\n  shapes: [*a]\n",
     "refers to a node that contains it"),
    ("shape_file_not_utf8", "a 0xff byte in a comment", b"relu:\n  shapes:\n    - [4, 64]  # \xff\n",
     "is not UTF-8 text"),
    ("shape_file_alias_bomb", "ten levels of ten aliases (10^9 shapes expanded)", _alias_bomb(),
     "yaml nodes with aliases expanded"),
    ("shape_file_of_100k_shapes", "100,000 shapes (2.4 MB)", "relu:\n  shapes:\n" + "    - [4, 64]\n" * 100_000,
     "bytes (the shape file limit)"),
    ("shape_file_tensor_beyond_memory", "a [1000000000, 1000000000] shape",
     "relu:\n  shapes:\n    - [1000000000, 1000000000]\n", "needs a tensor of at least"),
    ("shape_file_dimension_beyond_int64", "a dimension of 2^63+5", f"relu:\n  shapes:\n    - [{2 ** 63 + 5}, 4]\n",
     "which does not fit int64"),
    ("shape_file_letter_o_for_zero", "`1O24` (letter O) as a dimension", "relu:\n  shapes:\n    - [1O24, 4]\n",
     "a word that reads like a mistyped number"),
)


def _shape_attack(label: str, text, needle: str):
    def run(ctx, d):
        shapes = d / "shapes.yaml"
        shapes.write_bytes(text if isinstance(text, bytes) else text.encode())
        out = d / "run"
        # A preflight that takes a minute is itself the hole (an alias bomb hung it).
        r = ctx.run_pytest(out, d, timeout=SHAPE_PREFLIGHT_S, OP="relu", OP_FILE="relu", SHAPE_FILE=shapes)
        j = Judge(f"SHAPE_FILE with {label}")
        j.saw(r, "PREFLIGHT_FAILED")
        j.rc(r, 3)
        failed = [x for x in r.err.splitlines() if "PREFLIGHT_FAILED" in x]
        j.want(len(failed) == 1 and "check=shape_file" in failed[0],
               f"not one `PREFLIGHT_FAILED check=shape_file` line ({len(failed)} lines)")
        j.has(r.err, needle, "the refusal")
        j.no_traceback(r)
        j.want(not (out / "run.log").exists(), "a run.log was written")
        return j
    return run


for _name, _label, _text, _needle in SHAPE_ATTACKS:
    attack(_name, summary=f"SHAPE_FILE with {_label}")(_shape_attack(_label, _text, _needle))


@attack("shape_file_is_a_device_or_a_fifo")
def shape_file_device(ctx, d):
    """SHAPE_FILE=/dev/zero (endless, size 0), then a named pipe nobody writes (blocks a reader)"""
    fifo = d / "shapes.fifo"
    os.mkfifo(fifo)
    j = Judge("SHAPE_FILE=/dev/zero, then SHAPE_FILE=<a fifo>")
    said = []
    for shapes in (Path("/dev/zero"), fifo):
        r = ctx.run_pytest(d / "run", d, timeout=SHAPE_PREFLIGHT_S, OP="relu", OP_FILE="relu", SHAPE_FILE=shapes)
        j.rc(r, 3)
        j.has(r.err, "PREFLIGHT_FAILED check=shape_file", f"the refusal of {shapes}")
        j.no_traceback(r)
        said.append(f"{shapes}: exit {r.rc}: {quote_line(r.err, 'PREFLIGHT_FAILED')}")
    j.did = " | ".join(said)
    return j


# ------------------------------------------------------------------ TMPDIR and OUT_DIR

@attack("tmpdir_missing")
def tmpdir_missing(ctx, d):
    """TMPDIR names a directory that does not exist"""
    out, tmp = d / "run", d / "no_such_tmp"
    r = ctx.run_pytest(out, d, OP="relu", OP_FILE="relu", TMPDIR=tmp)
    j = Judge(f"run_pytest.sh with TMPDIR={tmp.name} (missing)")
    j.saw(r, "TMPDIR")
    j.rc(r, 2)
    j.has(r.err, f"!!! TMPDIR='{tmp}' is not a directory", "the refusal")
    j.no_traceback(r)
    j.want(not out.exists(), "OUT_DIR was created")
    return j


@attack("tmpdir_read_only")
def tmpdir_read_only(ctx, d):
    """TMPDIR an existing directory that takes no write"""
    tmp, how = _no_write_dir(d)
    if tmp is None:
        return Judge("", skipped="no read-only directory can be made here (root without chattr)")
    out = d / "run"
    try:
        r = ctx.run_pytest(out, d, OP="relu", OP_FILE="relu", TMPDIR=tmp)
    finally:
        _writable_again(tmp, how)
    j = Judge(f"run_pytest.sh with TMPDIR read-only ({how})")
    j.saw(r, "TMPDIR")
    j.rc(r, 2)
    j.has(r.err, f"!!! TMPDIR='{tmp}' is not writable", "the refusal")
    j.no_traceback(r)
    j.want(not out.exists(), "OUT_DIR was created")
    return j


def _writable_again(path: Path, how: str) -> None:
    if how == "chattr +i":
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    path.chmod(0o755)


def _no_write_dir(d: Path):
    """An existing, empty directory that refuses writes, and how it was made; None when this
    user can write anywhere and chattr +i is not available (root without e2fsprogs)."""
    target = d / "read_only"
    target.mkdir()
    target.chmod(0o555)
    if not _writable(target):
        return target, "chmod 555"
    target.chmod(0o755)
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode == 0:
        if not _writable(target):
            return target, "chattr +i"
        subprocess.run(["chattr", "-i", str(target)], capture_output=True)
    return None, ""


def _writable(path: Path) -> bool:
    try:
        with tempfile.NamedTemporaryFile(dir=path):
            return True
    except OSError:
        return False


@attack("out_dir_read_only")
def out_dir_read_only(ctx, d):
    """OUT_DIR an existing directory that takes no write"""
    target, how = _no_write_dir(d)
    if target is None:
        return Judge("", skipped="no read-only directory can be made here (root without chattr)")
    try:
        r = ctx.run_pytest(target, d, OP="relu", OP_FILE="relu")
        j = Judge(f"run_pytest.sh with OUT_DIR read-only ({how})")
        j.saw(r, "OUT_DIR_WRITE_FAILED")
        j.rc(r, 6)
        j.has(r.err, "!!! OUT_DIR_WRITE_FAILED", "the refusal")
        j.no_traceback(r)
        j.want(not any(target.iterdir()), "OUT_DIR holds files")
    finally:
        _writable_again(target, how)
    return j


@attack("out_dir_disk_full")
def out_dir_full(ctx, d):
    """every write fails (ulimit -f 0): a full disk"""
    out, tmp = d / "run", d / "tmp"
    tmp.mkdir()
    r = ctx.run_pytest(out, d, limit_kib=0, OP="relu", OP_FILE="relu", TMPDIR=tmp)
    j = Judge("run_pytest.sh on a full disk (ulimit -f 0)")
    j.saw(r, "OUT_DIR_WRITE_FAILED")
    j.rc(r, 6)
    j.has(r.err, f"!!! OUT_DIR_WRITE_FAILED out={out}", "the refusal")
    j.no_traceback(r)
    j.want(not out.exists(), "a half-made OUT_DIR was left")
    j.want(not any(tmp.iterdir()), "TMPDIR holds the run's temporaries")
    return j


@attack("out_dir_fills_up_mid_run", needs=("A",))
def out_dir_fills(ctx, d):
    """a replay of A whose OUT_DIR is a 64 KiB tmpfs that fills while the run writes"""
    if not shutil.which("unshare"):
        return Judge("", skipped="no unshare(1): cannot mount a small filesystem without root")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return Judge("", skipped=f"no user and mount namespace here ({probe.stderr.strip()[:80]})")
    a = ctx.copy("A", d / "A")
    mnt, keep = d / "small_disk", d / "kept"
    mnt.mkdir()
    env = ctx.env(**{**RUN_ENV, "OUT_DIR": mnt / "B", "REPLAY_FROM": a})
    # The mount lives in the namespace only; the run directory is copied out before it goes.
    script = (f'mount -t tmpfs -o size=64k tmpfs "$0" || exit 90; bash "$1"; rc=$?; '
              f'cp -a "$0/B" "$2" 2>/dev/null; exit $rc')
    r = ctx.run(["unshare", "-rm", "bash", "-c", script, mnt, ctx.root / "run_pytest.sh", keep], d, env, timeout=300)
    if r.rc == 90:
        return Judge("", skipped=f"tmpfs cannot be mounted here: {quote_line(r.err)}")
    j = Judge("a replay of A into a 64 KiB filesystem, then --ab A <it>")
    j.want(r.rc != 0, "run_pytest.sh exited 0 on a full disk")
    # 128+N reads as "stopped by signal N": a full disk once ended the run with 141 (SIGPIPE).
    j.want(r.rc < 128 or r.rc == 124, f"run_pytest.sh exited {r.rc}, which reads as a signal, not a full disk")
    j.has(r.text, "No space left on device", "the console")
    rep = ctx.bs(d, "--ab", a, keep, "--label", "mm", "--json", d / "ab.json")
    complete = None
    if (d / "ab.json").is_file():
        complete = (strict_json(d / "ab.json").get("summary") or {}).get("complete")
    j.want(rep.rc != 0 or complete is False,
           f"--ab A <the full-disk run> exits {rep.rc} with complete={complete!r}: it reads as a whole run")
    j.did = f"run exit {r.rc} ({quote_line(r.text, 'OUT_DIR_WRITE_FAILED', 'No space left')}); report exit {rep.rc}" + \
        (f", complete={complete}" if complete is not None else f": {quote_line(rep.text, '!!!')}")
    return j


@attack("out_dir_is_dev_full")
def out_dir_dev_full(ctx, d):
    """OUT_DIR=/dev/full (a device that fails every write), then OUT_DIR=/dev/full/run"""
    j = Judge("run_pytest.sh with OUT_DIR=/dev/full and OUT_DIR=/dev/full/run")
    said = []
    for out in ("/dev/full", "/dev/full/run"):
        r = ctx.run_pytest(Path(out), d, OP="relu", OP_FILE="relu")
        j.rc(r, 2, 6)
        j.has(r.err, "OUT_DIR", f"the refusal of {out}")
        j.no_traceback(r)
        said.append(f"{out}: exit {r.rc}: {quote_line(r.err, 'OUT_DIR')}")
    j.did = " | ".join(said)
    return j


# ------------------------------------------------------------------ one writer per directory

@attack("two_runs_on_one_out_dir")
def two_runs(ctx, d):
    """a second run_pytest.sh on an OUT_DIR while the first one runs"""
    out = d / "shared_out"
    env = ctx.env(**{**RUN_ENV, "OP": "relu", "OP_FILE": "relu", "OUT_DIR": out, **hold_env(ctx, d)})
    first = ctx.start(["bash", ctx.root / "run_pytest.sh"], d, env, d / "first.log")
    j = Judge("two run_pytest.sh on one OUT_DIR at once")
    try:
        if not j.want(wait_for(lambda: (d / "ready").is_file(), first, WAIT_S),
                      f"the first run never reached pytest (exit {first.poll()}): {quote_line(_read(d / 'first.log'))}"):
            return j
        before = tree(out, skip=(".zl.lock", "run.log", ".run_identity.json.lock"))
        second = ctx.run_pytest(out, d, OP="relu", OP_FILE="relu")
        j.saw(second, "OUT_DIR_BUSY")
        j.rc(second, 2)
        j.has(second.err, f"locked by pid {first.pid}", "the refusal")
        j.want(not [p for p in out.iterdir() if p.name.startswith("prev-")], "the first run was moved aside")
        j.want(set(tree(out)) >= set(before), "the first run lost files")
        (d / "go").write_text("")
        rc = first.wait(timeout=WAIT_S)
    finally:
        stop(first)
    j.want(rc == 0, f"the first run exited {rc}")
    text = _read(out / "run.log")
    j.want(text.count(">>> op=relu") == 1, "run.log does not hold exactly one run")
    return j


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


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
                      f"{quote_line(_read(d / 'first.log'))}"):
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


def _screen_stopped(ctx, d: Path):
    """ab_rlc_test.sh over relu, abs, exp with a private HOME, SIGTERM once relu is judged."""
    root, home = d / "screen", d / "screen_home"
    home.mkdir()
    shapes = d / "screen_shapes.yaml"
    shapes.write_text(SCREEN_SHAPES)
    env = ctx.env(home, AB_ROOT=root, OPS="relu abs exp", SWITCH="ZL_TEST_SWITCH", SHAPE_FILE=shapes,
                  TELEMETRY_INTERVAL="0")
    proc = ctx.start(["bash", ctx.root / "ab_rlc_test.sh"], d, env, d / "screen.log")
    try:
        judged = wait_for(lambda: len(_lines(root / "screen.tsv")) >= 2, proc, WAIT_S)
        if judged:
            proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=WAIT_S)
    finally:
        stop(proc)
    return root, home, rc, judged


def _lines(path: Path):
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


@attack("screen_stopped_mid_list")
def screen_stopped(ctx, d):
    """ab_rlc_test.sh over relu, abs, exp stopped by SIGTERM after relu's verdict"""
    root, _, rc, judged = _screen_stopped(ctx, d)
    j = Judge("SIGTERM to ab_rlc_test.sh after 1 of 3 cells, then batch_summary.py --screen")
    if not j.want(judged and rc == 143, f"the screen was not stopped mid-list (judged={judged}, exit {rc})"):
        return j
    js = d / "screen.json"
    r = ctx.bs(d, "--screen", root, "--json", js)
    j.saw(r, "INCOMPLETE")
    j.rc(r, 0)
    j.has(r.out, "!!! [screen] INCOMPLETE", "the console")
    completion = strict_json(js).get("completion") or {}
    j.want(completion.get("complete") is False and completion.get("never_judged") == ["abs", "exp"],
           f"the JSON's completion is {completion}")
    return j


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
