"""benchmarks/timer_noise.py: table parsing, A/A pairing arithmetic, argument errors (no GPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
import types
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("timer_noise", ROOT / "benchmarks" / "timer_noise.py")
tn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tn)

LOG = """\
[timing-plugin] timer=cuda_graph backend=cuda via torch.cuda (... BENCHMARK_DIRECT_NO_CUDAGRAPH ...)
benchmark/test_softmax.py BENCHMARK_DIRECT_NO_CUDAGRAPH op=softmax phase=capture reason=X detail='a'

Operator: softmax  Performance Test (dtype=torch.float16, mode=kernel,level=core)
Status       Torch Latency (ms)    Gems Latency (ms)         Gems Speedup          Size Detail
-----------------------------------------------------------------------------------------------
  [same for all rows] {"n": 2, "fixed": {"1": "1"}}
SUCCESS               0.003011           0.010000               0.301          [torch.Size([4, 64])]
\x1b[32mSUCCESS\x1b[0m               0.047796           0.020000               2.390          [torch.Size([8, 128])]
FAILED                     N/A                N/A                 N/A          [torch.Size([4, 200])]

Operator: softmax  Performance Test (dtype=torch.bfloat16, mode=kernel,level=core)
Status       Torch Latency (ms)    Gems Latency (ms)         Gems Speedup       TFLOPS          Size Detail
-----------------------------------------------------------------------------------------------
SUCCESS               0.005126           0.040000               0.128        1.500          [torch.Size([4, 64])]
.
============================== 1 passed in 3.87s ===============================
"""


def test_parse_tables_reads_every_row_with_dtype_and_detail():
    rows = tn.parse_tables(LOG)
    assert [(r["dtype"], r["status"], r["gems_ms"], r["detail"]) for r in rows] == [
        # the folded table comes back with upstream's own (unfolded) Size Detail
        ("torch.float16", "SUCCESS", 0.01, "[torch.Size([4, 64]), 1]"),
        ("torch.float16", "SUCCESS", 0.02, "[torch.Size([8, 128]), 1]"),
        ("torch.float16", "FAILED", None, "[torch.Size([4, 200]), 1]"),
        ("torch.bfloat16", "SUCCESS", 0.04, "[torch.Size([4, 64])]"),
    ]


def test_parse_tables_of_a_log_without_benchmark_output_is_empty():
    assert tn.parse_tables("ImportError: no module named flag_gems\n") == []


def test_pair_stats_matches_rows_and_measures_abs_delta():
    a = tn.parse_tables(LOG)
    b = tn.parse_tables(LOG.replace("0.020000", "0.021000").replace("0.040000", "0.030000"))
    stats = tn.pair_stats(a, b)
    assert stats["rows_a"] == stats["rows_b"] == 4
    assert stats["matched"] == 3  # the N/A row has no latency to compare
    assert stats["median_pct"] == pytest.approx(5.0)
    assert stats["max_pct"] == pytest.approx(25.0)


def test_pair_stats_counts_lost_rows():
    a = tn.parse_tables(LOG)
    stats = tn.pair_stats(a, a[:1])
    assert (stats["rows_a"], stats["rows_b"], stats["matched"]) == (4, 1, 1)
    assert stats["max_pct"] == 0.0
    assert tn.pair_stats([], []) == {"rows_a": 0, "rows_b": 0, "matched": 0}


def test_check_node_names_the_missing_file_and_function(tmp_path):
    (tmp_path / "benchmark").mkdir()
    (tmp_path / "benchmark" / "test_gelu.py").write_text("def test_gelu_backward():\n    pass\n")
    tn.check_node(tmp_path, "gelu_backward", "gelu")
    with pytest.raises(tn.NodeError, match="test_softmax.py not found"):
        tn.check_node(tmp_path, "softmax", "softmax")
    with pytest.raises(tn.NodeError, match="has no test_gelu_fast"):
        tn.check_node(tmp_path, "gelu_fast", "gelu")


def test_bad_arguments_exit_2_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "timer_noise.py"),
                           "--flaggems-dir", str(tmp_path / "nope"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "is not a directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_op_exits_2(tmp_path):
    (tmp_path / "benchmark").mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "timer_noise.py"),
                           "--flaggems-dir", str(tmp_path), "--ops", "softmax",
                           "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "test_softmax.py not found" in proc.stderr


def _profile_entry(shape, warm_ms, ratios):
    return {"shape": shape, "profiler_warm_ms": warm_ms, "profiler_cold_ms": warm_ms,
            "ratio_to_profiler": ratios}


def test_profile_medians_over_all_shapes_and_over_kernels_of_10us_or_more():
    profile = [
        _profile_entry("[4096, 4096]", 0.0229, {"zl_graph": 1.015, "up_kernel": 1.472}),
        _profile_entry("[64, 512, 512]", 0.0257, {"zl_graph": 0.980, "up_kernel": 3.249}),
        _profile_entry("[1024, 1024, 1024]", 1.0924, {"zl_graph": 1.008, "up_kernel": 0.988}),
        _profile_entry("[64, 64]", 0.0012, {"zl_graph": 1.545, "up_kernel": None}),
    ]
    med = tn.profile_medians(profile)
    assert med["zl_graph"]["all"] == pytest.approx((1.008 + 1.015) / 2)
    assert med["zl_graph"]["ge_10us"] == pytest.approx(1.008)  # the 1.2 us shape is left out
    assert med["up_kernel"]["all"] == pytest.approx(1.472)  # a timer without a figure is skipped
    assert med["zl_direct"] == {"all": None, "ge_10us": None}


def test_render_rewrites_tables_from_an_earlier_json_without_running(tmp_path):
    runs = [{"op": "softmax", "timer": "zl_graph", "run": k, "rc": 0, "rows": [
        {"dtype": "torch.float16", "status": "SUCCESS", "torch_ms": 0.01, "gems_ms": g,
         "detail": "[torch.Size([4, 64])]"}]} for k, g in ((1, 0.020), (2, 0.021))]
    pairs = [{"op": "softmax", "timer": "zl_graph", "rows_a": 1, "rows_b": 1, "matched": 1,
              "median_pct": 5.0, "p90_pct": 5.0, "max_pct": 5.0, "direct_markers": "0/0",
              "poisoned_markers": 0, "rc": "0/0"}]
    profile = [_profile_entry("[4096, 4096]", 0.0229, {"zl_graph": 1.015})]
    src = tmp_path / "old" / "timer_noise.json"
    tn.write_outputs(src.parent, {"dtypes": "float16", "wall_s": 12.0}, runs, pairs, profile)
    out = tmp_path / "new"
    assert tn.main(["--render", str(src), "--out", str(out)]) == 0
    md = (out / "timer_noise.md").read_text()
    assert "| softmax | zl_graph | 1/1 | 1 | 5.00 |" in md
    assert "| median, kernel >= 10 us | | | 1.015 |" in md
    assert (out / "timer_noise_rows.tsv").read_text() == (src.parent / "timer_noise_rows.tsv").read_text()


def test_render_of_a_file_that_is_not_a_timer_noise_json_exits_2(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"meta": {}}')
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "timer_noise.py"),
                           "--render", str(bad), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "not a timer_noise.json" in proc.stderr and "Traceback" not in proc.stderr


def _issue18():
    """docs/validation/scripts/issue18.py as a module."""
    spec = importlib.util.spec_from_file_location("issue18", ROOT / "docs/validation/scripts/issue18.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _issue18_summary(work, out) -> str:
    """issue18.py summary run as a command (exit 0 required) -> the issue18.md it wrote."""
    proc = subprocess.run([sys.executable, str(ROOT / "docs/validation/scripts/issue18.py"),
                           "summary", "--work", str(work), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return (out / "issue18.md").read_text()


def test_issue18_summary_tables_from_stage_outputs(tmp_path):
    """docs/validation/scripts/issue18.py summary: ratios, A/A and cold/warm from raw JSON."""
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
    md = _issue18_summary(work, tmp_path / "o")
    assert ("| clamp | 20.0 (10.0) | 27.0 (17.0) | 21.0 (10.5) | 21.0 (10.4) | 1.05, 1.04 | 1.05, 1.05 "
            "| 1.70 | 1.00 (1.00) | 2.00 (2.00) |") in md
    assert "| clamp | after1 | 1.0 | 0.250 | 3.500 | - | 0.600 | - | - | - | - | - |\n" in md
    # start-up + end: 10.0 s against upstream's 9.5 s
    assert "| clamp | after1 | 21.0 | 7.50 | 11.00 | 2.50 | +0.50 |" in md
    assert "| clamp | upstream | 20.0 | 8.00 | 10.50 | 1.50 | +0.00 |" in md
    assert ("| relu | [4096, 4096] | 0 | 10.00 (9.00) | 20.00 (-) | 10.10 | 20.40 | 1.010 (1.122) "
            "| 1.020 (-) | +102.0 |") in md


def test_call_span_takes_first_start_to_last_end_per_call():
    # two calls of a two-kernel operator; the 1 us gap inside each call belongs to the span
    iv = [(0.0, 5.0), (6.0, 7.0), (20.0, 25.0), (26.0, 28.0)]
    assert tn.call_span_us(iv, 2) == pytest.approx(7.5)
    assert tn.call_span_us(list(reversed(iv)), 2) == pytest.approx(7.5)


def test_call_period_takes_the_median_start_to_next_start():
    # three calls of two kernels: starts at 0, 10 and 21 us -> periods 10 and 11
    iv = [(0.0, 5.0), (6.0, 7.0), (10.0, 15.0), (16.0, 17.0), (21.0, 26.0), (27.0, 28.0)]
    assert tn.call_period_us(iv, 3) == pytest.approx(10.5)
    assert tn.call_period_us(list(reversed(iv)), 3) == pytest.approx(10.5)
    with pytest.raises(ValueError, match="at least 2 calls"):
        tn.call_period_us(iv[:2], 1)
    with pytest.raises(ValueError, match="do not split into 4 calls"):
        tn.call_period_us(iv, 4)


def test_call_span_refuses_intervals_that_do_not_split_into_calls():
    with pytest.raises(ValueError, match="do not split into 2 calls"):
        tn.call_span_us([(0.0, 1.0), (2.0, 3.0), (4.0, 5.0)], 2)


@pytest.mark.parametrize("extra, message", [
    (["--runs", "upstream,nope"], "--runs: unknown ['nope']"),
    (["--shape-file", "/no/such.yaml"], "--shape-file /no/such.yaml: no such file"),
])
def test_issue18_wall_refuses_bad_arguments_with_exit_2(tmp_path, extra, message):
    proc = subprocess.run([sys.executable, str(ROOT / "docs/validation/scripts/issue18.py"), "wall",
                           "--work", str(tmp_path / "w"), "--ops", "abs", "--flaggems-dir", str(tmp_path)]
                          + extra, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_issue18_summary_adds_the_in_graph_cupti_table_and_keeps_capture_errors(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "cold.json").write_text(json.dumps({"device": "H200", "flush_bytes": 120 << 20, "cases": [
        {"op": "sum", "shape": [4096, 4096], "kernels": ["k1", "k2"], "cupti_warm_ms": 0.0066,
         "cupti_cold_ms": 0.0136, "graph_warm_ms": 0.0084, "graph_cold_ms": 0.0157,
         "graph_cupti": {"warm": {"kernel_ms": 0.0066, "span_ms": 0.0081, "period_ms": 0.0084},
                         "cold": {"error": "RuntimeError('capture')"}}}]}))
    md = _issue18_summary(work, tmp_path / "o")
    assert "| sum | 6.60 (8.10) | RuntimeError('capture') | 1.037 | - | 8.40 | 1.000 | - | - | - | - |" in md
    # session 12's event timing of the same replay: warm against the graph timer, cold net of flushes
    case = json.loads((work / "cold.json").read_text())
    case["cases"][0]["graph_cupti"] = {
        "warm": {"kernel_ms": 0.0066, "span_ms": 0.0081, "period_ms": 0.0084, "event_ms": 0.0080,
                 "event_traced_ms": 0.0082},
        "cold": {"kernel_ms": 0.0136, "span_ms": 0.0139, "period_ms": 0.03, "event_ms": 0.04,
                 "event_traced_ms": 0.041, "event_net_ms": 0.0150}}
    (work / "cold.json").write_text(json.dumps(case))
    md = _issue18_summary(work, tmp_path / "o2")
    assert ("| sum | 6.60 (8.10) | 13.60 (13.90) | 1.037 | 1.129 | 8.40 | 1.000 | 8.00 (8.20) | 1.050 | "
            "15.00 | 1.047 |") in md


def test_issue18_every_run_gets_cold_triton_and_flaggems_caches(tmp_path, monkeypatch):
    """Session 6: upstream ran first and filled FlagGems' shared tuner store, so the zl_bench
    runs after it skipped mm's sweep. Each run must get its own caches, whatever the kind."""
    mod = _issue18()
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


def test_issue18_run_order_alternates_upstream_and_keeps_replays_after_records():
    mod = _issue18()
    runs = ["upstream", "after1", "after2"]
    assert mod.run_order(runs, 0) == ["upstream", "after1", "after2"]
    assert mod.run_order(runs, 1) == ["after1", "upstream", "after2"]
    full = ["upstream", "before", "after1", "after2", "before2"]
    odd = mod.run_order(full, 3)
    assert odd.index("upstream") == odd.index("after1") + 1
    assert odd.index("after2") > odd.index("after1") and odd.index("before2") > odd.index("before")
    assert mod.run_order(["after1", "after2"], 1) == ["after1", "after2"]


def test_issue18_runs_are_stamped_per_line_and_split_into_phases(tmp_path):
    """Session 10: zl_bench runs were up to 3.9 s slower than upstream outside pytest's own
    time. Each line's arrival time splits a run's wall into start-up, session and end."""
    mod = _issue18()
    script = ("import sys, time; print('prep', flush=True); time.sleep(0.3); "
              "print('=== test session starts ===', flush=True); time.sleep(0.4); "
              "print('=== 1 passed in 0.40s ===', flush=True); print('late', file=sys.stderr, flush=True); "
              "time.sleep(0.3)")
    t0 = time.monotonic()
    rc, lines = mod.run_stamped([sys.executable, "-c", script], tmp_path, dict(os.environ), 20)
    wall = time.monotonic() - t0
    assert rc == 0 and [line.strip() for _, line in lines][-1] == "late"   # stderr merged
    ph = mod.phases(lines, wall)
    assert 0.3 <= ph["startup_s"] < 2 and 0.35 <= ph["session_s"] < 1.5 and 0.25 <= ph["end_s"] < 1.5
    assert mod.phases(lines[:1], wall) == {}                  # died before its session
    rc, lines = mod.run_stamped([sys.executable, "-c", "import time; print('x', flush=True); time.sleep(30)"],
                                tmp_path, dict(os.environ), 1)
    assert rc == "timeout" and lines and lines[0][1] == "x\n"


def test_issue18_pooled_takes_medians_over_calls_and_filters_ops(tmp_path):
    """Two calls of one session: medians per kind, after1 against upstream, and an operator
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
    proc = subprocess.run([sys.executable, str(ROOT / "docs/validation/scripts/issue18_pooled.py"),
                           "--out", str(out), f"{one}:clamp", two], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    md = out.read_text()
    # clamp: upstream 17.0 (6.00), after1 19.0 (6.80); after2 (a replay) never pooled; each
    # call's own ratios (pytest 7/6 and 6.6/6) and their medians
    assert ("| clamp | 2 | 17.0 (6.00) | 19.0 (6.80) | 1.13 | 1.12 | 1.25, 1.00 | 1.17, 1.10 | "
            "1.13 (1.12) | - |") in md
    # sbo only from the second call
    assert "| sbo | 1 | 16.0 (7.00) | 16.0 (6.00) | 0.86 | 1.00 | 1.00 | 0.86 | 0.86 (1.00) | - |" in md
    bad = subprocess.run([sys.executable, str(ROOT / "docs/validation/scripts/issue18_pooled.py"),
                          "--out", str(out), str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr


def test_issue18_pooled_gives_the_median_ratio_an_interval_from_three_pairs(tmp_path):
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
    proc = subprocess.run([sys.executable, str(ROOT / "docs/validation/scripts/issue18_pooled.py"),
                           "--out", str(out), *calls("a", wide), *calls("b", tight)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cells = {row.split("|")[1].strip(): row.split("|")[-2].strip()
             for row in out.read_text().splitlines()[2:]}
    (alo, ahi), (blo, bhi) = (map(float, cells[k].split("-")) for k in ("a", "b"))
    assert 0.9 <= alo <= 1.075 <= ahi <= 1.3 and ahi - alo >= 0.1
    assert 1.04 <= blo <= 1.05 <= bhi <= 1.06


def test_issue18_mid_runs_get_their_warmup_and_replay_mid1(tmp_path, monkeypatch):
    """mid1/mid2: the A/A pair at a third warmup budget, beside 25 ms and the caller's."""
    mod = _issue18()
    seen = []
    monkeypatch.setattr(mod, "run_stamped", lambda cmd, cwd, env, timeout_s: seen.append(env) or (0, []))
    args = types.SimpleNamespace(flaggems_dir=tmp_path, shape_file=None, run_timeout_s=5, mid_warmup_ms=250.0)
    for kind in ("after1", "mid1", "before"):
        mod.run_once(kind, "softmax", "softmax", args, tmp_path / kind)
    mod.run_once("mid2", "softmax", "softmax", args, tmp_path / "mid2", replay_from=tmp_path / "mid1" / "zl")
    assert [e.get("ZL_GRAPH_WARMUP_MS") for e in seen] == [None, "250", "caller", "250"]
    assert seen[3]["REPLAY_FROM"] == str(tmp_path / "mid1" / "zl") and "REPLAY_FROM" not in seen[1]


def test_issue18_summary_sets_the_three_warmups_a_a_side_by_side(tmp_path):
    row = lambda ms: {"op": "softmax", "dtype": "torch.float16", "status": "SUCCESS",  # noqa: E731
                      "torch_ms": 0.01, "gems_ms": ms, "speedup": 1.0, "detail": "[64, 64]"}
    runs = [{"op": "softmax", "kind": k, "rc": 0, "wall_s": 20.0, "pytest_s": p, "rows": [row(ms)]}
            for k, p, ms in (("after1", 8.0, 0.010), ("after2", 8.0, 0.0103), ("mid1", 8.5, 0.010),
                             ("mid2", 8.5, 0.0101), ("before", 10.0, 0.010), ("before2", 10.0, 0.01002))]
    work = tmp_path / "w"
    work.mkdir()
    (work / "wall.json").write_text(json.dumps(runs))
    md = _issue18_summary(work, tmp_path / "o")
    assert "| softmax | 3.00 (3.00) | 1.00 (1.00) | 0.20 (0.20) | 8.0 / 8.5 / 10.0 |" in md


@pytest.mark.parametrize("session, part, reps, parts", [
    ("11", "4", ("rep1", "rep3"), "1, 2, 3 or 4"), ("12", "3", ("rep3", "rep4b"), "1 to 6"),
    ("13", "2", ("rep7", "rep9"), "1 to 6")])
def test_device_session_plans_pool_their_repetitions_and_refuse_a_bad_part(tmp_path, session, part, reps,
                                                                             parts):
    """The pooling part needs no GPU: issue18_pooled.py over whatever repetitions came back."""
    script = ROOT / f"docs/validation/scripts/device_session{session}.sh"
    for r, w in zip(reps, (20.0, 18.0)):
        d = tmp_path / f"issue18_{r}"
        d.mkdir()
        (d / "wall.json").write_text(json.dumps(
            [{"op": "clamp", "kind": "upstream", "rc": 0, "wall_s": 16.0, "pytest_s": 6.0},
             {"op": "clamp", "kind": "after1", "rc": 0, "wall_s": w, "pytest_s": 6.0}]))
    env = dict(os.environ, OUT=str(tmp_path), PART=part)
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "| clamp | 2 | 16.0 (6.00) | 19.0 (6.00) | 1.00 | 1.19 | 1.25, 1.12 | 1.00, 1.00 | 1.00 (1.19) |" \
        in (tmp_path / "pooled.md").read_text()
    bad = subprocess.run(["bash", str(script)], env=dict(env, PART="9"), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and f"PART must be {parts}" in bad.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    none = subprocess.run(["bash", str(script)], env=dict(env, OUT=str(empty)), capture_output=True, text=True,
                          timeout=60)
    assert none.returncode == 2 and "no issue18_rep" in none.stderr


def test_cost_reps_rotation_moves_every_operator_between_odd_and_even_positions():
    """cost_reps.sh's `rotated r`: repetition r starts the six operators r-1 places later."""
    lib = ROOT / "docs/validation/scripts/cost_reps.sh"
    out = subprocess.run(["bash", "-c", f"source {lib}; rotated 1; rotated 2; rotated 3; rotated 7"],
                         capture_output=True, text=True, timeout=30, check=True).stdout.split()
    first, second, third, seventh = (o.split(",") for o in out)
    assert len(first) == 6 and sorted(first) == sorted(third)
    assert third[0] == "sum:sum" and third[-1] == "clamp:clamp" and seventh == first
    assert all(first.index(op) % 2 != second.index(op) % 2 for op in first)   # parity flips
