"""Helper, not a tool (report_attacks.py): attacks on one run and the environment it runs in
(hostile SHAPE_FILEs, TMPDIR, OUT_DIR, two runs on one OUT_DIR); each starts zl_bench's real
run_pytest.sh against the fake tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from _attack_kit import (RUN_ENV, Judge, attack, hold_env, quote_line, read_text, stop, strict_json, tree,
                         wait_for)

WAIT_S = 240
SHAPE_PREFLIGHT_S = 60


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
                      f"the first run never reached pytest (exit {first.poll()}): {quote_line(read_text(d / 'first.log'))}"):
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
    text = read_text(out / "run.log")
    j.want(text.count(">>> op=relu") == 1, "run.log does not hold exactly one run")
    return j
