"""ab_rlc_test.sh, ab_repeat.sh, ab_fold_test.sh end to end.

Driver logic (verdicts, order, skips, timeouts, failed cells, RESCORE) runs against
tests/fixtures/runlogs/stub_run_pytest.sh (ZL_RUN_PYTEST), which writes an
upstream-format run directory in milliseconds. Two tests go through the real
run_pytest.sh and the fake FlagGems tree on the CPU (no TTGIR there: NO_TRITON).
"""

import csv
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runner import REPO_ROOT, procs_with_env, run_zl

STUB = REPO_ROOT / "tests" / "fixtures" / "runlogs" / "stub_run_pytest.sh"


def stub_env(**kw):
    env = dict(ZL_RUN_PYTEST=str(STUB), ZL_STUB_SWITCH="ZL_TEST_SWITCH", SWITCH="ZL_TEST_SWITCH",
               TELEMETRY_INTERVAL="0")
    env.update(kw)
    return env


def tsv(path: Path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


# ---------------------------------------------------------------- ab_rlc_test.sh

@pytest.fixture
def screened(tmp_path):
    root = tmp_path / "screen"
    r = run_zl(tmp_path / "w", script="ab_rlc_test.sh", **stub_env(
        OPS="relu abs exp:exp amax:amax:float32", AB_ROOT=root, ZL_STUB_EFFECT="0.05",
        ZL_STUB_IR_MAP="relu=switch,abs=same,exp=none,amax=switch", ZL_STUB_FAIL="amax@float32_after"))
    assert r.returncode == 0, r.explain()
    return root, r


def test_screen_verdicts_and_what_each_prints(screened):
    root, r = screened
    rows = {row["op"]: row for row in tsv(root / "screen.tsv")}
    assert {k: v["verdict"] for k, v in rows.items()} == {
        "relu": "IR_CHANGED@ttgir", "abs": "NO_IR_DIFF", "exp": "NO_TRITON", "amax": "NO_ROWS"}
    # per-level fingerprints: ttgir differs (A/B), the stub's recorded deeper levels agree
    assert "/" in rows["relu"]["fp_ttgir"] and "/" not in rows["relu"]["fp_llir"]
    assert rows["abs"]["ir_levels"] == "ttgir,llir,ptx,binary" and rows["exp"]["ir_levels"] == "-"
    # the stub records no outputs: the results column says so instead of "match"
    assert rows["relu"]["results"].startswith("n/a (no outputs recorded")
    assert rows["amax"]["dtypes"] == "float32" and rows["amax"]["rc_after"] == "1"
    assert rows["relu"]["rows_before"] == "6" and rows["relu"]["kernels_after"] == "1"
    assert rows["exp"]["kernels_before"] == "0"
    # caliber columns come from batch_summary.py --caliber
    assert rows["relu"]["timer"] == "cuda_graph" and rows["relu"]["tuner_cache"] == "isolated"
    out = r.stdout
    assert "[ab] relu: 6 paired rows" in out
    assert "NOISE FLOOR for abs" in out and "[ab] abs: 6 paired rows" in out
    assert "[ab] exp:" not in out and "!!! exp: nothing compiled through Triton" in out
    assert "[ab] amax" not in out and "!!! amax@float32: no comparable measurement" in out
    # explicit OUT_DIRs under one root, side B replays side A
    assert (root / "relu_before" / "run.log").is_file() and (root / "amax@float32_after").is_dir()
    log = (root / "summary.log").read_text()
    assert "\x1b[" not in log and "ALL DONE" in log


def test_rescore_rejudges_from_disk_and_keeps_the_old_table(screened):
    root, _ = screened
    # plant: relu's after side now compiled the same TTGIR as before; exp gains identical IR
    shutil.rmtree(root / "relu_after" / "ttgir")
    shutil.copytree(root / "relu_before" / "ttgir", root / "relu_after" / "ttgir")
    for side in ("before", "after"):
        d = root / f"exp_{side}" / "ttgir" / "1024" / "k"
        d.mkdir(parents=True)
        (d / "a.ttgir").write_text("module { tt.func @k() }\n")
    old = (root / "screen.tsv").read_text()
    r = run_zl(root.parent / "w2", script="ab_rlc_test.sh", **stub_env(RESCORE=root))
    assert r.returncode == 0, r.explain()
    assert (root / "screen.tsv.bak").read_text() == old
    verdicts = {row["op"]: row["verdict"] for row in tsv(root / "screen.tsv")}
    assert verdicts == {"relu": "NO_IR_DIFF", "abs": "NO_IR_DIFF", "exp": "NO_IR_DIFF", "amax": "NO_ROWS"}
    assert "IR_CHANGED@ttgir -> NO_IR_DIFF" in r.stdout and "2 verdict(s) changed" in r.stdout
    rows = {row["op"]: row for row in tsv(root / "screen.tsv")}
    assert "/" not in rows["relu"]["fp_ttgir"] and rows["exp"]["ir_levels"] == "ttgir"


def test_a_finished_screen_records_its_list_and_reads_complete(screened, tmp_path):
    root, _ = screened
    requested = tsv(root / "screen.requested.tsv")
    assert [(r["cell"], r["op_file"], r["dtypes"]) for r in requested] == [
        ("relu", "relu", ""), ("abs", "abs", ""), ("exp", "exp", ""), ("amax@float32", "amax", "float32")]
    assert (root / "screen.complete").read_text().startswith("complete\t")
    out = tmp_path / "screen.json"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "batch_summary.py"), "--screen", str(root),
                        "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    completion = json.loads(out.read_text())["completion"]
    assert completion["complete"] is True and completion["never_judged"] == []
    assert "INCOMPLETE" not in r.stdout


def test_a_screen_stopped_mid_list_reads_incomplete_with_the_cells_never_judged(tmp_path):
    """SIGTERM while the second of three cells runs: screen.tsv holds relu only. The requested
    list was written before the first cell and the completion marker never was, so the report
    says INCOMPLETE and names abs and exp (before: relu alone, read as the whole screen)."""
    from harness.runner import base_env

    root, trace = tmp_path / "screen", tmp_path / "trace"
    (tmp_path / "home").mkdir()
    # Every stub cell sleeps 3 s: the signal goes out once the trace shows abs's first side
    # started (relu was judged before that), inside that side's 3 s.
    env = base_env(tmp_path / "home", AB_ROOT=root, OPS="relu abs exp", ZL_STUB_SLEEP="3",
                   ZL_STUB_TRACE=trace, **stub_env())
    proc = subprocess.Popen(["bash", str(REPO_ROOT / "ab_rlc_test.sh")], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "abs_before" not in (trace.read_text() if trace.is_file() else ""):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 143, out
    assert [r["op"] for r in tsv(root / "screen.tsv")] == ["relu"], out
    assert [r["cell"] for r in tsv(root / "screen.requested.tsv")] == ["relu", "abs", "exp"]
    assert not (root / "screen.complete").exists()
    assert "!!! screen INCOMPLETE: never judged: abs exp" in (root / "summary.log").read_text()
    report = tmp_path / "screen.json"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "batch_summary.py"), "--screen", str(root),
                        "--json", str(report)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "!!! [screen] INCOMPLETE" in r.stdout and r.stdout.rstrip().count("abs exp") == 1, r.stdout
    d = json.loads(report.read_text())
    assert d["completion"]["complete"] is False and d["completion"]["never_judged"] == ["abs", "exp"]
    assert d["failures"][0]["reason"].startswith("INCOMPLETE") and d["failures"][0]["ops"] == ["abs", "exp"]
    # RESCORE of that root says so too
    r = run_zl(tmp_path / "w2", script="ab_rlc_test.sh", **stub_env(RESCORE=root))
    assert r.returncode == 0 and "this screen is INCOMPLETE" in r.stdout, r.explain()


def test_rescore_bad_root_exits_2(tmp_path):
    r = run_zl(tmp_path / "w", script="ab_rlc_test.sh", **stub_env(RESCORE=tmp_path / "nope"))
    assert r.returncode == 2 and "RESCORE directory does not exist" in r.stderr


def test_cell_timeout(tmp_path):
    root = tmp_path / "screen"
    r = run_zl(tmp_path / "w", script="ab_rlc_test.sh", **stub_env(
        OPS="relu", AB_ROOT=root, CELL_TIMEOUT="1", ZL_STUB_SLEEP="5"))
    # the only operator measured nothing: the screen fails instead of ending like a good one
    assert r.returncode == 1, r.explain()
    assert "!!! every operator is NO_ROWS" in r.stdout
    assert "!!! CELL_TIMEOUT 1s op=relu ZL_TEST_SWITCH=0 rc=124" in r.stdout
    row = tsv(root / "screen.tsv")[0]
    assert row["rc_before"] == "124" and row["verdict"] == "NO_ROWS"
    assert "CELL_TIMEOUT=1s" in r.stdout and "not a verdict on the switch" in r.stdout


@pytest.mark.parametrize("script,env,msg", [
    ("ab_rlc_test.sh", {"SWITCH": "not a name"}, "SWITCH is not a variable name"),
    ("ab_rlc_test.sh", {"CELL_TIMEOUT": "soon"}, "CELL_TIMEOUT must be"),
    ("ab_repeat.sh", {"SWITCH": None, "OPS": "relu"}, "SWITCH is required"),
    ("ab_repeat.sh", {"OPS": None}, "OPS is required"),
    ("ab_repeat.sh", {"OPS": "relu", "ROUNDS": "six"}, "ROUNDS must be"),
])
def test_bad_variables_exit_2(tmp_path, script, env, msg):
    r = run_zl(tmp_path / "w", script=script, **{**stub_env(), **env})
    assert r.returncode == 2 and msg in r.stderr


# ---------------------------------------------------------------- ab_repeat.sh

def test_repeat_records_once_alternates_order_and_reports(tmp_path):
    root, trace = tmp_path / "rep", tmp_path / "trace"
    r = run_zl(tmp_path / "w", script="ab_repeat.sh", **stub_env(
        OPS="relu", ROUNDS="4", AB_ROOT=root, ZL_STUB_EFFECT="0.05", ZL_STUB_NOISE="0.002",
        ZL_STUB_TRACE=trace))
    assert r.returncode == 0, r.explain()
    assert trace.read_text().split("\n")[:8] == [
        "relu/r1_A switch=0 replay=0", "relu/r1_B switch=1 replay=1",
        "relu/r2_B switch=1 replay=1", "relu/r2_A switch=0 replay=1",
        "relu/r3_A switch=0 replay=1", "relu/r3_B switch=1 replay=1",
        "relu/r4_B switch=1 replay=1", "relu/r4_A switch=0 replay=1"]
    status = tsv(root / "status.tsv")
    assert list(status[0]) == ["round", "op", "dtypes", "side", "switch", "rc", "elapsed_s", "success", "failed",
                               "replay_fallback", "no_cudagraph", "capture_poisoned"]
    assert len(status) == 8 and all(s["rc"] == "0" and s["success"] == "6" for s in status)
    assert "the switch changes generated code" in r.stdout
    assert "[ab-rounds] relu: 4 rounds x 6 shapes" in r.stdout
    assert "verdicts: faster=6" in r.stdout
    assert (root / "relu" / "ab_rounds.json").is_file()


def test_repeat_stops_when_the_switch_changes_no_ir(tmp_path):
    root = tmp_path / "rep"
    r = run_zl(tmp_path / "w", script="ab_repeat.sh", **stub_env(
        OPS="relu", ROUNDS="4", AB_ROOT=root, ZL_STUB_IR="same"))
    assert r.returncode == 0, r.explain()
    assert "!!! SWITCH_NO_IR_DIFF op=relu switch=ZL_TEST_SWITCH" in r.stdout
    assert "[ab-rounds]" not in r.stdout and "no report" in r.stdout
    assert len(tsv(root / "status.tsv")) == 2
    r = run_zl(tmp_path / "w2", script="ab_repeat.sh", **stub_env(
        OPS="relu", ROUNDS="2", AB_ROOT=tmp_path / "rep2", ZL_STUB_IR="same", SWITCH_ALLOW_NO_IR_DIFF=" Yes"))
    assert "SWITCH_NO_IR_DIFF" in r.stdout and "[ab-rounds] relu: 2 rounds" in r.stdout
    # allowed: says why it goes on, not the refusal's advice to rerun with the flag
    assert "continuing because SWITCH_ALLOW_NO_IR_DIFF=1" in r.stdout
    assert "rerun with SWITCH_ALLOW_NO_IR_DIFF=1" not in r.stdout


def test_repeat_failed_cell_means_no_report(tmp_path):
    root = tmp_path / "rep"
    r = run_zl(tmp_path / "w", script="ab_repeat.sh", **stub_env(
        OPS="relu abs", ROUNDS="3", AB_ROOT=root, ZL_STUB_FAIL="relu/r2_B"))
    assert r.returncode == 0, r.explain()
    status = tsv(root / "status.tsv")
    failed = [s for s in status if s["op"] == "relu" and s["round"] == "2" and s["side"] == "B"]
    assert failed[0]["rc"] == "1" and failed[0]["failed"] == "1" and failed[0]["success"] == "0"
    assert "!!! relu: a cell failed; no report" in r.stdout
    assert "[ab-rounds] relu" not in r.stdout and "[ab-rounds] abs: 3 rounds" in r.stdout
    assert not any(s["op"] == "relu" and s["round"] == "3" for s in status)


# ---------------------------------------------------------------- ab_fold_test.sh

def test_fold_without_shape_sets_exits_2(tmp_path):
    # a copy of the script beside an empty shape/ (the repo's shape/ may hold real sets)
    (tmp_path / "shape").mkdir()
    shutil.copy(REPO_ROOT / "ab_fold_test.sh", tmp_path / "ab_fold_test.sh")
    r = run_zl(tmp_path / "w", script=str(tmp_path / "ab_fold_test.sh"))
    assert r.returncode == 2 and "no shape set" in r.stderr
    r = run_zl(tmp_path / "w2", script="ab_fold_test.sh", SHAPE_SETS=str(tmp_path / "none.yaml"))
    assert r.returncode == 2 and "shape set not found" in r.stderr


def test_fold_refuses_a_switch_the_source_does_not_read(tmp_path, fake_flaggems_dir):
    yaml = tmp_path / "set.yaml"
    yaml.write_text("relu:\n  shapes:\n    - [1024]\n")
    r = run_zl(tmp_path / "w", script="ab_fold_test.sh", SHAPE_SETS=str(yaml))
    assert r.returncode == 3
    assert "FLAGGEMS_MXFP4_FOLDSCALE is not read anywhere under" in r.stderr
    assert "false 'no difference'" in r.stderr


def test_fold_pairs_each_set(tmp_path):
    yaml = tmp_path / "trace_a.yaml"
    yaml.write_text("relu:\n  shapes:\n    - [1024]\n")
    root = tmp_path / "fold"
    r = run_zl(tmp_path / "w", script="ab_fold_test.sh", **stub_env(
        SHAPE_SETS=str(yaml), FOLD_SWITCH="ZL_TEST_SWITCH", OP="relu", OP_FILE="relu",
        AB_ROOT=root, ZL_STUB_EFFECT="0.1"))
    assert r.returncode == 0, r.explain()
    assert "[ab] relu@trace_a: 6 paired rows" in r.stdout
    assert (root / "trace_a_fold0" / "run.log").is_file() and (root / "trace_a_fold1").is_dir()
    assert "\x1b[" not in (root / "summary.log").read_text()


def _fold_help_example(marker: str) -> str:
    """The first command of ab_fold_test.sh --help whose text contains `marker`, with its
    continuation lines joined."""
    r = subprocess.run(["bash", str(REPO_ROOT / "ab_fold_test.sh"), "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    commands, current = [], ""
    for line in r.stdout.splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        current += text[:-1] + " " if text.endswith("\\") else text
        if not text.endswith("\\"):
            commands.append(current)
            current = ""
    found = [c for c in commands if marker in c and c.endswith("bash ab_fold_test.sh")]
    assert found, r.stdout
    return found[0]


def test_fold_help_example_runs_the_shipped_sets_on_the_fake_tree(tmp_path):
    """The help's CPU example, as printed, from the repository root: every shipped set
    (shape/*.yaml) gets its own record/replay pair with the set as SHAPE_FILE, and a summary.
    The run script is the stub (a real one is ~40 s per set in the interpreter)."""
    from harness.runner import base_env

    example = _fold_help_example("tests/fake_flaggems")
    sets = sorted((REPO_ROOT / "shape").glob("*.yaml"))
    assert {s.stem for s in sets} >= {"Llama-3-8B-decode-b1", "Llama-3-8B-decode-b8"}
    trace, root = tmp_path / "cells.tsv", tmp_path / "fold"
    run_script = tmp_path / "run.sh"
    run_script.write_text("#!/usr/bin/env bash\n"
                          f"printf '%s\\t%s\\t%s\\t%s\\t%s\\n' \"$(basename \"$OUT_DIR\")\" \"$SHAPE_FILE\" "
                          f"\"$OP\" \"$ZL_TEST_SWITCH\" \"$REPLAY_FROM\" >> {trace}\n"
                          f"exec bash {STUB}\n")
    (tmp_path / "home").mkdir()
    env = base_env(tmp_path / "home", AB_ROOT=root, ZL_RUNS_ROOT=tmp_path / "runs",
                   **stub_env(ZL_RUN_PYTEST=run_script, ZL_STUB_EFFECT="0.1"))
    r = subprocess.run(["bash", "-c", example], cwd=str(REPO_ROOT), env=env, capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    cells = [line.split("\t") for line in trace.read_text().splitlines()]
    expected = []
    for s in sets:
        expected += [[f"{s.stem}_fold0", str(s), "relu", "0", ""],
                     [f"{s.stem}_fold1", str(s), "relu", "1", str(root / f"{s.stem}_fold0")]]
    assert cells == expected
    for s in sets:
        assert (root / f"{s.stem}_fold0" / "run.log").is_file()
        assert (root / f"{s.stem}_fold1" / "run_identity.json").is_file()
        assert f"[ab] relu@{s.stem}: 6 paired rows" in r.stdout
    log = (root / "summary.log").read_text()
    assert "ALL DONE" in log and "FAILED" not in log and "\x1b[" not in log


def test_shipped_fold_sets_are_llama_decode_rows_and_pass_the_shape_check():
    """Provenance as the headers state it: every row but relu's is a row of
    shape/llm/Llama-3-8B.yaml under the same key; every entry passes run_pytest.sh's check."""
    import yaml

    from zl.shapefile import validate_shape_file

    source = yaml.safe_load((REPO_ROOT / "shape" / "llm" / "Llama-3-8B.yaml").read_text())
    for path in sorted((REPO_ROOT / "shape").glob("Llama-3-8B-decode-*.yaml")):
        text = path.read_text()
        assert "Provenance: every decode row of shape/llm/Llama-3-8B.yaml" in text
        data = yaml.safe_load(text)
        for key, entry in data.items():
            assert validate_shape_file(str(path), key) is None, (path, key)
            if key != "relu":
                missing = [s for s in entry["shapes"] if s not in source[key]["shapes"]]
                assert missing == [], (path.name, key, missing)
        assert data["relu"]["shapes"] == data["silu_and_mul"]["shapes"]


def test_fold_refuses_sets_without_the_operators_entry_before_any_cell(tmp_path):
    """The shipped sets with the default OP (the DeepSeek reference job's operator): exit 2
    naming each set, before a root or a cell exists."""
    runs = tmp_path / "runs"
    r = run_zl(tmp_path / "w", script="ab_fold_test.sh", **stub_env(
        FOLD_SWITCH="ZL_TEST_SWITCH", ZL_RUNS_ROOT=runs))
    assert r.returncode == 2, r.explain()
    assert "has no 'fused_marlin_moe_mxfp4:' entry" in r.stderr
    assert "Llama-3-8B-decode-b1.yaml" in r.stderr and "Llama-3-8B-decode-b8.yaml" in r.stderr
    assert "set OP/OP_FILE to an operator the sets list" in r.stderr
    assert not runs.exists()


# ---------------------------------------------------------------- real run_pytest.sh (CPU)

def test_screen_through_run_pytest_on_the_cpu(tmp_path):
    root = tmp_path / "screen"
    r = run_zl(tmp_path / "w", script="ab_rlc_test.sh", timeout=400,
               OPS="relu:relu:float32", SWITCH="ZL_TEST_SWITCH", AB_ROOT=root)
    assert r.returncode == 0, r.explain()
    row = tsv(root / "screen.tsv")[0]
    # interpreter mode compiles no TTGIR, so the honest verdict is NO_TRITON
    assert row["verdict"] == "NO_TRITON", r.explain()
    # relu has two entries in the fake core_shapes.yaml, which the inline yaml is laid over
    assert row["rows_before"] == "2" and row["rows_after"] == "2"
    assert row["backend"] == "cuda" and row["bench_level"] == "core" and row["shape_mode"] == "inline"
    assert "!!! relu@float32: nothing compiled through Triton" in r.stdout
    assert row["tuner_cache"] == "isolated"
    assert json.loads((root / "relu@float32_after" / "run_identity.json").read_text())[
        "autotune_mode"].startswith("replay")


def test_repeat_through_run_pytest_on_the_cpu(tmp_path):
    root = tmp_path / "rep"
    r = run_zl(tmp_path / "w", script="ab_repeat.sh", timeout=600, OPS="relu:relu:float32",
               SWITCH="ZL_TEST_SWITCH", ROUNDS="2", AB_ROOT=root, TELEMETRY_INTERVAL="1")
    assert r.returncode == 0, r.explain()
    status = tsv(root / "status.tsv")
    assert [(s["round"], s["side"], s["rc"], s["success"]) for s in status] == [
        ("1", "A", "0", "2"), ("1", "B", "0", "2"), ("2", "B", "0", "2"), ("2", "A", "0", "2")]
    assert "[ab-rounds] relu@float32: 2 rounds x 2 shapes" in r.stdout, r.explain()
    # campaigns isolate the tuner cache unless told otherwise
    ident = json.loads((root / "relu@float32" / "r2_A" / "run_identity.json").read_text())
    assert ident["tuner_cache"] == "isolated" and ident["campaign_id"] == (root / "campaign.id").read_text().strip()
    # no sampler on this machine: quiet, with the reason on file
    assert (root / "telemetry.err").is_file()


def test_default_verdict_sees_switches_below_ttgir(tmp_path):
    """DISABLE_LLVM_OPT-like: TTGIR identical, LLVM IR and below differ. The default screen
    (no IR_LEVEL) names the first differing level; a binary-only change is BINARY_CHANGED."""
    env = stub_env(OPS="softmax", ZL_STUB_IR="same", ZL_STUB_BELOW="1")
    r = run_zl(tmp_path / "w", script="ab_rlc_test.sh", AB_ROOT=tmp_path / "t", **env)
    row = tsv(tmp_path / "t" / "screen.tsv")[0]
    assert row["verdict"] == "IR_CHANGED@llir", r.explain()
    assert row["ir_levels"] == "ttgir,llir" and "/" in row["fp_llir"] and "/" not in row["fp_ttgir"]
    r = run_zl(tmp_path / "w2", script="ab_rlc_test.sh", AB_ROOT=tmp_path / "p",
               **{**env, "ZL_STUB_BELOW": "binary"})
    assert tsv(tmp_path / "p" / "screen.tsv")[0]["verdict"] == "BINARY_CHANGED", r.explain()
    r = run_zl(tmp_path / "w3", script="ab_repeat.sh", AB_ROOT=tmp_path / "rp", ROUNDS="2", **env)
    assert "the switch changes generated code (IR_CHANGED@llir)" in r.stdout and "SWITCH_NO_IR_DIFF" not in r.stdout
    r = run_zl(tmp_path / "w4", script="ab_repeat.sh", IR_LEVEL="P T X", **{**env, "OPS": "softmax"})
    assert r.returncode == 2 and "IR_LEVEL is not an IR level name" in r.stderr


# ---------------------------------------------------------------- campaigns: names, roots, kills

def test_dtype_entries_get_their_own_cells_and_ignore_exported_dtypes(tmp_path):
    root = tmp_path / "rep"
    r = run_zl(tmp_path / "w", script="ab_repeat.sh", **stub_env(
        OPS="relu:relu:float16 relu:relu:float32 abs", ROUNDS="2", AB_ROOT=root, DTYPES="float64",
        ZL_STUB_EFFECT="0.05"))
    assert r.returncode == 0, r.explain()
    status = tsv(root / "status.tsv")
    assert sorted({(s["op"], s["dtypes"]) for s in status}) == [
        ("abs", "<all>"), ("relu", "float16"), ("relu", "float32")]
    assert len(status) == 12
    for cell, dtypes in (("relu@float16", "float16"), ("relu@float32", "float32"), ("abs", "")):
        ident = json.loads((root / cell / "r2_B" / "run_identity.json").read_text())
        assert ident["dtypes"] == dtypes, cell   # never the exported DTYPES
        assert (root / cell / "ab_rounds.json").is_file()
        assert f"[ab-rounds] {cell}: 2 rounds" in r.stdout
    assert "DTYPES=float64 is ignored" in r.stderr


@pytest.mark.parametrize("ops,msg", [
    ("*", "bad OPS entry '*'"),
    ("../../x", "bad OPS entry '../../x'"),
    ("relu:relu/x", "bad OPS entry"),
    ("relu:relu:float*", "not a dtype name"),
    ("relu relu:relu", "names the cell 'relu' twice"),
])
def test_ops_entries_are_validated_before_any_cell(tmp_path, ops, msg):
    runs = tmp_path / "runs"
    for script in ("ab_repeat.sh", "ab_rlc_test.sh"):
        r = run_zl(tmp_path / script, script=script, **stub_env(OPS=ops, ZL_RUNS_ROOT=runs))
        assert r.returncode == 2 and msg in r.stderr, r.explain()
    assert not runs.exists()


def test_help_prints_usage_and_starts_nothing(tmp_path):
    runs = tmp_path / "runs"
    for script in ("run_pytest.sh", "ab_repeat.sh", "ab_rlc_test.sh", "ab_fold_test.sh"):
        for flag in ("--help", "-h"):
            r = run_zl(tmp_path / f"{script}{flag}", script=script, args=(flag,), OUT_DIR=runs / "x",
                       **stub_env(ZL_RUNS_ROOT=runs, OPS="relu"))
            assert r.returncode == 0 and "Exit" in r.stdout, r.explain()
    r = run_zl(tmp_path / "bad", script="ab_repeat.sh", args=("relu",), **stub_env(OPS="relu"))
    assert r.returncode == 2 and "takes no arguments" in r.stderr
    assert not runs.exists()


def test_interpreter_that_cannot_import_stops_the_campaign_before_a_cell(tmp_path):
    runs = tmp_path / "runs"
    # flag_gems no longer on the path: one named error, not one failure per cell
    r = run_zl(tmp_path / "w", script="ab_repeat.sh", PYTHONPATH=REPO_ROOT,
               **stub_env(OPS="relu", ZL_RUNS_ROOT=runs))
    assert r.returncode == 3, r.explain()
    assert "!!! PREFLIGHT_FAILED check=interpreter" in r.stderr and "flag_gems" in r.stderr
    assert not runs.exists()


def test_campaign_preflight_leaves_no_trace_in_the_users_tuner_cache(tmp_path):
    """The interpreter check imports flag_gems for real; FlagGems creates its sqlite tuner store
    at import (the fake tree does, under $HOME/.flaggems/config_cache, as upstream). A campaign
    that says tuner=isolated must not write the user's store, nor leave its throwaway one."""
    from harness.runner import base_env

    probe_home, tmp = tmp_path / "probe_home", tmp_path / "tmp"
    probe_home.mkdir()
    tmp.mkdir()
    # the fake flag_gems does write the store at import, so the check below can fail
    subprocess.run([sys.executable, "-c", "import flag_gems"], env=base_env(probe_home),
                   capture_output=True, check=True, timeout=120)
    assert list((probe_home / ".flaggems" / "config_cache").glob("TunedConfig_*.db"))
    for isolate in (None, "0"):
        work = tmp_path / f"w{isolate}"
        r = run_zl(work, script="ab_rlc_test.sh", TMPDIR=tmp, **stub_env(
            OPS="relu", AB_ROOT=tmp_path / f"s{isolate}", ZL_ISOLATE_TUNER_CACHE=isolate))
        assert r.returncode == 0, r.explain()
        assert not (work / "home" / ".flaggems").exists(), sorted((work / "home").rglob("*"))
        assert list(tmp.iterdir()) == []


def test_a_second_campaign_never_merges_into_a_used_root(tmp_path):
    root = tmp_path / "rep"
    r = run_zl(tmp_path / "w", script="ab_repeat.sh", **stub_env(OPS="relu", ROUNDS="2", AB_ROOT=root))
    assert r.returncode == 0, r.explain()
    first_id = (root / "campaign.id").read_text().strip()
    cells = [d for d in (root / "relu").iterdir() if d.is_dir()]
    assert len(cells) == 4
    for cell in cells:
        assert json.loads((cell / "run_identity.json").read_text())["campaign_id"] == first_id
    status = (root / "status.tsv").read_text()
    r = run_zl(tmp_path / "w2", script="ab_repeat.sh", **stub_env(OPS="relu", ROUNDS="2", AB_ROOT=root))
    assert r.returncode == 2 and "already holds campaign" in r.stderr, r.explain()
    assert (root / "status.tsv").read_text() == status and (root / "campaign.id").read_text().strip() == first_id
    # a root made by an older driver (no campaign.id) is refused too
    (root / "campaign.id").unlink()
    r = run_zl(tmp_path / "w3", script="ab_rlc_test.sh", **stub_env(OPS="relu", AB_ROOT=root))
    assert r.returncode == 2 and "already holds an earlier campaign" in r.stderr, r.explain()


def test_two_screens_started_together_claim_different_roots(tmp_path):
    from harness.runner import base_env

    runs = tmp_path / "runs"
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(home, ZL_RUNS_ROOT=runs, OPS="relu", **stub_env())
    procs = [subprocess.Popen(["bash", str(REPO_ROOT / "ab_rlc_test.sh")], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    roots = sorted(runs.iterdir())
    assert len(roots) == 2, roots
    ids = {(d / "campaign.id").read_text() for d in roots}
    assert len(ids) == 2
    for d in roots:   # each summary.log holds its own campaign only
        assert (d / "summary.log").read_text().count(">>> switch=") == 1


def _wait_gone(needle: str, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = procs_with_env(needle)
        if not left:
            return []
        time.sleep(0.2)
    return procs_with_env(needle)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_ab_repeat_stops_the_campaign(tmp_path, sig):
    from harness.runner import base_env

    root, trace = tmp_path / "rep", tmp_path / "trace"
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(home, AB_ROOT=root, OPS="relu abs", ROUNDS="3", ZL_STUB_SLEEP="60",
                   ZL_STUB_TRACE=trace, **stub_env(TELEMETRY_INTERVAL="0"))
    proc = subprocess.Popen(["bash", str(REPO_ROOT / "ab_repeat.sh")], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (trace.is_file() and trace.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert trace.is_file(), "the first cell never started"
    proc.send_signal(sig)
    out = proc.communicate(timeout=60)[0]
    # SIGTERM is trapped (exit 128+15); SIGKILL cannot be, the ties to the children must hold
    assert proc.returncode == (143 if sig == signal.SIGTERM else -9), out
    # the running cell (and everything it started) is gone, and no later cell ran: every process
    # of the campaign carries AB_ROOT, so once none is left none can start a cell
    assert _wait_gone(str(root), seconds=60) == []
    assert trace.read_text().splitlines() == ["relu/r1_A switch=0 replay=0"]
    if sig == signal.SIGTERM:
        assert "SIGTERM received; campaign stopped" in (root / "summary.log").read_text()


def test_a_killed_cell_is_not_reported_as_a_timeout(tmp_path):
    root = tmp_path / "rep"
    r = run_zl(tmp_path / "w", script="ab_repeat.sh", **stub_env(
        OPS="relu", ROUNDS="2", AB_ROOT=root, ZL_STUB_SELFKILL="r1_B"))
    assert r.returncode == 0, r.explain()
    assert "!!! CELL_KILLED signal=9 op=relu dtypes=<all> round=1 side=B rc=137" in r.stdout
    assert "CELL_TIMEOUT" not in r.stdout


def test_drivers_isolate_the_tuner_cache_unless_told_not_to(tmp_path):
    for value, expect in ((None, "isolated"), (" 0", "shared(stub)"), ("maybe", None)):
        root = tmp_path / f"s{expect}"
        r = run_zl(tmp_path / f"w{expect}", script="ab_rlc_test.sh", **stub_env(
            OPS="relu", AB_ROOT=root, ZL_ISOLATE_TUNER_CACHE=value))
        if expect is None:
            assert r.returncode == 2 and "ZL_ISOLATE_TUNER_CACHE='maybe'" in r.stderr, r.explain()
            continue
        assert r.returncode == 0, r.explain()
        assert tsv(root / "screen.tsv")[0]["tuner_cache"] == expect


def test_variant_sets_that_differ_are_variants_differ_in_screen_and_round_1(tmp_path):
    """The H200 dropout A/A (docs/validation/ir.md): side A also compiled an i64
    specialisation, every variant both compiled is the same code. The screen must not send it
    on, nor call it the noise floor; ab_repeat.sh's round 1 stops as for NO_IR_DIFF."""
    env = stub_env(OPS="relu", ZL_STUB_IR="variants")
    r = run_zl(tmp_path / "w", script="ab_rlc_test.sh", AB_ROOT=tmp_path / "s", **env)
    row = tsv(tmp_path / "s" / "screen.tsv")[0]
    assert row["verdict"] == "VARIANTS_DIFFER", r.explain()
    assert row["variants_only"] == "A: 1024/relu_kernel[n:i64]; B: -"
    assert "the sides compiled different variant sets" in r.stdout and "NOISE FLOOR" not in r.stdout
    assert "did not (A: 1024/relu_kernel[n:i64]; B: -): the range below is not a gain" in r.stdout
    r = run_zl(tmp_path / "w2", script="ab_repeat.sh", AB_ROOT=tmp_path / "rp", ROUNDS="2", **env)
    assert "!!! SWITCH_NO_IR_DIFF op=relu switch=ZL_TEST_SWITCH" in r.stdout, r.explain()
    assert "round 1 is VARIANTS_DIFFER" in r.stdout and "[ab-rounds]" not in r.stdout


def test_identical_code_without_a_binary_hash_is_not_called_the_noise_floor(tmp_path):
    root = tmp_path / "screen"
    r = run_zl(tmp_path / "w", script="ab_rlc_test.sh", **stub_env(
        OPS="abs", AB_ROOT=root, ZL_STUB_IR_MAP="abs=same", ZL_STUB_NO_BINARY="1"))
    assert r.returncode == 0, r.explain()
    row, = tsv(root / "screen.tsv")
    assert row["verdict"] == "NO_IR_DIFF" and row["ir_levels"] == "ttgir,llir,ptx"
    assert "NOISE FLOOR" not in r.stdout
    assert "abs: identical at ttgir,llir,ptx only, no binary hash on both sides" in r.stdout
