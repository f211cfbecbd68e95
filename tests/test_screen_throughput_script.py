"""benchmarks/screen_throughput.py on the batch stub: one judge-first screen over the nodes,
each stage's figures and stage 1's projection to the inventory computed from what the screen
wrote, resumed across calls, with a baseline's side A left out of the side runs."""

import csv
import json
import subprocess
import sys

from harness.runner import REPO_ROOT, base_env
from test_batch import STUB

TOOL = REPO_ROOT / "benchmarks" / "screen_throughput.py"
OPS = ("softmax", "gelu_backward", "relu", "abs", "amax", "exp", "zl_skipped")
STUB_ENV = dict(ZL_STUB_SWITCH="ZL_X", ZL_STUB_IR_MAP="relu=same,abs=same,amax=same",
                ZL_STUB_PLAN="exp=fail,zl_skipped=skip", ZL_STUB_CPU="1.5,0.5")


def env(tmp_path, **extra):
    return base_env(tmp_path, ZL_RUN_PYTEST=str(STUB), ZL_STUB_STATE=str(tmp_path), ZL_RUNS_ROOT=str(tmp_path / "runs"),
                    **{**STUB_ENV, **extra})


def run(tmp_path, *args, **extra):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], env=env(tmp_path, **extra),
                          capture_output=True, text=True, timeout=300)


def screen(tmp_path, out, *args):
    return run(tmp_path, "--ops", *OPS, "--switch", "ZL_X", "--judge-share", "2", "--controls", "2",
               "--devices", "0", "--out", out, *args)


def test_each_stage_is_measured_and_stage_one_is_projected_to_the_inventory(tmp_path):
    out = tmp_path / "scr"
    r = screen(tmp_path, out)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "screen_throughput.json").read_text())
    record = json.loads((out / "screen" / "judge_first.json").read_text())
    judge, timed = res["stages"]["judge"], res["stages"]["timed"]
    # stage 1: every node on both sides untimed; a failed or skipped side A ends its node
    wall1 = round(sum(w["wall_s"] for w in record["walls"] if w["stage"] == "judge"), 1)
    assert (judge["nodes"], judge["nodes_finished"], judge["side_runs"], judge["wall_s"]) == (7, 7, 12, wall1)
    assert judge["nodes_per_hour"] == round(7 / wall1 * 3600, 1)
    assert judge["side_runs_per_hour"] == round(12 / wall1 * 3600, 1)
    # the stub's CPU line: 1.5 + 0.5 CPU-s per side run
    assert judge["cpu_s_per_side_run"] == 2.0 and judge["cores_busy"] == record["cpu"]["judge"]["cores_busy"]
    # stage 2: the 2 changed nodes and 2 controls, both sides timed
    assert (timed["nodes"], timed["nodes_finished"], timed["side_runs"]) == (4, 4, 8)
    assert res["counts"] == record["stage1"]["counts"] and res["changed"] == ["main:gelu_backward", "main:softmax"]
    assert sorted(res["unjudged"]) == ["main:exp", "main:zl_skipped"] and res["stage2_exit"] == 0
    # the projection: the inventory's node count at stage 1's rate, as run_batch.py lists it
    listed = subprocess.run([sys.executable, str(REPO_ROOT / "run_batch.py"), "--all", "--repo", "main", "--list",
                             "--devices", "0"], env=env(tmp_path), capture_output=True, text=True)
    inventory = sum("\tdevice=" in ln for ln in listed.stdout.splitlines())
    assert res["inventory_nodes"] == inventory > len(OPS)
    assert res["projected_stage1_min"] == round(inventory / judge["nodes_per_hour"] * 60, 1)
    assert res["gpu"] is None                       # no nvidia-smi here: no made-up share
    assert f"Stage 1 projected to the inventory's {inventory} nodes: {res['projected_stage1_min']} min" in r.stdout
    # the slots never idle: 2 slots, each node costing stage 1's case seconds per finished node
    rows = [r for side in ("before", "after") for r in csv.DictReader(open(out / "screen/judge" / side / "ops_status.csv"))
            if r["status"] not in ("NOT_RUN", "PENDING")]
    case_s = sum(int(r["elapsed_ms"]) for r in rows) / 1000
    assert len(rows) == 12 and judge["case_s"] == round(case_s, 1) and judge["case_s_per_node"] == round(case_s / 7, 1)
    assert res["projected_stage1_slots_busy_min"] == round(inventory * judge["case_s_per_node"] / (2 * 3600) * 60, 1)
    assert f"With the 2 slots never idle ({judge['case_s_per_node']} case seconds per node" in r.stdout
    assert res["baseline_use"] is None and "Side A from the baseline" not in r.stdout
    assert "- not judged: main:exp: side A FAIL" in r.stdout and "GPU-busy share over the screen: n/a" in r.stdout
    assert (out / "screen_throughput.md").read_text().strip() == r.stdout.strip()
    # called again: the screen resumes, every call's wall counts
    r = screen(tmp_path, out)
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads((out / "screen_throughput.json").read_text())
    assert again["calls"] == 2 and again["stages"]["judge"]["calls"] == 2
    assert again["stages"]["judge"]["side_runs"] == 12 and again["stages"]["judge"]["wall_s"] >= wall1
    # the report of a moved bundle, running nothing: the same figures
    moved = tmp_path / "bundle"
    out.rename(moved)
    r = run(tmp_path, "--report-only", "--out", moved)
    assert r.returncode == 0, r.stdout + r.stderr
    redo = json.loads((moved / "screen_throughput.json").read_text())
    assert redo["stages"] == again["stages"] and redo["projected_stage1_min"] == again["projected_stage1_min"]
    assert redo["nodes"] == list(OPS)
    # upstream's one process beside it (its stamped log, as run_upstream writes it): a failure is flagged
    ids = {"relu": "benchmark/test_relu.py::test_relu", "softmax": "benchmark/test_softmax.py::test_softmax"}
    (moved / "upstream.json").write_text(json.dumps({"ids": ids, "rc": 1, "wall_s": 4.0, "left_out": []}))
    (moved / "upstream.log").write_text("100.00 start: pytest\n101.00 benchmark/test_relu.py::test_relu \n"
                                        "102.00 PASSED\n103.00 benchmark/test_softmax.py::test_softmax FAILED\n"
                                        "104.00 rc=1\n")
    r = run(tmp_path, "--report-only", "--out", moved)
    up = json.loads((moved / "screen_throughput.json").read_text())["upstream"]
    assert (up["nodes_finished"], up["nodes_passed"], up["first_failed"]) == (2, 1, "softmax")
    assert up["passed_per_hour"] == 900.0 and up["nodes_per_hour"] == 1800.0       # 4 s of wall
    assert "| 4.0 | 2 | 1 | 1800.0 | 900.0 | n/a | n/a | 1 |" in r.stdout
    assert "!!! upstream's one process failed 1 of 2 node(s), the first softmax" in r.stdout


def test_a_baselines_side_a_is_no_side_run_of_the_screen(tmp_path):
    base = tmp_path / "base"
    assert screen(tmp_path, base).returncode == 0
    out = tmp_path / "scr"
    r = screen(tmp_path, out, "--baseline", base / "screen")
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "screen_throughput.json").read_text())
    judge = res["stages"]["judge"]
    # the five nodes whose baseline side A passed are linked (side B runs); zl_skipped's SKIP is
    # carried (no side run); exp's failure runs side A fresh
    assert (judge["nodes_finished"], judge["side_runs"]) == (7, 6) and judge["cpu_s_per_side_run"] == 2.0
    assert res["baseline"] == str((base / "screen").resolve())
    assert res["baseline_use"] == {"linked": 5, "carried": {"main:zl_skipped": "SKIP"}, "fresh": {"main:exp": "baseline FAIL"}}
    assert "Side A from the baseline: 5 linked, 1 carried unjudged (its SKIP or TIMEOUT), 1 run fresh." in r.stdout
    # a bundle that kept no dotfiles (no .baseline marks): the rows still name their baseline case
    for mark in out.rglob(".baseline"):
        mark.unlink()
    r = run(tmp_path, "--report-only", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads((out / "screen_throughput.json").read_text())["stages"]["judge"]
    assert (again["side_runs"], again["case_s"]) == (judge["side_runs"], judge["case_s"])
    assert "side A from the baseline" in r.stdout


def test_a_refused_baseline_exits_4_naming_why_without_a_traceback(tmp_path):
    base = tmp_path / "base"
    assert screen(tmp_path, base).returncode == 0
    out = tmp_path / "scr"
    r = screen(tmp_path, out, "--baseline", base / "screen", "--dtypes", "bfloat16")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "run_batch.py exited 2 before the screen started" in r.stderr and "dtypes" in r.stderr
    assert "Traceback" not in r.stderr and not (out / "screen_throughput.json").exists()


def test_a_screen_cut_by_its_budget_exits_3_and_reports_what_ran(tmp_path):
    out = tmp_path / "scr"
    r = screen(tmp_path, out, "--budget-s", "0.001")
    assert r.returncode == 3, r.stdout + r.stderr
    res = json.loads((out / "screen_throughput.json").read_text())
    assert res["rc"] == 3 and res["counts"] is None and res["stages"]["timed"]["nodes"] == 0
    assert "The screen's last call ended with exit 3." in r.stdout
    assert run(tmp_path, "--report-only", "--out", out).returncode == 3


def test_bad_arguments_exit_2(tmp_path):
    for args, says in ((["--ops", "relu", "--out", tmp_path / "a"], "--switch NAME is required"),
                       (["--all", "--ops", "relu", "--switch", "X", "--out", tmp_path / "a"], "--all runs every node"),
                       (["--switch", "X", "--out", tmp_path / "a"], "no nodes"),
                       (["--report-only", "--out", tmp_path / "a"], "holds no screen")):
        r = run(tmp_path, *args)
        assert r.returncode == 2 and says in r.stderr, (args, r.stderr)
    assert not (tmp_path / "a").exists()
