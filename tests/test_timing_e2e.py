"""End to end: run_pytest.sh on the fake FlagGems tree with the CPU Triton driver.

The CPU device interface has no graph type, so on ZL_BACKEND=cuda every measured call
must fall back with the marker and every shape must still produce its row, while
run_identity.json says capture was attempted; ZL_ENABLE_CUDAGRAPH=0 must say direct.
"""

from __future__ import annotations

import json
import re

import pytest

ROW = re.compile(r"^SUCCESS\s+\d+\.\d+\s+\d+\.\d+\s", re.M)
MARKER = re.compile(r"BENCHMARK_DIRECT_NO_CUDAGRAPH op=(\S+) phase=(\S+) reason=(\S+) "
                    r"detail='[^']*' host_share=(\d+%|unknown)( l2=\S+)?( repeat=\d+)?$", re.M)


def identity(result):
    return json.loads((result.out_dir / "run_identity.json").read_text())


def test_graph_run_falls_back_on_every_shape_and_keeps_every_row(zl_run):
    r = zl_run(OP="softmax", OP_FILE="softmax", ZL_BACKEND="cuda", SHAPE_MODE="upstream",
               DTYPES="float16", ZL_DIRECT_REPEAT="2")
    assert r.returncode == 0, r.explain()
    rows = ROW.findall(r.log_text)
    markers = MARKER.findall(r.log_text)
    assert len(rows) == 3, r.explain()
    # Two timed calls per shape (torch baseline and gems), each one a marked fallback.
    assert len(markers) == 2 * len(rows), r.explain()
    assert {m[:3] for m in markers} == {("softmax", "capture", "NoGraphSupport")}
    # the CPU interface has no spin kernel: the host share cannot be measured and says so
    assert all(m[3:] == ("unknown", "", " repeat=2") for m in markers)
    ident = identity(r)
    assert (ident["timer"], ident["graph_capture"], ident["direct_repeat"]) == (
        "cuda_graph", "attempted", 2)
    assert (ident["graph_warmup_ms"], ident["l2"]) == ("25", "warm")
    assert "[timing-plugin] timer=cuda_graph backend=cuda via CpuDeviceInterface" in r.log_text
    # the run's host seconds per timer phase, in run.log: 6 calls, all fallbacks here
    spent = re.search(r"graph timer spent [0-9.]+ s over (\d+) do_bench call\(s\): warmup [0-9.]+ s "
                      r"\((\d+) timed call\(s\)\), capture and replays [0-9.]+ s, (\d+) fallback row\(s\)",
                      r.log_text)
    assert spent and spent.groups() == ("6", "0", "6"), r.explain()


def test_direct_run_records_direct_and_repeat(zl_run):
    r = zl_run(OP="softmax", OP_FILE="softmax", ZL_BACKEND="cuda", SHAPE_MODE="upstream",
               DTYPES="float16", ZL_ENABLE_CUDAGRAPH="0", ZL_DIRECT_REPEAT="3")
    assert r.returncode == 0, r.explain()
    assert len(ROW.findall(r.log_text)) == 3, r.explain()
    assert "BENCHMARK_DIRECT_NO_CUDAGRAPH" not in r.log_text
    ident = identity(r)
    assert (ident["timer"], ident["graph_capture"], ident["direct_repeat"]) == (
        "direct", "disabled", 3)
    assert "median of 3 calls" in r.log_text


def test_backward_benchmark_is_hooked_onto_a_side_stream_and_keeps_its_rows(zl_run):
    r = zl_run(OP="gelu_backward", OP_FILE="gelu", ZL_BACKEND="cuda", SHAPE_MODE="upstream",
               DTYPES="float32")
    assert r.returncode == 0, r.explain()
    assert re.search(r"\[cudagraph-plugin\] backward benchmarks run their forward on a side "
                     r"stream and are graph-captured on it \(get_latency hooked on \d+ Benchmark "
                     r"class", r.log_text), r.explain()
    rows = ROW.findall(r.log_text)
    assert rows and len(MARKER.findall(r.log_text)) == 2 * len(rows), r.explain()


def test_direct_run_leaves_backward_benchmarks_alone(zl_run):
    r = zl_run(OP="gelu_backward", OP_FILE="gelu", ZL_BACKEND="cuda", SHAPE_MODE="upstream",
               DTYPES="float32", ZL_ENABLE_CUDAGRAPH="0")
    assert r.returncode == 0, r.explain()
    assert "side stream" not in r.log_text and ROW.findall(r.log_text), r.explain()


@pytest.mark.parametrize("overlap", [False, True])
def test_an_autotuners_sweep_is_left_to_tritons_do_bench(zl_run, tmp_path, overlap):
    """The graph timer times the benchmark's calls only. Triton's autotuner looks up
    triton.testing.do_bench at its first sweep and met zl_bench's timer there (H200:
    softmax_backward_out made 14 timed calls where its benchmark made 4). Under --overlap's
    lock, outermost, the sweep is still the tuner's, and every call, tuning included, is
    timed under the lock."""
    shapes = tmp_path / "two.yaml"
    shapes.write_text("zl_default_tuner:\n  shapes:\n    - [64]\n    - [256]\n")
    lock = tmp_path / "device.lock"
    extra = dict(ZL_DEVICE_OVERLAP="2", ZL_TIMING_LOCK=str(lock)) if overlap else {}
    r = zl_run(OP="zl_default_tuner", OP_FILE="zl_default_tuner", ZL_BACKEND="cuda",
               SHAPE_FILE=str(shapes), ZL_ENABLE_IR="0", **extra)
    assert r.returncode == 0, r.explain()
    assert len(ROW.findall(r.log_text)) == 2, r.explain()
    spent = re.search(r"graph timer spent [0-9.]+ s over (\d+) do_bench call\(s\).*; (\d+) autotuner "
                      r"call\(s\) left to Triton's do_bench", r.log_text)
    # 2 shapes x (torch, gems) timed; 2 keys x 3 configs swept by Triton's own do_bench
    assert spent and spent.groups() == ("4", "6"), r.explain()
    assert len(MARKER.findall(r.log_text)) == 4, r.explain()   # the timed calls' fallbacks only
    if overlap:
        assert f"exclusive timing (overlap=2, lock {lock}): 10 do_bench call(s) held" in r.log_text, r.explain()


def test_a_judge_only_run_times_nothing_keeps_its_rows_and_the_tuners_picks(zl_run, tmp_path):
    """ZL_JUDGE_ONLY=1: every benchmark call runs once and prints nan (never a number);
    Triton's autotuner still sweeps with its own do_bench, so the record holds real picks."""
    shapes = tmp_path / "two.yaml"
    shapes.write_text("zl_default_tuner:\n  shapes:\n    - [64]\n    - [256]\n")
    r = zl_run(OP="zl_default_tuner", OP_FILE="zl_default_tuner", ZL_BACKEND="cuda",
               SHAPE_FILE=str(shapes), ZL_ENABLE_IR="0", ZL_JUDGE_ONLY="1")
    assert r.returncode == 0, r.explain()
    nan_rows = re.findall(r"^SUCCESS\s+nan\s+nan\s", r.log_text, re.M)
    assert len(nan_rows) == 2 and not ROW.findall(r.log_text), r.explain()
    assert "graph timer spent" not in r.log_text and not MARKER.findall(r.log_text)
    assert "[timing-plugin] timer=none backend=cuda (ZL_JUDGE_ONLY" in r.log_text
    ident = identity(r)
    assert (ident["timer"], ident["graph_capture"]) == ("none", "disabled")
    assert ident["autotune_mode"] == "record", ident
    records = [json.loads(p.read_text()) for p in (r.out_dir / "autotune_records").glob("*.json")]
    assert records and all(records), r.explain()     # the sweep's picks, recorded
    from zl.runlog.caliber import complaints
    assert "a judge-only run (timer=none)" in " ".join(complaints([("before", r.out_dir), ("after", r.out_dir)]))


@pytest.mark.parametrize("op", ["softmax", "abs", "exp"])
def test_with_the_torch_baseline_off_only_the_gems_side_is_timed(zl_run, op):
    """ZL_TIME_TORCH=off: each shape's torch baseline prints nan untimed, its gems latency is
    timed as before: softmax and exp have a gems_op, abs times torch_op inside use_gems()."""
    common = dict(OP=op, OP_FILE=op, ZL_BACKEND="cuda", SHAPE_MODE="upstream", ZL_ENABLE_IR="0")
    on = zl_run(**common)
    off = zl_run(ZL_TIME_TORCH="off", **common)
    assert on.returncode == 0 and off.returncode == 0, on.explain() + off.explain()
    rows_on = ROW.findall(on.log_text)
    rows_off = re.findall(r"^SUCCESS\s+nan\s+(\d+\.\d+)\s+nan\s", off.log_text, re.M)
    assert rows_on and len(rows_off) == len(rows_on) and all(float(v) > 0 for v in rows_off), off.explain()
    # the graph timer made half the calls: one per shape instead of two
    n_on, n_off = (len(MARKER.findall(r.log_text)) for r in (on, off))
    assert n_on == 2 * len(rows_on) and n_off == len(rows_on), off.explain()
    assert f"torch baseline not timed: {len(rows_on)} get_latency call(s) of it returned nan" in off.log_text
    assert identity(off)["time_torch"] == "off" and "time_torch" not in identity(on)
    # the results check still captures both sides (it runs the torch op itself)
    calls = [re.search(r"\[results-plugin\] outputs of .* \((\d+) calls", r.log_text) for r in (on, off)]
    assert all(calls) and calls[0].group(1) == calls[1].group(1) == str(2 * len(rows_on)), off.explain()
    # the caliber keeps them apart: an A/B of the two is refused
    from zl.runlog.caliber import complaints
    assert "time_torch differs: on=<missing>, off=off" in complaints([("on", on.out_dir), ("off", off.out_dir)])


def test_a_bad_time_torch_word_is_a_usage_error(zl_run):
    r = zl_run(OP="softmax", OP_FILE="softmax", ZL_BACKEND="cuda", ZL_TIME_TORCH="maybe")
    assert r.returncode == 4, r.explain()
    assert "ZL_TIME_TORCH='maybe'" in r.log_text or "ZL_TIME_TORCH='maybe'" in r.stderr, r.explain()
