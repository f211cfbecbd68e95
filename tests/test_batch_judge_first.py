"""run_batch.py --switch NAME --judge-first (zl/batch/judge_first.py) on the batch stub: every
node judged untimed, then only the changed nodes and the A/A controls timed, one summary,
resumable, and its refusals."""

import json
import re
from collections import Counter

from test_batch import batch, status, trace

from zl.batch.judge_first import select

OPS = ("softmax", "gelu_backward", "relu", "abs", "amax", "exp", "zl_skipped")
ENV = dict(ZL_STUB_SWITCH="ZL_X", ZL_STUB_IR_MAP="relu=same,abs=same,amax=same",
           ZL_STUB_PLAN="exp=fail,zl_skipped=skip")


def judge_first(tmp_path, *args, **env):
    return batch(tmp_path, "--switch", "ZL_X", "--judge-first", "--devices", "0", "--batch-dir",
                 tmp_path / "jf", *args, ZL_STUB_TRACE=str(tmp_path / "trace"), **{**ENV, **env})


def test_only_changed_nodes_and_controls_are_timed_after_an_untimed_judgement(tmp_path):
    r = judge_first(tmp_path, "--ops", *OPS, "--controls", "2", "--judge-share", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    root = tmp_path / "jf"
    summary = json.loads((root / "judge_first.json").read_text())
    s1 = summary["stage1"]
    assert s1["changed"] == ["main:gelu_backward", "main:softmax"]
    assert s1["counts"] == {"IR_CHANGED@ttgir": 2, "NO_IR_DIFF": 3, "NO_ROWS": 2}
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
    # one report of the timed stage: every timed node, controls included
    rep = json.loads((root / "report.json").read_text())
    assert (root / "report.html").is_file() and "judge-first report:" in r.stdout
    assert sorted(json.dumps(rep).count(f'"{n.split(":")[1]}"') > 0 for n in to_time) == [True] * len(to_time)
    # a resume redoes nothing: both stages reuse every finished case
    r = judge_first(tmp_path, "--resume", "--controls", "2", "--judge-share", "2")
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
    assert r.returncode == 2 and "--judge-share and --controls belong to --judge-first" in r.stderr
    r = judge_first(tmp_path, "--resume")
    assert r.returncode == 2 and "holds no judge-first batch" in r.stderr
    assert judge_first(tmp_path, "--ops", "relu", "softmax").returncode == 0
    r = judge_first(tmp_path, "--ops", "relu")
    assert r.returncode == 2 and "already holds a judge-first batch; continue it with --resume" in r.stderr
    r = judge_first(tmp_path, "--resume", "--controls", "4")
    assert r.returncode == 2 and "with --controls 10; this call gives ZL_X with --controls 4" in r.stderr
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


# ---------------------------------------------------------------- --rounds

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
