"""benchmarks/cold_l2_gap.py: case parsing, the per-call arithmetic that
separates a kernel boundary from kernel time, and the summary table (no GPU)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "cold_l2_gap.py"
_spec = importlib.util.spec_from_file_location("cold_l2_gap", SCRIPT)
gap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gap)

# shaped like an H200 record of cold sum 4096x4096 (us per call)
CASE = {"op": "sum", "shape": [4096, 4096], "eager_kernels": {"sum_kernel_1": 12.04, "sum_kernel_2": 1.50},
        "span": 13.98, "timer": 14.68,
        "events": {"A": 42.95, "B": 28.51, "B2": 29.30, "B3": 29.90},
        "busy": {"A_op": 13.82, "A": 28.1, "B": 28.1, "B2": 28.5, "B3": 28.1, "B3_tiny": 1.0}}


def test_cases_parse_and_bad_ones_are_named():
    assert gap.parse_cases("relu:4096x4096, sum:8192X16") == [("relu", (4096, 4096)), ("sum", (8192, 16))]
    for bad in ("gelu:4x4", "sum:4x", "sum:4x4x4", "sum:0x4", "", "sum"):
        with pytest.raises(ValueError) as err:
            gap.parse_cases(bad)
        assert (repr(bad) if bad else "no cases") in str(err.value)


def test_derive_separates_the_boundary_from_the_extra_kernel_time():
    d = gap.derive(CASE)
    assert d["eager_sum"] == pytest.approx(13.54)
    assert d["net"] == pytest.approx(42.95 - 28.51)
    assert d["net_split"] == pytest.approx(42.95 - 29.30)
    assert d["net_tiny"] == pytest.approx(42.95 - 29.90)
    # B2 - B = 0.79 us, of which 0.4 us is the half-flush's own extra kernel time
    assert d["split_extra"] == pytest.approx(0.4)
    assert d["boundary_split"] == pytest.approx(0.39)
    assert d["boundary_tiny"] == pytest.approx(29.90 - 28.51 - 1.0)
    assert d["timer/eager"] == pytest.approx(14.68 / 13.54)
    assert d["net_split/span"] == pytest.approx((42.95 - 29.30) / 13.98)


def test_derive_without_a_reference_gives_no_ratio():
    d = gap.derive(dict(CASE, eager_kernels={}, span=None))
    assert d["eager_sum"] == 0 and d["timer/eager"] is None and d["net/span"] is None


def test_summary_writes_one_row_per_case_and_keeps_errors(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "cold_gap.json").write_text(json.dumps({
        "device": "NVIDIA H200", "flush_bytes": 120 * 2**20, "calls": 50, "replays": 7,
        "cases": [CASE, {"op": "relu", "shape": [8, 8], "error": "RuntimeError('capture')"}]}))
    r = subprocess.run([sys.executable, str(SCRIPT), "summary", "--work", str(work), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "o" / "cold_gap.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| sum | 4096x4096 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "12.04, 1.50" and cells[3] == "13.54" and cells[5] == "14.68"
    assert cells[6] == "14.44" and cells[11] == "0.39"
    assert cells[13] == f"{14.68 / 13.54:.3f}" and cells[14] == f"{14.44 / 13.54:.3f}"
    assert "| relu | 8x8 | error: RuntimeError('capture') |" in md
    assert "120 MiB" in md


def test_missing_record_and_bad_cases_exit_2(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "summary", "--work", str(tmp_path), "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no " in r.stderr and "cold_gap.json" in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "run", "--work", str(tmp_path), "--cases", "gelu:4x4"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--cases" in r.stderr and "gelu:4x4" in r.stderr
    assert "Traceback" not in r.stderr


def test_run_without_a_cuda_device_says_so_and_exits_1(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    r = subprocess.run([sys.executable, str(SCRIPT), "run", "--work", str(tmp_path), "--cases", "relu:8x8"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "needs a CUDA device" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "cold_gap.json").exists()


def test_the_clock_table_sets_each_clocks_readings_against_eager_cupti():
    clocks = {"events": {"us": [15.15, 15.19], "host_s": [0.5, 0.4]},
              "kernels": {"us": [13.63, 13.70], "host_s": [0.1, 0.12]}}
    md = gap.clock_table([CASE, dict(CASE, clocks=clocks)])
    assert len([line for line in md if line.startswith("| sum |")]) == 1  # the old record left out
    cells = [c.strip() for c in md[-1].strip("|").split("|")]
    assert cells[3:5] == ["15.15, 15.19", "13.63, 13.70"]
    assert cells[5] == f"{15.15 / 13.54:.3f}, {15.19 / 13.54:.3f}"
    assert cells[6] == f"{13.63 / 13.54:.3f}, {13.70 / 13.54:.3f}"
    assert cells[7:] == ["0.45", "0.11"]
    assert gap.clock_table([CASE]) == []
