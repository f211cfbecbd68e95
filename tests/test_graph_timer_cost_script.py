"""benchmarks/graph_timer_cost.py and cost_table_pool.py: the cost table's runs (order,
caches, warmups, stamped lines), its summary tables from stage outputs, and the pooled table
over repetitions (no GPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COST = ROOT / "benchmarks" / "graph_timer_cost.py"
POOL = ROOT / "benchmarks" / "cost_table_pool.py"


def _cost():
    """graph_timer_cost.py as a module."""
    spec = importlib.util.spec_from_file_location("graph_timer_cost", COST)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _summary(work, out) -> str:
    """graph_timer_cost.py summary run as a command (exit 0 required) -> the cost.md it wrote."""
    proc = subprocess.run([sys.executable, str(COST),
                           "summary", "--work", str(work), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return (out / "cost.md").read_text()


def test_summary_tables_from_stage_outputs(tmp_path):
    """summary: ratios, A/A and cold/warm from raw JSON."""
    row = lambda ms: {"op": "clamp", "dtype": "torch.float16", "status": "SUCCESS",  # noqa: E731
                      "torch_ms": 0.01, "gems_ms": ms, "speedup": 1.0, "detail": "[64, 64]"}
    runs = [{"op": "clamp", "kind": "upstream", "rc": 0, "wall_s": 20.0, "pytest_s": 10.0,
             "rows": [row(0.010)], "phases": {"startup_s": 8.0, "session_s": 10.5, "end_s": 1.5}},
            {"op": "clamp", "kind": "before", "rc": 0, "wall_s": 27.0, "pytest_s": 17.0,
             "rows": [row(0.010)], "fallback_markers": 0},
            {"op": "clamp", "kind": "after1", "rc": 0, "wall_s": 21.0, "pytest_s": 10.5,
             "rows": [row(0.010)], "fallback_markers": 0,
             "costs": {"timer_warmup_s": 0.25, "timer_graph_s": 3.5, "results_s": 0.6},
             "phases": {"startup_s": 7.5, "session_s": 11.0, "end_s": 2.5}},
            {"op": "clamp", "kind": "after2", "rc": 0, "wall_s": 21.0, "pytest_s": 10.4,
             "rows": [row(0.0101)], "fallback_markers": 0},
            {"op": "clamp", "kind": "before2", "rc": 0, "wall_s": 27.0, "pytest_s": 17.0,
             "rows": [row(0.0102)], "fallback_markers": 0}]
    work = tmp_path / "w"
    work.mkdir()
    (work / "wall.json").write_text(json.dumps(runs))
    (work / "cold.json").write_text(json.dumps({"device": "H200", "flush_bytes": 120 << 20,
        "cases": [{"op": "relu", "shape": [4096, 4096], "cupti_warm_ms": 0.010, "cupti_span_warm_ms": 0.009,
                   "cupti_cold_ms": 0.020, "graph_warm_ms": 0.0101, "graph_cold_ms": 0.0204}]}))
    md = _summary(work, tmp_path / "o")
    assert ("| clamp | 20.0 (10.0) | 27.0 (17.0) | 21.0 (10.5) | 21.0 (10.4) | 1.05, 1.04 | 1.05, 1.05 "
            "| 1.70 | 1.00 (1.00) | 2.00 (2.00) |") in md
    assert "| clamp | after1 | 1.0 | 0.250 | 3.500 | - | 0.600 | - | - | - | - | - | - |\n" in md
    # start-up + end: 10.0 s against upstream's 9.5 s
    assert "| clamp | after1 | 21.0 | 7.50 | 11.00 | 2.50 | +0.50 |" in md
    assert "| clamp | upstream | 20.0 | 8.00 | 10.50 | 1.50 | +0.00 |" in md
    assert ("| relu | [4096, 4096] | 0 | 10.00 (9.00) | 20.00 (-) | 10.10 | 20.40 | 1.010 (1.122) "
            "| 1.020 (-) | +102.0 |") in md


@pytest.mark.parametrize("extra, message", [
    (["--runs", "upstream,nope"], "--runs: unknown ['nope']"),
    (["--shape-file", "/no/such.yaml"], "--shape-file /no/such.yaml: no such file"),
])
def test_wall_refuses_bad_arguments_with_exit_2(tmp_path, extra, message):
    proc = subprocess.run([sys.executable, str(COST), "wall",
                           "--work", str(tmp_path / "w"), "--ops", "abs", "--flaggems-dir", str(tmp_path)]
                          + extra, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("name, text", [("wall.json", "[1]"), ("wall.json", "{bad"), ("cold.json", "{}")])
def test_a_summary_of_files_no_stage_wrote_exits_2_named(tmp_path, name, text):
    work = tmp_path / "w"
    work.mkdir()
    (work / name).write_text(text)
    proc = subprocess.run([sys.executable, str(COST), "summary", "--work", str(work), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "is not what the wall and cold stages write" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_summary_adds_the_in_graph_cupti_table_and_keeps_capture_errors(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "cold.json").write_text(json.dumps({"device": "H200", "flush_bytes": 120 << 20, "cases": [
        {"op": "sum", "shape": [4096, 4096], "kernels": ["k1", "k2"], "cupti_warm_ms": 0.0066,
         "cupti_cold_ms": 0.0136, "graph_warm_ms": 0.0084, "graph_cold_ms": 0.0157,
         "graph_cupti": {"warm": {"kernel_ms": 0.0066, "span_ms": 0.0081, "period_ms": 0.0084},
                         "cold": {"error": "RuntimeError('capture')"}}}]}))
    md = _summary(work, tmp_path / "o")
    assert "| sum | 6.60 (8.10) | RuntimeError('capture') | 1.037 | - | 8.40 | 1.000 | - | - | - | - |" in md
    # the event timing of the same replay: warm against the graph timer, cold net of flushes
    case = json.loads((work / "cold.json").read_text())
    case["cases"][0]["graph_cupti"] = {
        "warm": {"kernel_ms": 0.0066, "span_ms": 0.0081, "period_ms": 0.0084, "event_ms": 0.0080,
                 "event_traced_ms": 0.0082},
        "cold": {"kernel_ms": 0.0136, "span_ms": 0.0139, "period_ms": 0.03, "event_ms": 0.04,
                 "event_traced_ms": 0.041, "event_net_ms": 0.0150}}
    (work / "cold.json").write_text(json.dumps(case))
    md = _summary(work, tmp_path / "o2")
    assert ("| sum | 6.60 (8.10) | 13.60 (13.90) | 1.037 | 1.129 | 8.40 | 1.000 | 8.00 (8.20) | 1.050 | "
            "15.00 | 1.047 |") in md


def test_every_run_gets_cold_triton_and_flaggems_caches(tmp_path, monkeypatch):
    """With a shared FlagGems tuner store, upstream (first) filled it and the zl_bench runs after
    it skipped mm's sweep on the H200. Each run must get its own caches, whatever the kind."""
    mod = _cost()
    seen = []

    def fake_run(cmd, cwd, env, timeout_s):
        seen.append(env)
        return 0, [(0.5, "=== test session starts ===\n"), (1.5, "=== 1 passed in 1.00s ===\n")]

    monkeypatch.setattr(mod, "run_stamped", fake_run)
    monkeypatch.setenv("FLAGGEMS_CACHE_DIR", "/shared/store")
    monkeypatch.setenv("ZL_ISOLATE_TUNER_CACHE", "1")
    args = types.SimpleNamespace(flaggems_dir=tmp_path, shape_file=None, run_timeout_s=5)
    for kind in ("upstream", "before", "after1"):
        mod.run_once(kind, "mm", "mm", args, tmp_path / kind)
    dirs = [e["FLAGGEMS_CACHE_DIR"] for e in seen]
    assert len(set(dirs)) == 3 and all(d.startswith(str(tmp_path)) for d in dirs)
    assert len({e["TRITON_CACHE_DIR"] for e in seen}) == 3
    assert all("ZL_ISOLATE_TUNER_CACHE" not in e for e in seen[1:])   # zl runs: default store mode
    assert "SHAPE_FILE" not in seen[1] and "--shape_file" not in str(seen)


def test_run_order_alternates_upstream_and_keeps_replays_after_records():
    mod = _cost()
    runs = ["upstream", "after1", "after2"]
    assert mod.run_order(runs, 0) == ["upstream", "after1", "after2"]
    assert mod.run_order(runs, 1) == ["after1", "upstream", "after2"]
    full = ["upstream", "before", "after1", "after2", "before2"]
    odd = mod.run_order(full, 3)
    assert odd.index("upstream") == odd.index("after1") + 1
    assert odd.index("after2") > odd.index("after1") and odd.index("before2") > odd.index("before")
    assert mod.run_order(["after1", "after2"], 1) == ["after1", "after2"]


def test_runs_are_stamped_per_line_and_split_into_phases(tmp_path):
    """On the H200 zl_bench runs were up to 3.9 s slower than upstream outside pytest's own
    time. Each line's arrival time splits a run's wall into start-up, session and end."""
    mod = _cost()
    script = ("import sys, time; print('prep', flush=True); time.sleep(0.3); "
              "print('=== test session starts ===', flush=True); time.sleep(0.4); "
              "print('=== 1 passed in 0.40s ===', flush=True); print('late', file=sys.stderr, flush=True); "
              "time.sleep(0.3)")
    t0 = time.monotonic()
    rc, lines = mod.run_stamped([sys.executable, "-c", script], tmp_path, dict(os.environ), 20)
    wall = time.monotonic() - t0
    assert rc == 0 and [line.strip() for _, line in lines][-1] == "late"   # stderr merged
    ph = mod.phases(lines, wall)
    # lower bounds: each sleep lands in its own phase; upper bounds only catch a gross mix-up
    # (a loaded machine may add seconds to the interpreter's start and exit)
    assert 0.3 <= ph["startup_s"] < 10 and 0.35 <= ph["session_s"] < 10 and 0.25 <= ph["end_s"] < 10
    assert mod.phases(lines[:1], wall) == {}                  # died before its session
    # 5 s: the interpreter must start and print before the limit, on a loaded machine too
    rc, lines = mod.run_stamped([sys.executable, "-c", "import time; print('x', flush=True); time.sleep(30)"],
                                tmp_path, dict(os.environ), 5)
    assert rc == "timeout" and lines and lines[0][1] == "x\n"


def test_pool_takes_medians_over_calls_and_filters_ops(tmp_path):
    """Two calls: medians per kind, after1 against upstream, and an operator
    left out of the call made before a fix that changed it."""
    def call(name, runs):
        d = tmp_path / name
        d.mkdir()
        (d / "wall.json").write_text(json.dumps(
            [{"op": op, "kind": kind, "rc": 0, "wall_s": w, "pytest_s": p} for op, kind, w, p in runs]))
        return str(d)
    one = call("one", [("clamp", "upstream", 16.0, 6.0), ("clamp", "after1", 20.0, 7.0),
                       ("clamp", "after2", 99.0, 99.0), ("sbo", "upstream", 15.0, 6.0),
                       ("sbo", "after1", 30.0, 11.0)])
    two = call("two", [("clamp", "upstream", 18.0, 6.0), ("clamp", "after1", 18.0, 6.6),
                       ("sbo", "upstream", 16.0, 7.0), ("sbo", "after1", 16.0, 6.0)])
    out = tmp_path / "pooled.md"
    proc = subprocess.run([sys.executable, str(POOL),
                           "--out", str(out), f"{one}:clamp", two], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    md = out.read_text()
    # clamp: upstream 17.0 (6.00), after1 19.0 (6.80); after2 (a replay) never pooled; each
    # call's own ratios (pytest 7/6 and 6.6/6) and their medians
    assert ("| clamp | 2 | 17.0 (6.00) | 19.0 (6.80) | 1.13 | 1.12 | 1.25, 1.00 | 1.17, 1.10 | "
            "1.13 (1.12) | - |") in md
    # sbo only from the second call
    assert "| sbo | 1 | 16.0 (7.00) | 16.0 (6.00) | 0.86 | 1.00 | 1.00 | 0.86 | 0.86 (1.00) | - |" in md
    bad = subprocess.run([sys.executable, str(POOL),
                          "--out", str(out), str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr


def test_pool_gives_the_median_ratio_an_interval_from_three_pairs(tmp_path):
    """Per-pair pytest ratios 0.9 ... 1.3: the interval holds the median and stays inside the
    ratios' range; a tight set gets a narrow interval."""
    def calls(op, ratios):
        for i, r in enumerate(ratios):
            d = tmp_path / f"{op}{i}"
            d.mkdir()
            (d / "wall.json").write_text(json.dumps([
                {"op": op, "kind": "upstream", "rc": 0, "wall_s": 10.0, "pytest_s": 5.0},
                {"op": op, "kind": "after1", "rc": 0, "wall_s": 10.0, "pytest_s": 5.0 * r}]))
            yield str(d)
    wide, tight = [0.9, 1.0, 1.05, 1.1, 1.2, 1.3], [1.04, 1.05, 1.05, 1.06]
    out = tmp_path / "pooled.md"
    proc = subprocess.run([sys.executable, str(POOL),
                           "--out", str(out), *calls("a", wide), *calls("b", tight)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cells = {row.split("|")[1].strip(): row.split("|")[-2].strip()
             for row in out.read_text().splitlines()[2:]}
    (alo, ahi), (blo, bhi) = (map(float, cells[k].split("-")) for k in ("a", "b"))
    assert 0.9 <= alo <= 1.075 <= ahi <= 1.3 and ahi - alo >= 0.1
    assert 1.04 <= blo <= 1.05 <= bhi <= 1.06


def test_mid_runs_get_their_warmup_and_replay_mid1(tmp_path, monkeypatch):
    """mid1/mid2: the A/A pair at a third warmup budget, beside 25 ms and the caller's."""
    mod = _cost()
    seen = []
    monkeypatch.setattr(mod, "run_stamped", lambda cmd, cwd, env, timeout_s: seen.append(env) or (0, []))
    args = types.SimpleNamespace(flaggems_dir=tmp_path, shape_file=None, run_timeout_s=5, mid_warmup_ms=250.0)
    for kind in ("after1", "mid1", "before"):
        mod.run_once(kind, "softmax", "softmax", args, tmp_path / kind)
    mod.run_once("mid2", "softmax", "softmax", args, tmp_path / "mid2", replay_from=tmp_path / "mid1" / "zl")
    assert [e.get("ZL_GRAPH_WARMUP_MS") for e in seen] == [None, "250", "caller", "250"]
    assert seen[3]["REPLAY_FROM"] == str(tmp_path / "mid1" / "zl") and "REPLAY_FROM" not in seen[1]


def test_summary_sets_the_three_warmups_a_a_side_by_side(tmp_path):
    row = lambda ms: {"op": "softmax", "dtype": "torch.float16", "status": "SUCCESS",  # noqa: E731
                      "torch_ms": 0.01, "gems_ms": ms, "speedup": 1.0, "detail": "[64, 64]"}
    runs = [{"op": "softmax", "kind": k, "rc": 0, "wall_s": 20.0, "pytest_s": p, "rows": [row(ms)]}
            for k, p, ms in (("after1", 8.0, 0.010), ("after2", 8.0, 0.0103), ("mid1", 8.5, 0.010),
                             ("mid2", 8.5, 0.0101), ("before", 10.0, 0.010), ("before2", 10.0, 0.01002))]
    work = tmp_path / "w"
    work.mkdir()
    (work / "wall.json").write_text(json.dumps(runs))
    md = _summary(work, tmp_path / "o")
    assert "| softmax | 3.00 (3.00) | 1.00 (1.00) | 0.20 (0.20) | 8.0 / 8.5 / 10.0 |" in md


def test_rotation_moves_every_operator_between_odd_and_even_positions():
    """--rotate r starts the six operators r-1 places later, so over repetitions each sits at
    odd and even positions (run_order alternates the side that runs first by position)."""
    mod = _cost()
    first, second, third, seventh = (mod.rotated(list(mod.COST_OPS), r) for r in (1, 2, 3, 7))
    assert first == list(mod.COST_OPS) and sorted(first) == sorted(third)
    assert third[0] == "sum:sum" and third[-1] == "clamp:clamp" and seventh == first
    assert all(first.index(op) % 2 != second.index(op) % 2 for op in first)   # parity flips


def test_wall_refuses_a_rotation_below_1_with_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(COST), "wall", "--work", str(tmp_path / "w"),
                           "--flaggems-dir", str(tmp_path), "--rotate", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--rotate 0" in proc.stderr and "Traceback" not in proc.stderr
