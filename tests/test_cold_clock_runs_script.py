"""benchmarks/cold_clock_runs.py: one run per cold clock laid out for the table, and the table of
real runs per cold clock (no GPU: the run is run_pytest.sh's stub)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "cold_clock_runs.py"
HEADER = "Status  Torch Latency (ms)  Gems Latency (ms)  Gems Speedup  Size Detail\n"


def table_of(tmp_path: Path, call: Path) -> str:
    out = tmp_path / "t.md"
    r = subprocess.run([sys.executable, str(SCRIPT), "table", "--out", str(out), str(call)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out.read_text()


def run_folder(call: Path, name: str, wall_ms: int, pytest_s: float, graph_s: float, rows, ident):
    d = call / "clock_runs" / name
    d.mkdir(parents=True)
    (d / "wall.txt").write_text(f"rc=0 wall_ms={wall_ms}\n")
    body = "".join(f"SUCCESS {t} {g} 1.1 [torch.Size([{s}]), torch.Size([6])]\n" for t, g, s in rows)
    (d / "output.log").write_text(
        HEADER + body + f"==== 1 passed, 1 warning in {pytest_s}s ====\n"
        f"[cudagraph-plugin] graph timer spent 9 s over 4 do_bench call(s): warmup 1 s (9 timed "
        f"call(s)), capture and replays {graph_s} s, 0 fallback row(s) 0.000 s\n")
    (d / "run_identity.json").write_text(json.dumps(ident))


def test_runs_are_tabulated_and_the_kernel_clock_set_against_events_in_the_same_call(tmp_path):
    call = tmp_path / "call1"
    run_folder(call, "sum_cold_events", 20000, 8.0, 5.0, [("0.016", "0.014704", "4096, 4096")],
               {"l2": "cold", "cold_clock": "events"})
    run_folder(call, "sum_cold_kernels", 25000, 10.0, 7.3, [("0.016", "0.014816", "4096, 4096")],
               {"l2": "cold", "cold_clock": "kernels"})
    run_folder(call, "sum_warm_events", 18000, 4.0, 1.2, [("0.006", "0.008284", "64, 64")],
               {"l2": "warm"})
    md = table_of(tmp_path, call)
    assert ("| call1 | sum | cold | kernels | 0 | 25.00 | 10.00 | 7.300 | cold / kernels | "
            "4096,4096: 14.82 |") in md
    assert "| call1 | sum | warm | events | 0 | 18.00 | 4.00 | 1.200 | warm / None | 64,64: 8.28 |" in md
    assert "| sum | call1: 1.25 (1.25) | 1.25 | 1.25 |" in md


def test_no_run_folder_exits_2(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "table", "--out", str(tmp_path / "t.md"), str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no clock_runs/" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "t.md").exists()


def test_tagged_repeats_give_the_aa_table(tmp_path):
    call = tmp_path / "call4"
    for tag, lat in (("a", ("0.001600", "0.023712")), ("b", ("0.001632", "0.023760"))):
        run_folder(call, f"softmax_cold_auto_{tag}", 18000, 7.0, 4.6,
                   [("0.0017", lat[0], "64, 64"), ("0.056", lat[1], "4096, 4096")],
                   {"l2": "cold", "cold_clock": "kernels"})
    md = table_of(tmp_path, call)
    assert ("| call4 | softmax | cold | auto | 64,64: 1.600, 1.632 (2.00), 4096,4096: 23.712, "
            "23.760 (0.20) | 1.10 |") in md
    assert "| call4 | softmax | cold | auto_b | 0 | 18.00 |" in md


def test_run_lays_out_a_clock_run_that_the_table_reads(tmp_path):
    """`run` sets the clock for run_pytest.sh and writes the folder `table` reads: output.log,
    wall.txt and the run directory zl/ with its identity; the private caches are gone after."""
    stub = ROOT / "tests" / "fixtures" / "runlogs" / "stub_run_pytest.sh"
    env = dict(os.environ, ZL_RUN_PYTEST=str(stub), ZL_PYTHON=sys.executable)
    r = subprocess.run([sys.executable, str(SCRIPT), "run", "--call", str(tmp_path / "call1"), "--op",
                        "softmax", "--l2", "cold", "--clock", "kernels", "--tag", "a"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "call1" / "clock_runs" / "softmax_cold_kernels_a"
    assert (folder / "wall.txt").read_text().startswith("rc=0 wall_ms=")
    assert json.loads((folder / "zl" / "run_identity.json").read_text())["op"] == "softmax"
    assert not (folder / "triton_cache").exists() and not (folder / "flaggems_cache").exists()
    assert "| call1 | softmax | cold | kernels_a | 0 |" in table_of(tmp_path, tmp_path / "call1")


def test_run_refuses_a_bad_tag_or_clock_with_exit_2(tmp_path):
    for extra in (["--clock", "kernels", "--tag", "a-b"], ["--clock", "cupti"]):
        r = subprocess.run([sys.executable, str(SCRIPT), "run", "--call", str(tmp_path), "--op", "sum",
                            "--l2", "cold", *extra], capture_output=True, text=True)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert not (tmp_path / "clock_runs").exists()
