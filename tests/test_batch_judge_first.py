"""run_batch.py --switch NAME --judge-first (zl/batch/judge_first.py) on the batch stub: every
node judged untimed, then only the changed nodes and the A/A controls timed, one summary,
resumable, and its refusals."""

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from harness.runner import FAKE_FLAGGEMS_DIR, REPO_ROOT
from test_batch import batch, status, trace

from zl.batch.judge_first import select

OPS = ("softmax", "gelu_backward", "relu", "abs", "amax", "exp", "zl_skipped")
ENV = dict(ZL_STUB_SWITCH="ZL_X", ZL_STUB_IR_MAP="relu=same,abs=same,amax=same",
           ZL_STUB_PLAN="exp=fail,zl_skipped=skip", ZL_STUB_CPU="1.5,0.5")
# stage 1's judgement of OPS under ENV, with side A run fresh or taken from a baseline
CHANGED = ["main:gelu_backward", "main:softmax"]
COUNTS = {"IR_CHANGED@ttgir": 2, "NO_IR_DIFF": 3, "NO_ROWS": 2}


def judge_first(tmp_path, *args, **env):
    return batch(tmp_path, "--switch", "ZL_X", "--judge-first", "--devices", "0", "--batch-dir",
                 tmp_path / "jf", *args, ZL_STUB_TRACE=str(tmp_path / "trace"), **{**ENV, **env})


def test_only_changed_nodes_and_controls_are_timed_after_an_untimed_judgement(tmp_path):
    r = judge_first(tmp_path, "--ops", *OPS, "--controls", "2", "--judge-share", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    root = tmp_path / "jf"
    summary = json.loads((root / "judge_first.json").read_text())
    s1 = summary["stage1"]
    assert s1["changed"] == CHANGED and s1["counts"] == COUNTS
    assert len(s1["controls"]) == 2 and set(s1["controls"]) < {"main:relu", "main:abs", "main:amax"}
    assert sorted(s1["unjudged"]) == ["main:exp", "main:zl_skipped"]
    assert s1["unjudged"]["main:exp"].startswith("side A FAIL")
    assert s1["unjudged"]["main:zl_skipped"].startswith("side A SKIP")
    # stage 1: every node, both sides untimed, two at a time
    judged = status(root / "judge" / "before")
    assert set(judged) == set(OPS)
    ident = json.loads((root / "judge/after/main/relu/run_identity.json").read_text())
    assert ident["timer"] == "none"
    started = json.loads((root / "judge/batch.json").read_text())
    assert started["judge"] is True and started["share_device"] == 2
    # stage 2: exactly the changed nodes and the controls, timed
    timed = status(root / "timed" / "after")
    to_time = sorted(s1["changed"] + s1["controls"])
    assert sorted(f"main:{k}" for k in timed) == to_time and summary["stage2"]["exit"] == 0
    ident = json.loads((root / "timed/after/main/softmax/run_identity.json").read_text())
    assert ident["timer"] == "cuda_graph"
    assert json.loads((root / "timed/batch.json").read_text())["judge"] is False
    runs = Counter(t[0] for t in trace(tmp_path))
    # judged: each node's side A, side B after a PASS; timed: both sides of the chosen ones
    assert all(runs[op] == 2 + 2 * (f"main:{op}" in to_time) for op in ("softmax", "relu", "abs", "amax"))
    assert runs["zl_skipped"] == 1 and runs["exp"] >= 1
    assert "not judged: main:exp: side A FAIL" in r.stdout
    # each stage's wall time in this call, for the whole-inventory budget
    assert [w["stage"] for w in summary["walls"]] == ["judge", "timed"]
    assert all(0 < w["wall_s"] < 120 for w in summary["walls"])
    assert "judge-first: stage judge took" in r.stdout
    # and its CPU: 2 CPU-s per side run (the stub's line), 7 sides A and 5 sides B judged
    cpu = summary["cpu"]["judge"]
    assert (cpu["side_runs"], cpu["cpu_s"]) == (12, 24.0)
    assert cpu["cores_busy"] == round(24.0 / summary["walls"][0]["wall_s"], 2)
    assert "judge-first: stage judge: 12 side run(s) used 24 CPU-s" in r.stdout
    # one report of the timed stage: every timed node, controls included
    rep = json.loads((root / "report.json").read_text())
    assert (root / "report.html").is_file() and "judge-first report:" in r.stdout
    assert sorted(json.dumps(rep).count(f'"{n.split(":")[1]}"') > 0 for n in to_time) == [True] * len(to_time)
    # and stage 1 beside it, on the terminal, in the JSON and on the page: what was not judged, and why
    assert rep["judge_first"]["stage1"]["unjudged"] == s1["unjudged"]
    assert "[judge-first] not judged: main:exp: side A FAIL" in r.stdout
    page = (root / "report.html").read_text()
    assert "Stage 1: every node judged untimed" in page and "2 node(s) not judged" in page
    assert page.index("Stage 1: every node judged untimed") < page.index("<h2>Shapes</h2>")
    # a resume redoes nothing: both stages reuse every finished case; stage 1 keeps its
    # --judge-share without being told (one at a time would be refused as another share)
    r = judge_first(tmp_path, "--resume", "--controls", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    again = Counter(t[0] for t in trace(tmp_path))
    # only the nodes stage 1 could not finish rerun (a FAIL; a SKIP whose side B never ran)
    assert {op for op in again if again[op] != runs[op]} == {"exp", "zl_skipped"}
    assert json.loads((root / "judge_first.json").read_text())["stage1"] == s1


def test_the_controls_are_the_same_draw_on_every_call(tmp_path):
    r = judge_first(tmp_path, "--ops", *OPS, "--controls", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    first = json.loads((tmp_path / "jf/judge_first.json").read_text())["stage1"]["controls"]
    assert select(tmp_path / "jf" / "judge", 1)["controls"] == first
    assert select(tmp_path / "jf" / "judge", 3)["controls"] == ["main:abs", "main:amax", "main:relu"]
    assert select(tmp_path / "jf" / "judge", 0)["controls"] == []


def test_refusals_exit_2(tmp_path):
    r = batch(tmp_path, "--judge-first", "--ops", "relu", "--devices", "0")
    assert r.returncode == 2 and "--judge-first needs --switch NAME" in r.stderr
    r = batch(tmp_path, "--controls", "3", "--ops", "relu", "--devices", "0")
    assert r.returncode == 2 and "--judge-share, --controls and --baseline belong to --judge-first" in r.stderr
    r = judge_first(tmp_path, "--resume")
    assert r.returncode == 2 and "holds no judge-first batch" in r.stderr
    assert judge_first(tmp_path, "--ops", "relu", "softmax").returncode == 0
    r = judge_first(tmp_path, "--ops", "relu")
    assert r.returncode == 2 and "already holds a judge-first batch; continue it with --resume" in r.stderr
    r = judge_first(tmp_path, "--resume", "--controls", "4")
    assert r.returncode == 2 and "with --controls 10 and --baseline (none); this call gives ZL_X with --controls 4" in r.stderr
    assert "Traceback" not in r.stderr


def test_real_runs_judge_untimed_and_every_side_compiles_into_its_own_cache(tmp_path):
    """On the fake FlagGems tree with the real plugins: the untimed stage prints nan rows under
    identity timer=none, and each side of each node gets a Triton cache of its own, never the
    user's: a switch that Triton's cache key does not include cannot hand side A's binaries to
    side B. The interpreter compiles no IR, so nothing is judged changed and nothing is timed."""
    shared = tmp_path / "user_triton_cache"
    r = batch(tmp_path, "--switch", "ZL_X", "--judge-first", "--devices", "0", "--dtypes", "float32",
              "--ops", "relu", "abs", "--batch-dir", tmp_path / "jf", "--op-timeout", "200", stub=False,
              timeout=400, TRITON_CACHE_DIR=str(shared))
    assert r.returncode == 0, r.stdout + r.stderr
    caches = []
    for side in ("before", "after"):
        for op in ("relu", "abs"):
            d = tmp_path / "jf/judge" / side / "main" / op
            assert json.loads((d / "run_identity.json").read_text())["timer"] == "none"
            assert re.search(r"^SUCCESS\s+nan\s+nan\s", (d / "run.log").read_text(), re.M), op
            caches.append(json.loads((d / "run_config.json").read_text())["triton_cache_dir"])
    assert len(set(caches)) == 4 and str(shared) not in caches and all(caches)
    s1 = json.loads((tmp_path / "jf/judge_first.json").read_text())["stage1"]
    assert s1["changed"] == [] and s1["controls"] == [] and s1["counts"] == {"NO_TRITON": 2}
    assert s1["unjudged"] == {"main:abs": "screen verdict NO_TRITON", "main:relu": "screen verdict NO_TRITON"}
    assert "nothing changed and no control to time; no stage 2" in r.stdout
    assert not (tmp_path / "jf/timed").exists()


def test_side_c_of_retune_runs_in_the_timed_stage_only(tmp_path):
    r = judge_first(tmp_path, "--ops", "softmax", "relu", "--controls", "1", "--retune")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (tmp_path / "jf/judge/retuned").exists()
    assert sorted(status(tmp_path / "jf/timed/retuned")) == ["relu", "softmax"]


# ---------------------------------------------------------------- --baseline

def plain_judge(tmp_path, out, *args, **env):
    """A baseline: the same nodes judged untimed, no switch (side A as a plain batch)."""
    return batch(tmp_path, "--judge", "--devices", "0", "--batch-dir", tmp_path / out, "--ops", *OPS, *args,
                 ZL_STUB_TRACE=str(tmp_path / "trace"), **{**ENV, **env})


def files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(Path(root).rglob("*"))
            if p.is_file() and p.name != ".batch.lock"}


def test_a_baseline_stands_for_side_a_of_the_untimed_stage(tmp_path):
    assert plain_judge(tmp_path, "base").returncode == 0
    base = tmp_path / "base"
    before = files(base)
    runs = Counter(t[0] for t in trace(tmp_path))
    r = judge_first(tmp_path, "--ops", *OPS, "--controls", "2", "--baseline", base)
    assert r.returncode == 0, r.stdout + r.stderr
    root = tmp_path / "jf"
    summary = json.loads((root / "judge_first.json").read_text())
    # the same judgement as a fresh side A gives
    s1 = summary["stage1"]
    assert s1["changed"] == CHANGED and s1["counts"] == COUNTS
    b = summary["baseline"]
    assert b["linked"] == 5 and b["side_a"] == str(base)
    # the linked sides A ran in the baseline's batch: their CPU is not this stage's
    assert summary["cpu"]["judge"]["side_runs"] == 1 + 5
    # upstream's skip is carried unjudged (no side run here); a failure runs side A fresh
    assert b["carried"] == {"main:zl_skipped": "SKIP"} and b["fresh"] == {"main:exp": "baseline FAIL"}
    assert s1["unjudged"]["main:zl_skipped"].startswith("side A SKIP")
    assert f"baseline={base / 'main/zl_skipped'}" in s1["unjudged"]["main:zl_skipped"]
    # side A of a linked node is the baseline's files (hard links), never rerun; side B replays it
    linked = root / "judge/before/main/softmax"
    assert os.stat(linked / "run.log").st_ino == os.stat(base / "main/softmax/run.log").st_ino
    assert (linked / ".baseline").read_text().strip() == str(base / "main/softmax")
    assert "baseline=" in status(root / "judge/before")["softmax"]["notes"]
    replay = {t[0]: w[len("replay="):] for t in trace(tmp_path) for w in t if w.startswith("replay=")
              and "/jf/judge/" in w}
    assert replay == {op: f"{root}/judge/before/main/{op}" for op in ("abs", "amax", "gelu_backward", "relu", "softmax")}
    again = Counter(t[0] for t in trace(tmp_path)) - runs
    to_time = {n.split(":")[1] for n in s1["changed"] + s1["controls"]}
    for op in ("softmax", "gelu_backward", "relu", "abs", "amax"):   # B judged; A and B timed
        assert again[op] == 1 + 2 * (op in to_time), (op, again)
    # every timed node checked the baseline against a fresh side A: the same code
    assert sorted(summary["baseline"]["check"]["checked"]) == sorted(s1["changed"] + s1["controls"])
    assert summary["baseline"]["check"]["drift"] == {}
    assert "fresh side A compiled the baseline's code" in r.stdout
    assert files(base) == before       # nothing written into the baseline
    # a resume keeps the recorded baseline and redoes nothing that finished
    r = judge_first(tmp_path, "--resume", "--controls", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    # a node whose side A ran here is never swapped for the baseline's, even once the baseline has it
    rows = (base / "ops_status.csv").read_text().splitlines()
    (base / "ops_status.csv").write_text("\n".join(
        ln.replace(",FAIL,", ",PASS,") if ",exp," in ln else ln for ln in rows) + "\n")
    (base / "main/exp/.complete").write_text("PASS\n")
    assert status(base)["exp"]["status"] == "PASS"
    r = judge_first(tmp_path, "--resume", "--controls", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (root / "judge/before/main/exp/.baseline").exists()
    fresh = json.loads((root / "judge_first.json").read_text())["baseline"]["fresh"]
    assert fresh["main:exp"] == "side A ran here in an earlier call"
    r = judge_first(tmp_path, "--resume", "--controls", "2", "--baseline", tmp_path / "other")
    assert r.returncode == 2 and f"--baseline {base}; this call gives ZL_X with --controls 2 and --baseline" in r.stderr


def test_a_baseline_timeout_is_carried_unless_the_screen_allows_more_time(tmp_path):
    """A node that timed out in the baseline ends unjudged without a side run here, as a fresh
    side A would (a timeout is never retried); a screen with a larger --op-timeout reruns it."""
    hang = dict(ZL_STUB_PLAN="exp=hang,zl_skipped=skip")
    assert plain_judge(tmp_path, "base", "--op-timeout", "3", **hang).returncode == 0
    assert status(tmp_path / "base")["exp"]["status"] == "TIMEOUT"
    runs = Counter(t[0] for t in trace(tmp_path))
    r = judge_first(tmp_path, "--ops", *OPS, "--controls", "1", "--op-timeout", "3", "--baseline",
                    tmp_path / "base", **hang)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((tmp_path / "jf/judge_first.json").read_text())
    assert summary["baseline"]["carried"] == {"main:exp": "TIMEOUT", "main:zl_skipped": "SKIP"}
    assert summary["baseline"]["fresh"] == {} and summary["baseline"]["linked"] == 5
    assert (Counter(t[0] for t in trace(tmp_path)) - runs)["exp"] == 0       # never started here
    assert summary["stage1"]["unjudged"]["main:exp"].startswith("side A TIMEOUT")
    assert status(tmp_path / "jf/judge/after")["exp"]["status"] == "NOT_RUN"
    assert "1 SKIP carried (not judged), 1 TIMEOUT carried (not judged)" in r.stdout
    # more time than the baseline had: the node runs side A fresh, the reason on record
    r = batch(tmp_path, "--switch", "ZL_X", "--judge-first", "--devices", "0", "--batch-dir", tmp_path / "jf4",
              "--ops", *OPS, "--controls", "1", "--op-timeout", "4", "--baseline", tmp_path / "base",
              ZL_STUB_TRACE=str(tmp_path / "trace"), **{**ENV, **hang})
    assert r.returncode == 0, r.stdout + r.stderr
    fresh = json.loads((tmp_path / "jf4/judge_first.json").read_text())["baseline"]["fresh"]
    assert fresh == {"main:exp": "baseline TIMEOUT at --op-timeout 3 s; this screen allows 4 s"}
    assert status(tmp_path / "jf4/judge/before")["exp"]["status"] == "TIMEOUT"
    assert "CELL_TIMEOUT op=exp" in (tmp_path / "jf4/judge/before/main/exp/run.log").read_text()
    # a baseline run two to a device: a screen running one at a time gives the node its chance
    assert plain_judge(tmp_path, "base2", "--op-timeout", "3", "--share-device", "2", **hang).returncode == 0
    for share, out in (("1", "jf6"), ("2", "jf7")):
        r = batch(tmp_path, "--switch", "ZL_X", "--judge-first", "--devices", "0", "--batch-dir", tmp_path / out,
                  "--ops", "exp", "--controls", "1", "--op-timeout", "3", "--judge-share", share,
                  "--baseline", tmp_path / "base2", ZL_STUB_TRACE=str(tmp_path / "trace"), **{**ENV, **hang})
        assert r.returncode == 0, r.stdout + r.stderr
    fresh = json.loads((tmp_path / "jf6/judge_first.json").read_text())["baseline"]["fresh"]
    assert fresh == {"main:exp": "baseline TIMEOUT at 2 case(s) per device; this screen runs 1"}
    assert json.loads((tmp_path / "jf7/judge_first.json").read_text())["baseline"]["carried"] == {"main:exp": "TIMEOUT"}
    # a baseline whose batch.json does not record its --op-timeout: never carried
    record = json.loads((tmp_path / "base/batch.json").read_text())
    del record["op_timeout_s"]
    (tmp_path / "base/batch.json").write_text(json.dumps(record))
    r = batch(tmp_path, "--switch", "ZL_X", "--judge-first", "--devices", "0", "--batch-dir", tmp_path / "jf5",
              "--ops", "exp", "--controls", "1", "--op-timeout", "3", "--baseline", tmp_path / "base",
              ZL_STUB_TRACE=str(tmp_path / "trace"), **{**ENV, **hang})
    assert r.returncode == 0, r.stdout + r.stderr
    fresh = json.loads((tmp_path / "jf5/judge_first.json").read_text())["baseline"]["fresh"]
    assert fresh == {"main:exp": "baseline TIMEOUT under an --op-timeout its batch.json does not record"}


def test_a_baseline_that_does_not_reproduce_side_a_is_caught(tmp_path):
    """A baseline run with the switch on (exported in the shell) reads NO_IR_DIFF against side B
    everywhere; the timed stage's fresh side A shows it, and the batch exits 5. A pair whose
    identities differ (another GPU model) is BASELINE_MISMATCH with the field named."""
    assert plain_judge(tmp_path, "base", ZL_X="1").returncode == 0
    ident = tmp_path / "base/main/relu/run_identity.json"
    ident.write_text(json.dumps(dict(json.loads(ident.read_text()), device_name="NVIDIA H100")))
    r = judge_first(tmp_path, "--ops", *OPS, "--baseline", tmp_path / "base")
    assert r.returncode == 5, r.stdout + r.stderr
    summary = json.loads((tmp_path / "jf/judge_first.json").read_text())
    s1 = summary["stage1"]
    assert s1["changed"] == [] and s1["counts"]["BASELINE_MISMATCH"] == 1
    assert s1["unjudged"]["main:relu"] == ("screen verdict BASELINE_MISMATCH: device_name: baseline "
                                           "'NVIDIA H100', side B '<absent>'")
    check = summary["baseline"]["check"]
    assert check["drift"] == {"main:gelu_backward": "IR_CHANGED@ttgir", "main:softmax": "IR_CHANGED@ttgir"}
    assert "!!! baseline drift: main:softmax" in r.stdout and "stage 1's verdicts are void" in r.stdout


def test_baseline_refusals_exit_2(tmp_path):
    assert plain_judge(tmp_path, "f32", "--dtypes", "float32").returncode == 0
    r = judge_first(tmp_path, "--ops", "relu", "--baseline", tmp_path / "f32", "--dtypes", "float16")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "cannot stand for side A" in r.stderr and "dtypes: baseline 'float32', this call 'float16'" in r.stderr
    other = batch(tmp_path, "--switch", "ZL_Y", "--judge", "--devices", "0", "--ops", "relu",
                  "--batch-dir", tmp_path / "y", **ENV)
    assert other.returncode == 0, other.stdout + other.stderr
    r = judge_first(tmp_path, "--ops", "relu", "--baseline", tmp_path / "y")
    assert r.returncode == 2 and "screens ZL_Y: its side A ran with ZL_Y=0" in r.stderr
    assert plain_judge(tmp_path, "old").returncode == 0       # written before the toolchain was
    record = json.loads((tmp_path / "old/batch.json").read_text())
    del record["conditions"]["toolchain"]
    (tmp_path / "old/batch.json").write_text(json.dumps(record))
    r = judge_first(tmp_path, "--ops", "relu", "--baseline", tmp_path / "old")
    assert r.returncode == 2 and "toolchain.python: baseline '<unset>'" in r.stderr
    assert "the record predates the toolchain section" in r.stderr
    del record["conditions"]["ir_collection"]      # and IR collected under rules 1
    (tmp_path / "old/batch.json").write_text(json.dumps(record))
    r = judge_first(tmp_path, "--ops", "relu", "--baseline", tmp_path / "old")
    assert r.returncode == 2 and "ir_collection: baseline '<unset>', this call 2" in r.stderr
    assert "the record predates the toolchain, ir_collection sections" in r.stderr
    record = json.loads((tmp_path / "f32/batch.json").read_text())   # measured on another GPU model
    record["conditions"]["device"] = {"models": ["NVIDIA H100 (test)"]}
    (tmp_path / "f32/batch.json").write_text(json.dumps(record))
    r = judge_first(tmp_path, "--ops", "relu", "--baseline", tmp_path / "f32", "--dtypes", "float32")
    assert r.returncode == 2 and "device.models: baseline ['NVIDIA H100 (test)'], this call " in r.stderr
    r = judge_first(tmp_path, "--ops", "relu", "--baseline", tmp_path / "nothing")
    assert r.returncode == 2 and "no readable batch.json" in r.stderr
    r = batch(tmp_path, "--switch", "ZL_X", "--ops", "relu", "--devices", "0", "--baseline", tmp_path / "f32")
    assert r.returncode == 2 and "--baseline belong to --judge-first" in r.stderr
    r = judge_first(tmp_path, "--ops", "relu", "--baseline", tmp_path / "f32", "--controls", "0")
    assert r.returncode == 2 and "give --controls N >= 1" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_timed_baseline_stands_for_side_a_but_not_one_under_another_compiler_setting(tmp_path):
    """Stage 1 judges: a timed plain batch's side A compiled and computed what an untimed one
    would (ZL_JUDGE_ONLY is not compared); a compiler knob the baseline's cases inherited is."""
    timed = batch(tmp_path, "--devices", "0", "--batch-dir", tmp_path / "timed", "--ops", "relu",
                  ZL_STUB_TRACE=str(tmp_path / "trace"), **ENV)
    assert timed.returncode == 0, timed.stdout + timed.stderr
    r = judge_first(tmp_path, "--ops", "relu", "--baseline", tmp_path / "timed")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((tmp_path / "jf/judge_first.json").read_text())["baseline"]["linked"] == 1
    r = judge_first(tmp_path, "--ops", "relu", "--baseline", tmp_path / "timed", "--batch-dir",
                    tmp_path / "jf2", MLIR_ENABLE_DUMP="1")
    assert r.returncode == 2 and "compiler_env.MLIR_ENABLE_DUMP: baseline '<unset>', this call '1'" in r.stderr


def test_a_baseline_of_another_dtype_fallback_is_refused(tmp_path):
    """A baseline measured under --dtype-fallback all stands for no side A under first (and the
    other way round): abs measured every dtype it declares there, its first one here."""
    env = dict(ZL_STUB_PLAN="abs=dtype")
    for out, extra in (("all", ()), ("first", ("--dtype-fallback", "first"))):
        r = batch(tmp_path, "--judge", "--devices", "0", "--batch-dir", tmp_path / out, "--ops", "abs", "relu",
                  "--dtypes", "float16", *extra, **{**ENV, **env})
        assert r.returncode == 0, r.stdout + r.stderr
    r = judge_first(tmp_path, "--ops", "abs", "relu", "--dtypes", "float16", "--dtype-fallback", "first",
                    "--baseline", tmp_path / "all", **env)
    assert r.returncode == 2 and "cannot stand for side A" in r.stderr, r.stdout + r.stderr
    assert "dtype_fallback: baseline '<unset>', this call 'first'" in r.stderr
    assert not (tmp_path / "jf" / "judge_first.json").exists()
    r = judge_first(tmp_path, "--ops", "abs", "relu", "--dtypes", "float16", "--baseline", tmp_path / "first", **env)
    assert r.returncode == 2 and "dtype_fallback: baseline 'first', this call '<unset>'" in r.stderr
    # the same policy: the baseline's side A is taken, abs's measured dtype with it
    r = judge_first(tmp_path, "--ops", "abs", "relu", "--dtypes", "float16", "--dtype-fallback", "first",
                    "--controls", "1", "--baseline", tmp_path / "first", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads((tmp_path / "jf" / "judge_first.json").read_text())
    assert record["baseline"]["linked"] == 2 and record["baseline"]["fresh"] == {}
    judged = status(tmp_path / "jf" / "judge" / "after")
    assert "dtype_fallback=first:int32" in judged["abs"]["notes"].split(";")


# ---------------------------------------------------------------- --rounds

def test_a_baseline_is_not_refused_for_what_its_own_runs_wrote_into_the_flaggems_tree(tmp_path):
    """FlagGems' blas benchmark records a failing shape in FlagTune/ of its cwd (the FlagGems
    root): on an H100 a 200-node baseline's own runs left that behind, and its screen refused
    it as another tree. Those files are no part of the tree's identity; a new source file is,
    and the refusal names it, also against a baseline recorded before the list of paths."""
    fg = tmp_path / "fg"
    shutil.copytree(FAKE_FLAGGEMS_DIR, fg, ignore=shutil.ignore_patterns("__pycache__"))
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "one")):
        subprocess.run(["git", "-C", str(fg), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True)
    env = {**ENV, "ZL_STUB_PLAN": "relu=errshape", "FLAGGEMS_DIR": str(fg)}
    base = tmp_path / "base"
    r = batch(tmp_path, "--judge", "--devices", "0", "--batch-dir", base, "--ops", "relu", "softmax", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    left = subprocess.run(["git", "-C", str(fg), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, check=True).stdout
    assert left.splitlines() == ["?? FlagTune/.error_output.lock", "?? FlagTune/error_shape.yaml"]
    r = judge_first(tmp_path, "--ops", "relu", "softmax", "--controls", "1", "--baseline", base, **env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((tmp_path / "jf/judge_first.json").read_text())["baseline"]["linked"] == 2

    def screen(name):
        return batch(tmp_path, "--switch", "ZL_X", "--judge-first", "--devices", "0", "--batch-dir",
                     tmp_path / name, "--ops", "relu", "--baseline", base, **env)

    (fg / "src" / "new_op.py").write_text("")
    r = screen("jf2")
    assert r.returncode == 2 and "cannot stand for side A" in r.stderr, r.stdout + r.stderr
    assert "flaggems.main.worktree: baseline 'git-sha256:" in r.stderr
    assert "(only in this call: src/new_op.py)" in r.stderr and "FlagTune" not in r.stderr
    record = json.loads((base / "batch.json").read_text())      # written before the list of paths
    for key in ("changed", "changed_total"):
        del record["conditions"]["flaggems"]["main"][key]
    (base / "batch.json").write_text(json.dumps(record))
    r = screen("jf3")
    assert r.returncode == 2
    assert ("(baseline's record predates the list of changed paths; this call changes src/new_op.py)"
            in r.stderr)
    (fg / "src" / "new_op.py").unlink()
    r = screen("jf4")
    assert r.returncode == 0, r.stdout + r.stderr


def test_rounds_apply_to_the_timed_stage_only_and_a_resume_keeps_them(tmp_path):
    import shutil
    r = judge_first(tmp_path, "--ops", "softmax", "relu", "--controls", "1", "--rounds", "2",
                    ZL_STUB_PICKS="relu=same")
    assert r.returncode == 0, r.stdout + r.stderr
    root = tmp_path / "jf"
    assert not list((root / "judge").glob("r2_*"))
    assert "rounds" not in json.loads((root / "judge/batch.json").read_text())["conditions"]
    assert json.loads((root / "timed/batch.json").read_text())["conditions"]["rounds"] == 2
    assert sorted(status(root / "timed/r2_B")) == sorted(status(root / "timed/r2_A")) == ["relu", "softmax"]
    assert json.loads((root / "judge_first.json").read_text())["rounds"] == 2
    # the report of the timed stage carries each node's rounds
    rep = json.loads((root / "report.json").read_text())
    assert rep["rounds"]["nodes"] == ["softmax", "relu"] and rep["rounds"]["not_analysed"] == {}
    assert {o["op"]: o["rounds"]["rounds"] for o in rep["ops"]} == {"softmax": 2, "relu": 2}
    calls = len(trace(tmp_path))
    r = judge_first(tmp_path, "--resume", "--controls", "1", "--rounds", "3", ZL_STUB_PICKS="relu=same")
    assert r.returncode == 2 and "the batch times --rounds 2; this call gives --rounds 3" in r.stderr
    r = judge_first(tmp_path, "--resume", "--controls", "1", ZL_STUB_PICKS="relu=same")
    assert r.returncode == 0 and len(trace(tmp_path)) == calls, r.stdout + r.stderr
    # a stage 2 not started yet (here: removed) gets the recorded rounds from judge_first.json
    shutil.rmtree(root / "timed")
    r = judge_first(tmp_path, "--resume", "--controls", "1", ZL_STUB_PICKS="relu=same")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((root / "timed/batch.json").read_text())["conditions"]["rounds"] == 2
    assert sorted(status(root / "timed/r2_A")) == ["relu", "softmax"]


def test_the_report_of_a_judge_first_batch_without_a_timed_stage_exits_2(tmp_path):
    root = tmp_path / "jf"
    root.mkdir()
    (root / "judge_first.json").write_text(json.dumps({"switch": "ZL_X", "stage1": {"changed": []}}))
    r = subprocess.run([sys.executable, str(REPO_ROOT / "batch_summary.py"), "--screen", str(root)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "judge-first batch without a timed stage to report" in r.stderr


def test_one_budget_covers_both_stages_of_a_call(tmp_path):
    """--budget-s bounds the call, not each stage: stage 2 starts only what can end within the
    seconds stage 1 left (an H100 screen's stage 2 restarted the clock and ran past the limit
    its caller had sized the budget for)."""
    # each case reserves 2 sides x --op-timeout 4 + --kill-grace 0.5 + 5 = 13.5 s; stage 1's one
    # case sleeps 3.5 s per side, so at least 7 s of the 20 s are gone when stage 2 would start
    r = judge_first(tmp_path, "--ops", "softmax", "--controls", "0", "--op-timeout", "4", "--kill-grace", "0.5",
                    "--budget-s", "20", ZL_STUB_PLAN="softmax=slow", ZL_STUB_SLOW_S="3.5")
    assert r.returncode == 3, r.stdout + r.stderr
    left = re.search(r"judge-first: stage 2 gets the (\d+) s left of --budget-s 20", r.stdout)
    assert left and int(left.group(1)) <= 13, r.stdout
    summary = json.loads((tmp_path / "jf/judge_first.json").read_text())
    assert summary["stage1"]["changed"] == ["main:softmax"] and summary["stage2"]["exit"] == 3
    assert status(tmp_path / "jf/timed/after")["softmax"]["status"] == "PENDING"
    assert "case(s) not run; continue with" in r.stdout
    # the next call, without a budget, times it
    r = judge_first(tmp_path, "--resume", "--controls", "0", ZL_STUB_PLAN="")
    assert r.returncode == 0, r.stdout + r.stderr
    assert status(tmp_path / "jf/timed/after")["softmax"]["status"] == "PASS"
    assert "stage 2 gets the" not in r.stdout
