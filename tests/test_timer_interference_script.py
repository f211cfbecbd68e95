"""benchmarks/timer_interference.py: the table's arithmetic, its re-rendering, argument errors and
the helper processes' life cycle (no GPU)."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "timer_interference.py"
_spec = importlib.util.spec_from_file_location("timer_interference", SCRIPT)
ti = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ti)


def _readings():
    out = []
    for cond, values, mhz in (("quiet", [1.00, 1.02, 1.00, 1.02], 1980),
                              ("cpu", [1.10, 1.00, 1.10, 1.00], 1980),
                              ("memory", [2.00, 2.00, 2.00, 2.00], 1755)):
        for v in values:
            out.append({"condition": cond, "kernel": "add_64k", "ms": v / 1000, "sm_mhz": mhz})
    return out


def test_pair_spread_is_the_median_relative_gap_of_consecutive_readings():
    assert ti.pair_spread([1.0]) is None
    assert ti.pair_spread([1.0, 1.0, 1.0]) == 0.0
    # gaps 0.2/1.1, 0.2/1.1, 0.2/1.1
    assert ti.pair_spread([1.0, 1.2, 1.0, 1.2]) == pytest.approx(0.2 / 1.1)


def test_summary_rows_compare_each_condition_with_quiet():
    rows = {r["condition"]: r for r in ti.summarize(_readings())}
    assert list(rows) == ["quiet", "cpu", "memory"]            # CONDITIONS order, absent ones left out
    assert rows["quiet"]["vs_quiet"] == pytest.approx(1.0)
    assert rows["memory"]["vs_quiet"] == pytest.approx(2.0 / 1.01)
    assert rows["memory"]["pair_spread"] == 0.0
    assert rows["cpu"]["pair_spread"] == pytest.approx(0.1 / 1.05)
    assert rows["cpu"]["max_over_median"] == pytest.approx(1.10 / 1.05)
    assert rows["memory"]["sm_mhz"] == 1755 and rows["quiet"]["n"] == 4


def test_report_only_renders_a_stored_measurement(tmp_path):
    data = {"meta": {"device": "NVIDIA H100 80GB HBM3", "helpers": 12, "rounds": 2, "readings": 2,
                     "rep_ms": 100.0}, "readings": _readings()}
    (tmp_path / ti.JSON_NAME).write_text(json.dumps(data))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--report-only", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "| add_64k | memory | 4 | 2.000 | 1.9802 | 0.00 % | 1.0000 | 1755 |" in proc.stdout
    assert (tmp_path / ti.MD_NAME).read_text() == proc.stdout.rstrip("\n") + "\n"


@pytest.mark.parametrize("argv, needle", [
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--helpers", "0"], "--helpers must be at least 1"),
    (["--cpu-helpers", "0"], "--cpu-helpers must be at least 1"),
    (["--rep-ms", "-1"], "--rep-ms and --alloc-gib must be positive"),
    (["--report-only"], "no readable"),
])
def test_bad_arguments_exit_2_with_a_named_error(tmp_path, argv, needle):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "o")] + argv,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and needle in proc.stderr
    assert "Traceback" not in proc.stderr


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:          # a zombie is dead for this purpose
        return fh.read().split(")")[-1].split()[0] != "Z"


def test_cpu_helpers_spin_until_stopped_and_stop_kills_them():
    helpers = ti.Helpers("cpu", 2, 1.0)
    try:
        time.sleep(1.0)
        pids = [p.pid for p in helpers.procs]
        assert all(_alive(pid) for pid in pids) and helpers.failures() == []
    finally:
        helpers.stop()
    assert not any(_alive(pid) for pid in pids)


def test_a_driver_killed_outright_takes_its_helpers_with_it(tmp_path):
    driver = subprocess.Popen(
        [sys.executable, "-c", "import sys, time, importlib.util\n"
         f"spec = importlib.util.spec_from_file_location('ti', {str(SCRIPT)!r})\n"
         "ti = importlib.util.module_from_spec(spec); spec.loader.exec_module(ti)\n"
         "h = ti.Helpers('cpu', 2, 1.0)\n"
         "print(' '.join(str(p.pid) for p in h.procs), flush=True)\n"
         "time.sleep(120)\n"], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in driver.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    driver.kill()
    driver.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids)


def test_a_helper_that_cannot_load_the_machine_is_named(monkeypatch):
    # without a CUDA driver (CI) a context helper ends at once: the condition must not pass as loaded
    try:
        import ctypes
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("a CUDA driver is present: the helper would run")
    except OSError:
        pass
    helpers = ti.Helpers("context", 1, 1.0)
    try:
        helpers.procs[0].wait(timeout=60)
        (why,) = helpers.failures()
        assert "exited 1" in why and "libcuda" in why
    finally:
        helpers.stop()


def test_the_clock_is_the_visible_cards_read_by_the_projects_sampler(tmp_path, monkeypatch):
    """CUDA_VISIBLE_DEVICES=5: nvidia-smi is asked for card 5 (its numbering), not card 0."""
    from test_overlap_throughput_script import fake_smi
    # index, SM clock, memory clock, temperature, power, utilization for the card asked for
    monkeypatch.setenv("PATH", fake_smi(tmp_path, 'case "$*" in *"-i 5"*) echo "5, 1755, 2619, 41, 120.5, 0";;\n'
                                                   '*) echo "0, 1980, 2619, 40, 110.0, 0";; esac\n'))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert ti.sm_clock() == 1755.0
    (tmp_path / "broken").mkdir()
    monkeypatch.setenv("PATH", fake_smi(tmp_path / "broken", "exit 9\n"))
    assert ti.sm_clock() is None
