"""run_batch.py --resume continues one batch under the conditions it started with, one
run_batch.py at a time per batch directory, and reuses only what finished on every side.

Runs against the stub case (tests/fixtures/batch/stub_case.sh): milliseconds per case."""

import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runner import FAKE_FLAGGEMS_DIR, REPO_ROOT, base_env
from test_batch import STUB, batch, pid_alive, status, trace
from zl.batch import conditions as conds


def snapshot(bd):
    """Every file of a batch directory but its lock file: path -> bytes."""
    return {p.relative_to(bd).as_posix(): p.read_bytes() for p in sorted(Path(bd).rglob("*"))
            if p.is_file() and p.name != ".batch.lock"}


def write_csv(path, rows, delimiter=","):
    rows = list(rows)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter=delimiter, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


# ---------------------------------------------------------------- conditions of a resume

@pytest.fixture
def fg_copy(tmp_path):
    tree = tmp_path / "fg"
    shutil.copytree(FAKE_FLAGGEMS_DIR, tree, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def test_resume_under_other_conditions_exits_2_naming_each_difference(tmp_path, fg_copy):
    bd = tmp_path / "b"
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("softmax:\n  shapes: [[64, 64]]\n")
    env = dict(FLAGGEMS_DIR=str(fg_copy))
    r = batch(tmp_path, "--ops", "softmax", "exp", "--devices", "0", "--batch-dir", bd, "--retries", "0",
              "--dtypes", "float16", "--shape-file", "shapes.yaml", ZL_STUB_PLAN="exp=fail", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    started = json.loads((bd / "batch.json").read_text())
    cond = started["conditions"]
    assert cond["dtypes"] == "float16" and cond["shape_file"] == str(shapes.resolve())
    assert cond["flaggems"]["main"]["path"] == str(fg_copy.resolve())
    assert cond["flaggems"]["main"]["worktree"].startswith("stat-sha256:")   # not a git checkout
    assert started["case_keys"] == ["main:softmax", "main:exp"]
    before, calls = snapshot(bd), len(trace(tmp_path))
    edited = fg_copy / "benchmark" / "test_exp.py"
    original = (edited.read_bytes(), edited.stat().st_mtime_ns)

    # four conditions changed at once: every one is named, nothing runs or is rewritten
    shapes.write_text("softmax:\n  shapes: [[128, 128]]\n")
    edited.write_bytes(original[0] + b"\n# edited\n")
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--dtypes", "bfloat16",
              USE_FLAGTUNE="1", **env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "this call measures under other conditions than the batch" in r.stderr
    assert "dtypes: batch 'float16', this call 'bfloat16'" in r.stderr
    assert "shape_file_sha256: batch" in r.stderr
    assert "environment.USE_FLAGTUNE: batch '<unset>', this call '1'" in r.stderr
    assert "flaggems.main.worktree: batch 'stat-sha256:" in r.stderr
    assert "Traceback" not in r.stderr
    assert snapshot(bd) == before and len(trace(tmp_path)) == calls

    # another FlagGems tree, and --use-flagtune (the variable the cases get) on a batch without it
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--use-flagtune",
              FLAGGEMS_DIR=str(FAKE_FLAGGEMS_DIR))
    assert r.returncode == 2
    assert f"flaggems.main.path: batch '{fg_copy.resolve()}', this call '{FAKE_FLAGGEMS_DIR.resolve()}'" in r.stderr
    assert "use_flagtune: batch False, this call True" in r.stderr
    assert "environment.USE_FLAGTUNE: batch '<unset>', this call '1'" in r.stderr
    assert snapshot(bd) == before

    # the batch's own conditions again: left-out options are the batch's (dtypes float16, the
    # shape file by its absolute path), the failed case reruns, the finished one is reused
    shapes.write_text("softmax:\n  shapes: [[64, 64]]\n")
    edited.write_bytes(original[0])
    os.utime(edited, ns=(original[1], original[1]))
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", **env)
    assert r.returncode == 0 and "1 reused, 1 to run" in r.stdout, r.stdout + r.stderr
    assert "conditions match the batch's start" in r.stdout
    assert trace(tmp_path)[-1][0] == "exp" and trace(tmp_path)[-1][3] == "float16"
    after = json.loads((bd / "batch.json").read_text())
    assert after["conditions"] == cond and after["started"] == started["started"]
    assert [c["reused"] for c in after["calls"]] == [0, 1]


def test_resume_keeps_the_dtype_fallback_policy(tmp_path):
    """--dtype-fallback is a condition: left out, the batch's; another one, exit 2 before any
    case. A batch.json without the field (every batch before the option) reads as `all`."""
    plain, first = tmp_path / "plain", tmp_path / "first"
    for bd, extra in ((plain, ()), (first, ("--dtype-fallback", "first"))):
        r = batch(tmp_path, "--ops", "abs", "exp", "--devices", "0", "--dtypes", "float16", "--retries", "0",
                  "--batch-dir", bd, *extra, ZL_STUB_PLAN="abs=dtype,exp=fail")
        assert r.returncode == 0, r.stdout + r.stderr
    assert "dtype_fallback" not in json.loads((plain / "batch.json").read_text())["conditions"]
    before, calls = {bd: snapshot(bd) for bd in (plain, first)}, len(trace(tmp_path))
    for bd, other, was in ((plain, "first", "all"), (first, "all", "first")):
        r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--dtype-fallback", other)
        assert r.returncode == 2, r.stdout + r.stderr
        assert (f"--resume: the batch was started with --dtype-fallback {was}, this call gives "
                f"--dtype-fallback {other}") in r.stderr and "Traceback" not in r.stderr
        assert snapshot(bd) == before[bd]
    assert len(trace(tmp_path)) == calls
    # its own policy, given or left out: the failed case reruns under it
    r = batch(tmp_path, "--resume", "--batch-dir", plain, "--devices", "0", "--dtype-fallback", "all",
              ZL_STUB_PLAN="abs=dtype")
    assert r.returncode == 0 and "1 reused, 1 to run" in r.stdout, r.stdout + r.stderr
    r = batch(tmp_path, "--resume", "--batch-dir", first, "--devices", "0", ZL_STUB_PLAN="abs=dtype")
    assert r.returncode == 0 and "1 reused, 1 to run" in r.stdout, r.stdout + r.stderr
    assert json.loads((first / "main/exp/run_identity.json").read_text())["dtype_fallback"] == "first"
    assert "dtype_fallback" not in json.loads((plain / "main/exp/run_identity.json").read_text())
    assert json.loads((first / "batch.json").read_text())["conditions"]["dtype_fallback"] == "first"


def _git(tree, *args):
    subprocess.run(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


def test_flaggems_identity_of_a_git_checkout_and_of_a_plain_tree(tmp_path, fg_copy):
    plain = conds.tree_identity(str(fg_copy))
    assert plain["commit"] == "" and plain["worktree"].startswith("stat-sha256:")
    # caches do not count (a run writes __pycache__ into benchmark/); any other file does
    (fg_copy / "benchmark" / "__pycache__").mkdir()
    (fg_copy / "benchmark" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"x")
    assert conds.tree_identity(str(fg_copy)) == plain
    (fg_copy / "src" / "new.py").write_text("")
    assert conds.tree_identity(str(fg_copy))["worktree"] != plain["worktree"]

    _git(fg_copy, "init", "-q")
    _git(fg_copy, "add", "-A")
    _git(fg_copy, "commit", "-q", "-m", "one")
    clean = conds.tree_identity(str(fg_copy))
    assert len(clean["commit"]) == 40 and clean["worktree"].startswith("git-sha256:")
    (fg_copy / "benchmark" / "test_exp.py").write_text("# edited, not committed\n")
    edited = conds.tree_identity(str(fg_copy))
    assert edited["commit"] == clean["commit"] and edited["worktree"] != clean["worktree"]
    (fg_copy / "untracked.py").write_text("")
    assert conds.tree_identity(str(fg_copy))["worktree"] not in (clean["worktree"], edited["worktree"])
    _git(fg_copy, "add", "-A")
    _git(fg_copy, "commit", "-q", "-m", "two")
    moved = conds.tree_identity(str(fg_copy))
    assert moved["commit"] != clean["commit"] and moved["worktree"] == clean["worktree"]   # clean again
    assert conds.differences({"flaggems": {"main": clean}}, {"flaggems": {"main": moved}}) == [
        f"flaggems.main.commit: batch {clean['commit']!r}, this call {moved['commit']!r}"]


def test_run_byproducts_leave_the_tree_identity_alone_and_a_new_file_is_named(tmp_path, fg_copy):
    """What FlagGems' own benchmark runs write into the tree (conds.RUN_BYPRODUCTS: upstream's
    blas benchmark records a failing shape in FlagTune/ under the cwd) is not another tree; a
    new source file is, and the refusal names it."""
    def byproducts(root):
        (root / "FlagTune").mkdir(exist_ok=True)
        (root / "FlagTune" / "error_shape.yaml").write_text("mm:\n  shapes: [[1, 2, 3]]\n")
        (root / "FlagTune" / ".error_output.lock").write_text("")

    plain = conds.tree_identity(str(fg_copy))          # outside git: the stat digest skips them too
    byproducts(fg_copy)
    assert conds.tree_identity(str(fg_copy)) == plain
    shutil.rmtree(fg_copy / "FlagTune")
    _git(fg_copy, "init", "-q")
    _git(fg_copy, "add", "-A")
    _git(fg_copy, "commit", "-q", "-m", "one")
    clean = conds.tree_identity(str(fg_copy))
    assert (clean["changed"], clean["changed_total"]) == ([], 0)

    def raw(*args):
        return subprocess.run(["git", "-C", str(fg_copy), *args], capture_output=True, check=True).stdout

    def before_the_fix():   # the digest as every earlier batch.json recorded it
        return "git-sha256:" + hashlib.sha256(raw("status", "--porcelain=v1", "-z", "--untracked-files=all")
                                              + b"\0\0" + raw("diff", "HEAD", "--binary")).hexdigest()

    # a tree without byproducts hashes as before: earlier records of it still match
    assert clean["worktree"] == before_the_fix()
    byproducts(fg_copy)
    assert raw("status", "--porcelain", "--untracked-files=all").decode().splitlines() == [
        "?? FlagTune/.error_output.lock", "?? FlagTune/error_shape.yaml"]   # as the H100 baseline left it
    assert before_the_fix() != clean["worktree"]                          # what refused the baseline
    assert conds.tree_identity(str(fg_copy)) == clean
    # only the tree's top holds them: the same names elsewhere are files like any other
    (fg_copy / "benchmark" / "FlagTune").mkdir()
    (fg_copy / "benchmark" / "FlagTune" / "error_shape.yaml").write_text("")
    elsewhere = conds.tree_identity(str(fg_copy))
    assert elsewhere["worktree"] != clean["worktree"] and elsewhere["changed"] == ["benchmark/FlagTune/error_shape.yaml"]
    shutil.rmtree(fg_copy / "benchmark" / "FlagTune")

    # a new source file and an edit: another tree, each path named in the difference
    (fg_copy / "src" / "new_op.py").write_text("")
    (fg_copy / "benchmark" / "test_exp.py").write_text("# edited\n")
    dirty = conds.tree_identity(str(fg_copy))
    assert dirty["worktree"] != clean["worktree"]
    assert (dirty["changed"], dirty["changed_total"]) == (["benchmark/test_exp.py", "src/new_op.py"], 2)
    [line] = conds.differences({"flaggems": {"main": clean}}, {"flaggems": {"main": dirty}})
    assert line == (f"flaggems.main.worktree: batch {clean['worktree']!r}, this call {dirty['worktree']!r} "
                    "(only in this call: benchmark/test_exp.py, src/new_op.py)")
    [line] = conds.differences({"flaggems": {"main": dirty}}, {"flaggems": {"main": clean}}, "baseline")
    assert line.endswith("(only in baseline: benchmark/test_exp.py, src/new_op.py)")

    # a record from before the list compares by its digest alone, and says it has no list
    old = {k: v for k, v in clean.items() if k not in conds.EXPLAINING}
    assert conds.differences({"flaggems": {"main": old}}, {"flaggems": {"main": clean}}) == []
    [line] = conds.differences({"flaggems": {"main": old}}, {"flaggems": {"main": dirty}})
    assert line.endswith("(batch's record predates the list of changed paths; this call changes "
                         "benchmark/test_exp.py, src/new_op.py)")
    # the list never decides: equal digests with other lists are the same tree
    assert conds.differences({"flaggems": {"main": dict(clean, changed=["x"], changed_total=1)}},
                             {"flaggems": {"main": clean}}) == []


def test_the_changed_paths_are_capped_and_a_capped_list_claims_nothing_beyond_its_end():
    a = {"changed": [f"f{i:02d}" for i in range(conds.CHANGED_CAP)], "changed_total": 70}
    b = {"changed": ["f00", "f01", "zz"], "changed_total": 3}
    note = conds.changed_note(a, b, "batch", "this call")
    # zz may be among a's 20 unlisted paths; f02..f49 are surely a's alone
    assert "zz" not in note and note.startswith("only in batch: f02, f03,")
    assert "and 38 more" in note and "lists capped at 50: batch changes 70 path(s), this call 3" in note
    same = conds.changed_note(b, b, "batch", "this call")
    assert same == "both change f00, f01, zz, in other content"
    assert conds.changed_note({}, {}, "batch", "this call") == ""
    assert conds.porcelain_paths(b"R  new.py\0old.py\0?? x y.py\0 M a.py\0") == ["a.py", "new.py", "old.py", "x y.py"]


def test_a_resume_is_not_refused_for_what_its_own_cases_wrote_into_the_flaggems_tree(tmp_path, fg_copy):
    _git(fg_copy, "init", "-q")
    _git(fg_copy, "add", "-A")
    _git(fg_copy, "commit", "-q", "-m", "one")
    bd = tmp_path / "b"
    env = dict(FLAGGEMS_DIR=str(fg_copy), ZL_STUB_PLAN="softmax=errshape,exp=fail")
    r = batch(tmp_path, "--ops", "softmax", "exp", "--devices", "0", "--batch-dir", bd, "--retries", "0", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (fg_copy / "FlagTune" / "error_shape.yaml").read_text().startswith("softmax:")   # the case wrote it
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", **env)
    assert r.returncode == 0 and "1 reused, 1 to run" in r.stdout, r.stdout + r.stderr
    assert "conditions match the batch's start" in r.stdout
    # a new source file is another tree: refused, naming it (and nothing the runs wrote)
    (fg_copy / "src" / "new_op.py").write_text("")
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", **env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "flaggems.main.worktree: batch 'git-sha256:" in r.stderr
    assert "(only in this call: src/new_op.py)" in r.stderr and "FlagTune" not in r.stderr


def test_toolchain_identity_names_triton_by_its_files_without_importing_it(tmp_path):
    """A triton rebuilt under the same version string (a FlagTree build) changes `files`; the
    probe finds the package where the cases' interpreter would import it from."""
    site = tmp_path / "site"
    pkg = site / "triton"
    pkg.mkdir(parents=True)
    # importing this package would fail: the probe must only locate it
    (pkg / "__init__.py").write_text("raise ImportError('imported')\n")
    env = dict(os.environ, PYTHONPATH=str(site))
    first = conds.toolchain_identity(sys.executable, env)
    assert first["triton"]["path"] == str(pkg) and first["triton"]["files"].startswith("stat-sha256:")
    assert first["python"] == sys.version.split()[0] and "version" in first["torch"]
    assert conds.toolchain_identity(sys.executable, env) == first
    (pkg / "libtriton.so").write_bytes(b"rebuilt")
    second = conds.toolchain_identity(sys.executable, env)
    assert second["triton"]["files"] != first["triton"]["files"]
    assert conds.toolchain_identity(str(tmp_path / "no-python"), env) == {
        "probe_error": f"{tmp_path / 'no-python'} could not report its triton and torch"}


def test_resume_refuses_another_triton_build(tmp_path):
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--batch-dir", bd)
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads((bd / "batch.json").read_text())
    tool = record["conditions"]["toolchain"]
    assert tool["triton"]["files"].startswith("stat-sha256:") and tool["triton"]["version"]
    # the batch started under another build of the same triton version
    tool["triton"]["files"] = "stat-sha256:" + "0" * 64
    (bd / "batch.json").write_text(json.dumps(record))
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0")
    assert r.returncode == 2 and f"toolchain.triton.files: batch 'stat-sha256:{'0' * 64}'" in r.stderr
    assert "predates" not in r.stderr
    # a batch started before the toolchain was recorded: refused, and told why
    del record["conditions"]["toolchain"]
    (bd / "batch.json").write_text(json.dumps(record))
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0")
    assert r.returncode == 2 and "toolchain.triton.files: batch '<unset>'" in r.stderr
    assert "the record predates the toolchain section" in r.stderr


def test_resume_refuses_a_batch_whose_ir_was_collected_under_other_rules(tmp_path):
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--batch-dir", bd)
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads((bd / "batch.json").read_text())
    assert record["conditions"]["ir_collection"] == 2
    del record["conditions"]["ir_collection"]   # started before the rules were recorded (rules 1)
    (bd / "batch.json").write_text(json.dumps(record))
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0")
    assert r.returncode == 2 and "ir_collection: batch '<unset>', this call 2" in r.stderr
    assert "the record predates the ir_collection section" in r.stderr and "Traceback" not in r.stderr


def test_resume_refuses_another_compiler_setting_and_judging_a_timed_batch(tmp_path):
    """A compiler knob the cases inherit changes what they compile; a --judge resume of a
    timed batch would put untimed cases beside timed ones. A location the case gets its own
    of (TRITON_CACHE_DIR) is no condition."""
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--batch-dir", bd,
              TRITON_DEBUG="1", TRITON_CACHE_DIR=str(tmp_path / "c1"))
    assert r.returncode == 0, r.stdout + r.stderr
    env = json.loads((bd / "batch.json").read_text())["conditions"]["compiler_env"]
    assert env["TRITON_DEBUG"] == "1" and "TRITON_CACHE_DIR" not in env
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", TRITON_CACHE_DIR=str(tmp_path / "c2"))
    assert r.returncode == 2 and "compiler_env.TRITON_DEBUG: batch '1', this call '<unset>'" in r.stderr
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", TRITON_DEBUG="1",
              TRITON_CACHE_DIR=str(tmp_path / "c2"))
    assert r.returncode == 0, r.stdout + r.stderr
    r = batch(tmp_path, "--resume", "--judge", "--batch-dir", bd, "--devices", "0", TRITON_DEBUG="1")
    assert r.returncode == 2 and "environment.ZL_JUDGE_ONLY: batch '<unset>', this call '1'" in r.stderr


H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


def fake_smi(tmp_path, model, rc=0):
    """PATH with an nvidia-smi first that names every device `model` (rc != 0: fails as on a host
    without a GPU: "No devices were found"); each call's arguments go to <its dir>/calls."""
    bindir = tmp_path / f"smi_{model.replace(' ', '_') or 'none'}_{rc}"
    bindir.mkdir(exist_ok=True)
    smi = bindir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$*" >> "{bindir}/calls"\n'
                   'case "$*" in *--query-gpu=name*) ;; *) exit 9 ;; esac\n'
                   + (f"echo 'No devices were found'\nexit {rc}\n" if rc else f"echo '{model}'\n"))
    smi.chmod(0o755)
    return f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"


def test_resume_refuses_another_gpu_model_naming_both(tmp_path):
    bd = tmp_path / "b"
    on_h100 = fake_smi(tmp_path, H100)
    r = batch(tmp_path, "--ops", "softmax", "exp", "--devices", "0,1", "--batch-dir", bd, "--retries", "0",
              ZL_STUB_PLAN="exp=fail", PATH=on_h100)
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads((bd / "batch.json").read_text())
    assert record["conditions"]["device"] == {"models": [H100]}
    asked = (tmp_path / f"smi_{H100.replace(' ', '_')}_0" / "calls").read_text().splitlines()
    assert asked == ["--query-gpu=name --format=csv,noheader -i 0", "--query-gpu=name --format=csv,noheader -i 1"]
    before, calls = snapshot(bd), len(trace(tmp_path))

    # the same batch resumed on an H200: refused before any case, both models named
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0,1", PATH=fake_smi(tmp_path, H200))
    assert r.returncode == 2, r.stdout + r.stderr
    assert (f"--resume: the batch was started on {H100} (batch.json conditions.device), this call's devices "
            f"are {H200} (devices 0,1, nvidia-smi); nothing was run") in r.stderr
    assert "Traceback" not in r.stderr and snapshot(bd) == before and len(trace(tmp_path)) == calls
    # devices that no query names (no GPU, the tool broken): nothing shows they are H100s
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", PATH=fake_smi(tmp_path, "", rc=6))
    assert r.returncode == 2 and f"started on {H100}" in r.stderr
    assert "this call's devices are no GPU model (no device query named one) (devices 0, nvidia-smi)" in r.stderr
    assert snapshot(bd) == before

    # its own model (on other device ids): resumed, the failed case reruns, the record kept
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "2", PATH=on_h100)
    assert r.returncode == 0 and "1 reused, 1 to run" in r.stdout, r.stdout + r.stderr
    after = json.loads((bd / "batch.json").read_text())
    assert after["conditions"] == record["conditions"] and len(after["calls"]) == 2

    # a batch.json from before the device section: refused, and told why
    del after["conditions"]["device"]
    (bd / "batch.json").write_text(json.dumps(after))
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", PATH=on_h100)
    assert r.returncode == 2 and "batch.json records no GPU model (the record predates the device section)" in r.stderr
    assert f"this call's {H100} (devices 0, nvidia-smi)" in r.stderr


def test_a_batch_without_a_gpu_records_none_and_resumes_only_without_one(tmp_path):
    bd = tmp_path / "b"
    no_gpu = fake_smi(tmp_path, "", rc=6)
    r = batch(tmp_path, "--ops", "softmax", "exp", "--devices", "0", "--batch-dir", bd, "--retries", "0",
              ZL_STUB_PLAN="exp=fail", PATH=no_gpu)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((bd / "batch.json").read_text())["conditions"]["device"] == {"models": None}
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", PATH=fake_smi(tmp_path, H100))
    assert r.returncode == 2 and ("the batch was started on no GPU model (no device query named one) "
                                  f"(batch.json conditions.device), this call's devices are {H100}") in r.stderr
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", PATH=no_gpu)
    assert r.returncode == 0 and "1 reused, 1 to run" in r.stdout, r.stdout + r.stderr


def test_device_section_and_its_check():
    assert conds.device_section([H100, " ", H100, H200]) == {"models": [H100, H200]}
    assert conds.device_section(None) == conds.device_section([]) == {"models": None}
    stored = {"device": conds.device_section([H100])}
    conds.check_device(stored, conds.device_section([H100, H100]), "here")
    for other in ([H200], [H100, H200], None):
        with pytest.raises(conds.DeviceModelError, match="started on NVIDIA H100 80GB HBM3"):
            conds.check_device(stored, conds.device_section(other), "here")
    with pytest.raises(conds.DeviceModelError, match=f"are {H100} \\+ {H200} \\(here\\)"):
        conds.check_device(stored, conds.device_section([H200, H100]), "here")
    # an older record: only an --executor ray call's recorded device stands for the section
    with pytest.raises(conds.DeviceModelError, match="predates the device section"):
        conds.check_device({}, conds.device_section([H100]), "here")
    conds.check_device({}, conds.device_section([H100]), "here", older_ray=H100)
    with pytest.raises(conds.DeviceModelError, match=f"started on {H200}"):
        conds.check_device({}, conds.device_section([H100]), "here", older_ray=H200)
    assert "predates the device section:" in conds.older_record_note({"toolchain": {}, "ir_collection": 2,
                                                                      "compiler_env": {}})
    assert "predates the device, ir_collection, compiler_env sections:" in conds.older_record_note({"toolchain": {}})


def test_resume_refuses_a_batch_without_recorded_conditions_and_another_selection(tmp_path):
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "softmax", "relu", "--devices", "0", "--batch-dir", bd)
    assert r.returncode == 0, r.stdout + r.stderr
    before = snapshot(bd)
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--ops", "softmax", "abs")
    assert r.returncode == 2 and "--resume: the selection differs from the batch's cases" in r.stderr
    assert "not in the batch: main:abs" in r.stderr and "the batch's cases left out: main:relu" in r.stderr
    assert snapshot(bd) == before
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--ops", "relu", "softmax")
    assert r.returncode == 0 and "2 reused, 0 to run" in r.stdout, r.stdout + r.stderr   # same cases
    before = snapshot(bd)
    # a batch.json from before conditions were recorded proves nothing about its cases
    record = json.loads((bd / "batch.json").read_text())
    del record["conditions"]
    (bd / "batch.json").write_text(json.dumps(record))
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0")
    assert r.returncode == 2 and "records no measurement conditions" in r.stderr
    assert "start a new --batch-dir" in r.stderr and "Traceback" not in r.stderr
    (bd / "batch.json").unlink()
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0")
    assert r.returncode == 2 and "holds no batch (no batch.json)" in r.stderr
    assert {k: v for k, v in before.items() if k != "batch.json"} == snapshot(bd)


def test_a_missing_shape_file_or_a_contradicted_use_flagtune_exits_2_before_any_case(tmp_path):
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--shape-file", "nope.yaml")
    assert r.returncode == 2 and "--shape-file nope.yaml: cannot read" in r.stderr
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--use-flagtune", USE_FLAGTUNE="0")
    assert r.returncode == 2 and "--use-flagtune contradicts USE_FLAGTUNE='0'" in r.stderr
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--use-flagtune", USE_FLAGTUNE="maybe")
    assert r.returncode == 2 and "USE_FLAGTUNE='maybe' is not an on/off value" in r.stderr
    assert trace(tmp_path) == [] and not (tmp_path / "runs").exists()


def test_use_flagtune_reaches_every_case_and_a_resume_keeps_it(tmp_path):
    script = tmp_path / "seen.sh"
    script.write_text('#!/bin/bash\nmkdir -p "$OUT_DIR"\necho "${USE_FLAGTUNE-unset}" >> "$ZL_SEEN"\n'
                      'echo "collected 0 items" > "$OUT_DIR/run.log"\nexit 1\n')
    seen = tmp_path / "seen"
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "abs", "relu", "--devices", "0", "--retries", "0", "--batch-dir", bd,
              "--use-flagtune", ZL_RUN_PYTEST=str(script), ZL_SEEN=str(seen))
    assert r.returncode == 0, r.stdout + r.stderr
    assert seen.read_text().split() == ["1", "1"]
    assert json.loads((bd / "batch.json").read_text())["conditions"]["environment"]["USE_FLAGTUNE"] == "1"
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--retries", "0",
              ZL_RUN_PYTEST=str(script), ZL_SEEN=str(seen))
    assert r.returncode == 0 and "0 reused, 2 to run" in r.stdout, r.stdout + r.stderr
    assert seen.read_text().split() == ["1"] * 4


# ---------------------------------------------------------------- one batch per directory

def test_a_used_batch_dir_needs_resume(tmp_path):
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--batch-dir", bd)
    assert r.returncode == 0, r.stdout + r.stderr
    before = snapshot(bd)
    r = batch(tmp_path, "--ops", "relu", "--devices", "0", "--batch-dir", bd)
    assert r.returncode == 2 and f"--batch-dir {bd.resolve()} already holds a batch (batch.json, ops_status.csv)" in r.stderr
    assert "continue it with --resume, or give a new directory" in r.stderr
    assert snapshot(bd) == before and [t[0] for t in trace(tmp_path)] == ["softmax"]
    # a directory that exists but holds no batch is fine (and --list writes nothing anywhere)
    empty = tmp_path / "empty"
    (empty / "notes").mkdir(parents=True)
    assert batch(tmp_path, "--ops", "relu", "--devices", "0", "--batch-dir", bd, "--list").returncode == 0
    r = batch(tmp_path, "--ops", "relu", "--devices", "0", "--batch-dir", empty)
    assert r.returncode == 0 and status(empty)["relu"]["status"] == "PASS", r.stdout + r.stderr


def test_a_second_live_batch_is_refused_and_a_killed_one_leaves_no_lock(tmp_path):
    bd = tmp_path / "b"
    home = tmp_path / "home"
    home.mkdir()
    env = dict(ZL_RUN_PYTEST=str(STUB), ZL_STUB_STATE=str(tmp_path), ZL_STUB_TRACE=str(tmp_path / "trace"))
    first = subprocess.Popen([sys.executable, str(REPO_ROOT / "run_batch.py"), "--ops", "relu", "abs",
                              "--devices", "0", "--batch-dir", str(bd), "--kill-grace", "0.5"],
                             env=base_env(home, ZL_STUB_PLAN="relu=hang", **env),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pidfile = tmp_path / "relu.pids"
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pidfile.exists(), "the first batch never started its case"
        hung = [int(p) for p in pidfile.read_text().split()]
        before = snapshot(bd)
        for extra in ((), ("--resume",)):     # a second batch, fresh or resuming, while the first lives
            r = batch(tmp_path, "--ops", "relu", "abs", "--devices", "0", "--batch-dir", bd, *extra)
            assert r.returncode == 2, r.stdout + r.stderr
            assert f"is in use by another run_batch.py (pid {first.pid})" in r.stderr
            assert snapshot(bd) == before
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    deadline = time.monotonic() + 30     # the reaper: TERM, 0.5 s grace, KILL
    while any(pid_alive(p) for p in hung) and time.monotonic() < deadline:
        time.sleep(0.05)
    # no stale lock: the kernel dropped it with its holder, the resume needs no cleanup step
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0")
    assert r.returncode == 0 and "0 reused, 2 to run" in r.stdout, r.stdout + r.stderr
    assert {k: v["status"] for k, v in status(bd).items()} == {"relu": "PASS", "abs": "PASS"}


# ---------------------------------------------------------------- what a screen's resume reuses

def test_switch_resume_reuses_only_pairs_finished_on_both_sides_with_their_verdict(tmp_path):
    """Each damaged case must rerun, both sides: relu's side B did not finish (its A did: a
    half-finished pair), abs lost its screen.tsv row, exp's side A is PASS without .complete."""
    bd = tmp_path / "b"
    ops = ("softmax", "relu", "abs", "exp", "mm")
    env = dict(ZL_STUB_SWITCH="ZL_TEST_SWITCH")
    r = batch(tmp_path, "--ops", *ops, "--switch", "ZL_TEST_SWITCH", "--devices", "0", "--batch-dir", bd, **env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert all((bd / side / "main" / op / ".complete").is_file() for side in ("before", "after") for op in ops)

    after = status(bd / "after")
    after["relu"].update(status="INTERRUPTED", notes="interrupted")
    write_csv(bd / "after" / "ops_status.csv", after.values())
    (bd / "after" / "main" / "relu" / ".complete").unlink()
    with open(bd / "screen.tsv", newline="") as fh:
        screen = [row for row in csv.DictReader(fh, delimiter="\t")]
    write_csv(bd / "screen.tsv", [row for row in screen if row["run_name"] != "abs"], delimiter="\t")
    (bd / "before" / "main" / "exp" / ".complete").unlink()
    assert status(bd / "before")["exp"]["status"] == "PASS"
    calls = len(trace(tmp_path))

    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", **env)
    assert r.returncode == 0 and "2 reused, 3 to run" in r.stdout, r.stdout + r.stderr
    rerun = trace(tmp_path)[calls:]
    assert sorted(t[0] for t in rerun) == ["abs", "abs", "exp", "exp", "relu", "relu"]
    assert {t[5] for t in rerun if t[0] == "relu"} == {"replay=-", f"replay={bd.resolve()}/before/main/relu"}
    with open(bd / "screen.tsv", newline="") as fh:
        verdicts = {row["run_name"]: row["verdict"] for row in csv.DictReader(fh, delimiter="\t")}
    assert verdicts == {op: "IR_CHANGED@ttgir" for op in ops}
    for side in ("before", "after"):
        assert all(v["status"] == "PASS" for v in status(bd / side).values()), side
        assert all((bd / side / "main" / op / ".complete").is_file() for op in ops), side


def test_help_shows_the_whole_description():
    from zl.batch import options
    r = subprocess.run([sys.executable, str(REPO_ROOT / "run_batch.py"), "--help"], capture_output=True,
                       text=True, env=base_env(Path("/nonexistent-home")))
    assert r.returncode == 0
    shown = " ".join(r.stdout.split())
    for line in options.__doc__.splitlines():
        assert " ".join(line.split()) in shown, line


def test_resume_refuses_another_switch_replay_root_or_backend(tmp_path):
    bd = tmp_path / "b"
    src = tmp_path / "src"
    (src / "main" / "softmax").mkdir(parents=True)
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--batch-dir", bd, "--replay-root", src)
    assert r.returncode == 0, r.stdout + r.stderr
    before = snapshot(bd)
    other = tmp_path / "other"
    other.mkdir()
    for extra, needle in (
            (("--replay-root", other), f"replay_root: batch '{src.resolve()}', this call '{other.resolve()}'"),
            (("--backend", "musa"), "backend: batch 'cuda', this call 'musa'")):
        r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", *extra)
        assert r.returncode == 2 and needle in r.stderr, r.stdout + r.stderr
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--switch", "ZL_TEST_SWITCH")
    assert r.returncode == 2 and "--switch replays its own side A; it cannot take --replay-root" in r.stderr
    plain = tmp_path / "plain"
    assert batch(tmp_path, "--ops", "softmax", "--devices", "0", "--batch-dir", plain).returncode == 0
    r = batch(tmp_path, "--resume", "--batch-dir", plain, "--devices", "0", "--switch", "ZL_TEST_SWITCH")
    assert r.returncode == 2 and "switch: batch '', this call 'ZL_TEST_SWITCH'" in r.stderr
    assert snapshot(bd) == before


# ---------------------------------------------------------------- side C: --retune

RETUNE_ENV = dict(ZL_STUB_SWITCH="ZL_TEST_SWITCH", ZL_STUB_PICKS="relu=other,abs=fail,exp=pruned",
                  ZL_STUB_IR_MAP="softmax=same", ZL_STUB_C_SCALE="0.8")


def test_retune_runs_side_c_after_b_where_a_passed_and_the_screen_reports_its_picks(tmp_path, capsys):
    import batch_summary as bs
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "softmax", "relu", "abs", "exp", "amax", "--switch", "ZL_TEST_SWITCH",
              "--retune", "--devices", "0,1", "--batch-dir", bd, "--retries", "0",
              ZL_STUB_PLAN="amax=fail", **RETUNE_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "retuned=1 (tuned live)" in r.stdout and "PASS/PASS/PASS" in r.stdout
    assert json.loads((bd / "batch.json").read_text())["conditions"]["retune"] is True
    for op in ("softmax", "relu", "abs", "exp"):
        calls = [t for t in trace(tmp_path) if t[0] == op]
        # A records, B replays A, then C with no replay: in that order, on one device
        assert [t[5] for t in calls] == ["replay=-", f"replay={bd.resolve()}/before/main/{op}", "replay=-"], op
        assert len({t[1] for t in calls}) == 1
        assert (bd / "retuned" / "main" / op / ".complete").is_file()
    assert [t[0] for t in trace(tmp_path)].count("amax") == 1
    for side in ("after", "retuned"):
        row = status(bd / side)["amax"]
        assert (row["status"], row["notes"]) == ("NOT_RUN", "side before ended FAIL"), side
    # C ran with the switch on, tuning live: relu's C recorded its own pick of key 128,128
    rec = json.loads((bd / "retuned" / "main" / "relu" / "autotune_records" / "relu.json").read_text())
    assert rec["stub.relu_kernel"]["128,128"]["kwargs"] == {"BLOCK": 256}
    js = tmp_path / "screen.json"
    assert bs.main(["--screen", str(bd), "--json", str(js)]) == 0
    d = json.loads(js.read_text())
    by = {o["op"]: o["retune"] for o in d["ops"]}
    assert d["retune"]["nodes"] == ["softmax", "relu", "abs", "exp"]
    assert d["retune"]["side_c_not_run"] == {"amax": "NOT_RUN"}
    assert by["softmax"]["picks"]["counts"]["same"] == 2 and by["relu"]["picks"]["counts"]["other"] == 1
    assert by["relu"]["a_vs_c"]["median_pct"] == pytest.approx(25.0) and by["relu"]["a_vs_b"]["median_pct"] == 0
    assert by["abs"]["picks"]["under_switch"]["failed"] == 1 and by["exp"]["picks"]["under_switch"]["pruned"] == 1
    assert not any(b["picks"]["problems"] for b in by.values() if "picks" in b)


def test_retune_kept_across_resume_refused_when_added_or_dropped_and_reused_only_with_side_c(tmp_path):
    bd = tmp_path / "b"
    ops = ("softmax", "relu", "abs")
    r = batch(tmp_path, "--ops", *ops, "--switch", "ZL_TEST_SWITCH", "--retune", "--devices", "0",
              "--batch-dir", bd, **RETUNE_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    retuned = status(bd / "retuned")
    retuned["relu"].update(status="INTERRUPTED", notes="interrupted")
    write_csv(bd / "retuned" / "ops_status.csv", retuned.values())
    (bd / "retuned" / "main" / "relu" / ".complete").unlink()
    before, calls = snapshot(bd), len(trace(tmp_path))
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--no-retune", **RETUNE_ENV)
    assert r.returncode == 2 and "the batch was started with --retune, this call drops it" in r.stderr
    assert snapshot(bd) == before and len(trace(tmp_path)) == calls
    # left out, --retune is the batch's; a case is reused only when side C is complete too
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", **RETUNE_ENV)
    assert r.returncode == 0 and "2 reused, 1 to run" in r.stdout, r.stdout + r.stderr
    assert [t[0] for t in trace(tmp_path)[calls:]] == ["relu"] * 3
    assert all(v["status"] == "PASS" for v in status(bd / "retuned").values())
    plain = tmp_path / "plain"
    assert batch(tmp_path, "--ops", "softmax", "--switch", "ZL_TEST_SWITCH", "--devices", "0",
                 "--batch-dir", plain, **RETUNE_ENV).returncode == 0
    before, calls = snapshot(plain), len(trace(tmp_path))
    r = batch(tmp_path, "--resume", "--batch-dir", plain, "--devices", "0", "--retune", **RETUNE_ENV)
    assert r.returncode == 2 and "the batch was started without --retune, this call adds it" in r.stderr
    assert snapshot(plain) == before and len(trace(tmp_path)) == calls and not (plain / "retuned").exists()


@pytest.mark.parametrize("args, env, needle", [
    (("--retune",), {}, "--retune adds side C to a --switch screen"),
    (("--switch", "ZL_TEST_SWITCH", "--retune"), {"ZL_ISOLATE_TUNER_CACHE": "0"},
     "--retune with ZL_ISOLATE_TUNER_CACHE off: side C would read side A's winners"),
])
def test_retune_without_a_switch_or_with_a_shared_tuner_store_exits_2_before_any_case(tmp_path, args, env, needle):
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", *args, **env)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert trace(tmp_path) == [] and not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- rounds: --rounds R

ROUNDS_ENV = dict(ZL_STUB_SWITCH="ZL_TEST_SWITCH", ZL_STUB_PICKS="relu=same", ZL_STUB_BINARY="1",
                  ZL_STUB_IR_MAP="relu=same,abs=same", ZL_STUB_B_SCALE="softmax=0.8", ZL_STUB_JITTER="0.01")


def rounds_env(tmp_path):
    return dict(ROUNDS_ENV, ZL_STUB_SIDES=str(tmp_path / "sides"))


def sides_run(tmp_path, op):
    """(side directory, switch value, replay source) of each run of `op`, in the order it ran
    (the stub's ZL_STUB_SIDES lines)."""
    path = tmp_path / "sides"
    lines = [ln.split() for ln in path.read_text().splitlines()] if path.exists() else []
    return [tuple(t[1:]) for t in lines if t[0] == op]


def test_screen_sides_of_rounds_alternate_like_ab_repeat_and_replay_side_before():
    from zl.batch.screen import cell_of, replays_before, round_sides, screen_sides
    assert round_sides(1) == [] and round_sides(4) == ["r2_B", "r2_A", "r3_A", "r3_B", "r4_B", "r4_A"]
    assert screen_sides("X", retune=True, rounds=3) == [
        ("before", {"X": "0"}), ("after", {"X": "1"}), ("retuned", {"X": "1"}), ("r2_B", {"X": "1"}),
        ("r2_A", {"X": "0"}), ("r3_A", {"X": "0"}), ("r3_B", {"X": "1"})]
    assert screen_sides("X") == [("before", {"X": "0"}), ("after", {"X": "1"})] and screen_sides("", rounds=3) == [("", {})]
    assert [cell_of(s) for s in ("before", "after", "r2_B", "r12_A", "retuned", "r1_A", "r0_B", "r2_C")] == [
        (1, "A"), (1, "B"), (2, "B"), (12, "A"), None, None, None, None]
    assert [s for s in ("before", "after", "retuned", "r2_A", "r2_B", "") if replays_before(s)] == ["after", "r2_A", "r2_B"]


def test_round_sides_run_only_after_both_sides_of_round_one_passed():
    """run_sides with stand-in runners: side C still runs after a failed side B (its pair is
    with A), the rounds do not; an interrupted round ends the case there."""
    from zl.batch.execute import run_sides
    from zl.batch.inventory import Entry
    from zl.batch.status import blank_row
    case = Entry("main", "relu", "relu", "test_relu.py", "relu", "1", "0", "", "")

    class Runner:
        def __init__(self, name, outcome, ran):
            self.name, self.outcome, self.ran = name, outcome, ran

        def run(self, c, device, dtypes=None):
            self.ran.append(self.name)
            return blank_row(c.repo, c.op, c.op_file, c.run_name, "cuda", device, "x", status=self.outcome), None

    def run(outcomes):
        ran = []
        runners = {n: Runner(n, o, ran) for n, o in outcomes.items()}
        rows, _ = run_sides(runners, list(outcomes), case, "0", "", "cuda", lambda n: Path("/nowhere") / n)
        return ran, {n: (r["status"], r["notes"]) for n, r in rows.items()}

    ran, rows = run(dict(before="PASS", after="FAIL", retuned="PASS", r2_B="PASS", r2_A="PASS"))
    assert ran == ["before", "after", "retuned"]
    assert rows["r2_B"] == rows["r2_A"] == ("NOT_RUN", "side after ended FAIL")
    ran, rows = run(dict(before="FAIL", after="PASS", r2_B="PASS", r2_A="PASS"))
    assert ran == ["before"] and rows["r2_A"] == ("NOT_RUN", "side before ended FAIL")
    ran, rows = run(dict(before="PASS", after="PASS", r2_B="INTERRUPTED", r2_A="PASS", r3_A="PASS"))
    assert ran == ["before", "after", "r2_B"] and "r2_A" not in rows


def test_progress_line_keeps_round_one_and_counts_the_round_sides():
    from zl.batch.execute import sides_shown
    names = ["before", "after", "retuned"] + [f"r{k}_{s}" for k in range(2, 7) for s in "BA"]
    rows = {n: {"status": "PASS"} for n in names}
    assert sides_shown(names, rows) == "PASS/PASS/PASS +10 round sides PASS"
    rows["r4_B"] = {"status": "FAIL"}
    assert sides_shown(names, rows) == "PASS/PASS/PASS +10 round sides: 9 PASS 1 FAIL"
    # an interrupted round side ends the case: the sides after it have no row yet (PENDING)
    rows = {n: {"status": "PASS"} for n in names[:4]}
    rows.update(r2_A={"status": "INTERRUPTED"}, retuned={"status": "FAIL"})
    assert sides_shown(names, rows) == "PASS/PASS/FAIL +10 round sides: 8 PENDING 1 PASS 1 INTERRUPTED"
    # without rounds, as before: every side's status joined by '/'
    assert sides_shown(["before", "after"], {"before": {"status": "PASS"}, "after": {"status": "NOT_RUN"}}) == "PASS/NOT_RUN"


def test_rounds_run_in_alternating_order_replaying_side_before_and_the_screen_reports_each_node(tmp_path, capsys):
    import batch_summary as bs
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "softmax", "relu", "abs", "amax", "--switch", "ZL_TEST_SWITCH", "--rounds", "4",
              "--retune", "--devices", "0", "--batch-dir", bd, "--retries", "0", ZL_STUB_PLAN="amax=fail",
              **rounds_env(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rounds 2..4: r2_B r2_A r3_A r3_B r4_B r4_A (replay before)" in r.stdout
    # the progress line: round 1's sides and side C one by one, rounds 2..4 counted
    lines = {w: ln for ln in r.stdout.splitlines() if ln.startswith("[batch] (")
             for w in ln.split() if w.startswith("main:")}
    assert "PASS/PASS/PASS +6 round sides PASS " in lines["main:softmax"]
    assert "FAIL/NOT_RUN/NOT_RUN +6 round sides NOT_RUN " in lines["main:amax"]
    assert json.loads((bd / "batch.json").read_text())["conditions"]["rounds"] == 4
    rec = f"{bd.resolve()}/before/main/softmax"
    # ab_repeat.sh's order and caliber: round 1, side C, then even rounds B A, odd rounds A B,
    # every side but before replaying before's record; side C tunes live
    assert sides_run(tmp_path, "softmax") == [
        ("before", "0", "-"), ("after", "1", rec), ("retuned", "1", "-"), ("r2_B", "1", rec), ("r2_A", "0", rec),
        ("r3_A", "0", rec), ("r3_B", "1", rec), ("r4_B", "1", rec), ("r4_A", "0", rec)]
    assert len({t[1] for t in trace(tmp_path) if t[0] == "softmax"}) == 1
    for side in ("r2_B", "r4_A"):   # an ordinary side: its own table, its own case directories
        assert status(bd / side)["softmax"]["status"] == "PASS" and (bd / side / "main/softmax/.complete").is_file()
        assert status(bd / side)["amax"]["notes"] == "side before ended FAIL"
    js = tmp_path / "screen.json"
    html = tmp_path / "screen.html"
    assert bs.main(["--screen", str(bd), "--json", str(js), "--html", str(html), "--false-alarm", "0.5"]) == 0
    d = json.loads(js.read_text())
    block, by = d["rounds"], {o["op"]: o.get("rounds") for o in d["ops"]}
    assert block["nodes"] == ["softmax", "relu", "abs"] and list(block["not_analysed"]) == ["amax"]
    soft = by["softmax"]
    assert soft["cells_used"] == ["r1_A", "r1_B", "r2_A", "r2_B", "r3_A", "r3_B", "r4_A", "r4_B"]
    assert soft["cell_dirs"]["r1_B"] == str(bd / "after/main/softmax") and soft["rounds"] == 4
    # controls: every round's A/B pair of the A/A nodes (relu, abs: 4 rounds x 2 shapes each)
    # and every node's consecutive same-side cells (3 nodes x 2 sides x 3 pairs x 2 shapes,
    # softmax's too: its r1_A and r2_A compile the same code); a node never calibrated by its
    # own cells: softmax loses its 12 same-side shapes, relu its 8 A/B and 12 same-side ones
    kinds = {"round_pairs_of_aa_nodes": 16, "same_side_across_rounds": 36, "controls_dirs": 0}
    assert block["controls"] == 52 and block["controls_by_kind"] == kinds and not block["rejected_controls"]
    assert soft["verdicts"]["rule"]["controls"] == 40
    assert soft["verdicts"]["rule"]["controls_by_kind"] == dict(kinds, same_side_across_rounds=24)
    assert by["relu"]["verdicts"]["rule"]["controls"] == by["abs"]["verdicts"]["rule"]["controls"] == 32
    assert by["relu"]["verdicts"]["rule"]["controls_by_kind"] == dict(kinds, round_pairs_of_aa_nodes=8,
                                                                       same_side_across_rounds=24)
    assert "same-side cells of consecutive rounds (r<k>_A~r<k+1>_A, r<k>_B~r<k+1>_B): 36 shape(s)" in (
        soft["verdicts"]["rule"]["control_source"])
    # side B planted 25 % faster (latencies x 0.8, jitter 1 %): FASTER on every shape, the rank
    # test agreeing at 4 rounds
    assert [s["aa_verdict"] for s in soft["shapes"]] == ["FASTER", "FASTER"]
    assert all(23 < s["speedup_pct"] < 27 and s["p_value"] < 0.05 for s in soft["shapes"])
    out = capsys.readouterr().out
    assert "[screen rounds] softmax: 4 rounds x 2 shapes" in out and "[screen rounds] amax: no rounds report" in out
    page = html.read_text()
    assert '<div id="rounds">' in page and "r&lt;k&gt;_&lt;A|B&gt;" in page and 'class="wrong"' not in page
    # outputs of a later round that differ from r1_A's open the page in red, above any speedup
    from zl.report import html as pages, rounds
    soft["results"].update(status="mismatch", value="r3_B: MISMATCH (1/2 shapes, worst |err| 0.5 > bound 0.01)")
    block["wrong_results"] = [c for c in block["nodes"] if rounds.result_mismatch(d, c)]
    page = pages.page_screen(d).render()
    assert block["wrong_results"] == ["softmax"]
    assert page.index("WRONG RESULTS") < page.index('<div id="rounds">')
    assert "softmax: rounds: r3_B: MISMATCH (1/2 shapes" in page
    # a same-side pair whose code differs at some level is no control: r3_A's softmax TTGIR edited
    ttgir = next((bd / "r3_A/main/softmax/ttgir").rglob("*.ttgir"))
    ttgir.write_text(ttgir.read_text().replace("arith.maxf", "arith.minf"))
    assert bs.main(["--screen", str(bd), "--json", str(js), "--false-alarm", "0.5"]) == 0
    again = json.loads(js.read_text())["rounds"]
    assert again["controls"] == 48 and again["controls_by_kind"] == dict(kinds, same_side_across_rounds=32)
    assert [w.split(": not an A/A: ")[0] for w in again["rejected_controls"]] == [rec] * 2
    assert [w.endswith(t) for w, t in zip(again["rejected_controls"], ("(r2_A~r3_A)", "(r3_A~r4_A)"))] == [True] * 2


@pytest.mark.parametrize("args, needle", [
    (("--switch", "ZL_TEST_SWITCH", "--rounds", "0"), "--rounds must be an integer >= 1 (got '0')"),
    (("--switch", "ZL_TEST_SWITCH", "--rounds", "2.5"), "--rounds must be an integer >= 1 (got '2.5')"),
    (("--rounds", "3"), "--rounds 3 repeats a --switch pair; give --switch NAME"),
    (("--switch", "ZL_TEST_SWITCH", "--judge", "--rounds", "2"), "--rounds 2 with --judge: nothing is timed"),
    (("--switch", "ZL_TEST_SWITCH", "--share-device", "2", "--rounds", "2"),
     "--rounds 2 with --share-device 2: shared-device timings are refused"),
    # with --judge-first before stage 1 runs: the rounds are stage 2's
    (("--switch", "ZL_TEST_SWITCH", "--judge-first", "--share-device", "2", "--rounds", "2"),
     "--rounds 2 with --share-device 2"),
])
def test_rounds_refused_before_any_case(tmp_path, args, needle):
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--batch-dir", tmp_path / "b", *args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert trace(tmp_path) == [] and not (tmp_path / "b").exists()


def test_a_resume_keeps_the_batch_rounds_and_refuses_another_count(tmp_path):
    import batch_summary as bs
    bd = tmp_path / "b"
    assert batch(tmp_path, "--ops", "softmax", "relu", "--switch", "ZL_TEST_SWITCH", "--rounds", "3",
                 "--devices", "0", "--batch-dir", bd, **rounds_env(tmp_path)).returncode == 0
    rows = status(bd / "r3_A")
    rows["relu"].update(status="INTERRUPTED", notes="interrupted")
    write_csv(bd / "r3_A" / "ops_status.csv", rows.values())
    (bd / "r3_A" / "main" / "relu" / ".complete").unlink()
    before, calls = snapshot(bd), len(trace(tmp_path))
    for other in ("2", "1"):
        r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", "--rounds", other, **rounds_env(tmp_path))
        assert r.returncode == 2 and f"started with --rounds 3, this call gives --rounds {other}" in r.stderr
        assert snapshot(bd) == before and len(trace(tmp_path)) == calls
    # left out, --rounds is the batch's: the unfinished case reruns whole, every round
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", **rounds_env(tmp_path))
    assert r.returncode == 0 and "1 reused, 1 to run" in r.stdout, r.stdout + r.stderr
    assert [s for s, _, _ in sides_run(tmp_path, "relu")[6:]] == ["before", "after", "r2_B", "r2_A", "r3_A", "r3_B"]
    assert status(bd / "r3_A")["relu"]["status"] == "PASS"
    # a batch without rounds records none (older batches resume as they did) and keeps none
    plain = tmp_path / "plain"
    assert batch(tmp_path, "--ops", "softmax", "--switch", "ZL_TEST_SWITCH", "--devices", "0",
                 "--batch-dir", plain, **rounds_env(tmp_path)).returncode == 0
    assert "rounds" not in json.loads((plain / "batch.json").read_text())["conditions"]
    r = batch(tmp_path, "--resume", "--batch-dir", plain, "--devices", "0", "--rounds", "2", **rounds_env(tmp_path))
    assert r.returncode == 2 and "started with --rounds 1, this call gives --rounds 2" in r.stderr
    assert not (plain / "r2_B").exists()
    js = tmp_path / "plain.json"
    assert bs.main(["--screen", str(plain), "--json", str(js)]) == 0 and "rounds" not in json.loads(js.read_text())


def test_real_rounds_on_the_fake_tree_report_medians_of_the_cells(tmp_path):
    """Real run_pytest.sh runs (fake FlagGems tree, interpreter): 2 nodes x 3 rounds. The sides
    ran in ab_repeat.sh's order, every one but before replayed before's record (its identity
    says so), and the screen's per-node rounds figures are the medians of the cells' rows."""
    import batch_summary as bs
    from statistics import median
    from zl.runlog.parse import read_run_log
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "relu", "abs", "--switch", "ZL_X", "--rounds", "3", "--devices", "0",
              "--dtypes", "float32", "--batch-dir", bd, "--op-timeout", "200", stub=False, timeout=500)
    assert r.returncode == 0, r.stdout + r.stderr
    order = ["before", "after", "r2_B", "r2_A", "r3_A", "r3_B"]
    for op in ("relu", "abs"):
        dirs = {s: bd / s / "main" / op for s in order}
        done = sorted(order, key=lambda s: (dirs[s] / ".complete").stat().st_mtime_ns)
        assert done == order, op
        idents = {s: json.loads((d / "run_identity.json").read_text()) for s, d in dirs.items()}
        assert idents["before"]["autotune_mode"] == "record"
        assert {s: i["replay_source_dir"] for s, i in idents.items() if s != "before"} == {
            s: str(dirs["before"]) for s in order[1:]}
    js = tmp_path / "screen.json"
    assert bs.main(["--screen", str(bd), "--json", str(js)]) == 0
    d = json.loads(js.read_text())
    assert d["rounds"]["nodes"] == ["relu@float32", "abs@float32"]
    for o in d["ops"]:
        node = o["rounds"]
        assert node["rounds"] == 3 and len(node["shapes"]) == 2
        cells = {c: read_run_log(Path(p)) for c, p in node["cell_dirs"].items()}
        for s in node["shapes"]:
            lat = {c: next(x.gems_lat for x in log.rows if x.size_detail == s["size_detail"])
                   for c, log in cells.items()}
            a, b = [lat[f"r{k}_A"] for k in (1, 2, 3)], [lat[f"r{k}_B"] for k in (1, 2, 3)]
            assert s["a"] == a and s["b"] == b
            assert s["a_median"] == median(a) and s["b_median"] == median(b)
            assert s["speedup_pct"] == pytest.approx((median(a) / median(b) - 1) * 100)
            assert s["deltas"] == pytest.approx([(x / y - 1) * 100 for x, y in zip(a, b)])
            assert s["verdict"] == "underpowered" and s["aa_verdict"] == "UNCLEAR"


def test_devices_of_two_models_are_refused_unless_mixed_hardware_is_allowed(tmp_path):
    """A local batch on devices nvidia-smi names as two models would time an H100 and an H200
    into one table: refused before any case, both models named; --allow-mixed-hardware runs it
    and records both."""
    bindir = tmp_path / "smi_mixed"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$*" in *"-i 1"*) echo "%s" ;; *) echo "%s" ;; esac\n' % (H200, H100))
    smi.chmod(0o755)
    path = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "softmax", "exp", "--devices", "0,1", "--batch-dir", bd, PATH=path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"devices 0,1, nvidia-smi: the devices are {H100} + {H200}; a timing batch compares within one" \
        in r.stderr and "Traceback" not in r.stderr
    assert not (bd / "batch.json").exists() and not trace(tmp_path)
    r = batch(tmp_path, "--ops", "softmax", "exp", "--devices", "0", "--batch-dir", bd, PATH=path)
    assert r.returncode == 0, r.stdout + r.stderr   # one device, one model
    bd2 = tmp_path / "b2"
    r = batch(tmp_path, "--ops", "softmax", "exp", "--devices", "0,1", "--batch-dir", bd2,
              "--allow-mixed-hardware", PATH=path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((bd2 / "batch.json").read_text())["conditions"]["device"] == {"models": [H100, H200]}
