"""benchmarks/timer_noise.py: table parsing, A/A pairing arithmetic, argument errors (no GPU)."""

from __future__ import annotations

import importlib.util
import subprocess
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
