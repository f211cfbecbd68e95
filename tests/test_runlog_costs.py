"""zl.runlog.costs: cost lines, pytest -v outcomes (with -s), the per-case batch cost table, and
the two scripts that print them (batch_costs.py, batch_report.py)."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from zl.runlog.costs import (batch_cost_rows, node_seconds, node_table, one_process_figures, pytest_finished,
                             read_upstream_per_node, summarise, write_batch_costs, zl_costs)

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ("[cudagraph-plugin] graph timer spent 3.900 s over 10 do_bench call(s): warmup 0.250 s "
          "(31 timed call(s)), capture and replays 3.500 s, 1 fallback row(s) 0.150 s; 10 autotuner call(s) "
          "left to Triton's do_bench\n"
          "[results-plugin] outputs of clamp recorded under /x/results (10 calls, 0.600 s outside the timed loops)\n"
          "[ir-meta-plugin] IR fingerprints ttgir,llir,ptx,binary recorded in 12.5 ms\n"
          "[ir-meta-plugin] IR plugin spent 0.420 s in Triton callbacks over 81234 launch(es) and "
          "0.051 s writing the dump\n")
# the shape of an H200 one-process log: `pytest -s -v`, each outcome after the table
ONE_PROCESS = """collecting ... collected 3 items

benchmark/test_abs.py::test_abs 
Operator: abs  Performance Test (dtype=torch.float16, mode=cudagraph,level=core)
SUCCESS               0.001169            0.001125               1.039          [torch.Size([64, 64])]

PASSED
benchmark/test_bitwise_and.py::test_bitwise_and FAILED
benchmark/test_clamp.py::test_clamp 
Operator: clamp  Performance Test (dtype=torch.float16, mode=cudagraph,level=core)
SUCCESS               1.923433            1.999664               0.962          [torch.Size([1073741824])]
"""


def test_cost_lines_are_read_and_summed():
    assert zl_costs(LEDGER) == {"timer_warmup_s": 0.25, "timer_graph_s": 3.5, "timer_fallback_s": 0.15,
                                "results_s": 0.6, "fingerprints_s": 0.013, "ir_hooks_s": 0.42,
                                "ir_launches": 81234, "ir_dump_s": 0.051, "tuner_calls": 10}
    assert zl_costs(LEDGER + LEDGER)["timer_graph_s"] == 7.0
    assert zl_costs(LEDGER + LEDGER)["tuner_calls"] == 20
    # a ledger line from before the autotuner count (older H200 logs) still reads
    assert "tuner_calls" not in zl_costs(LEDGER.split("; 10 autotuner")[0] + "\n")
    assert zl_costs(LEDGER.split("; 10 autotuner")[0] + "\n")["timer_fallback_s"] == 0.15
    assert zl_costs("nothing here") == {}
    # run_pytest.sh's CPU line: user + sys
    cpu = "[run] the run's processes used CPU: user 62.50 s sys 3.25 s\n"
    assert zl_costs(LEDGER + cpu)["cpu_s"] == 65.75 and "cpu_s" not in zl_costs(LEDGER)


def test_the_summary_gives_the_cases_cpu_where_their_logs_have_it(tmp_path):
    cpu = "[run] the run's processes used CPU: user 12.00 s sys 2.00 s\n"
    batch = _batch(tmp_path, [("clamp", "PASS", "20000", LEDGER + cpu), ("sum", "PASS", "12000", LEDGER)])
    rows = batch_cost_rows(batch)
    assert [r["cpu_s"] for r in rows] == [14.0, None]
    assert "cpu_s              sum     14.0 s  median  14.000 s (CPU of the run's processes, 1 case(s))" \
        in "\n".join(summarise(rows))
    assert not any("cpu_s" in ln for ln in summarise(rows[1:]))
    # a log with the CPU line only (no plugin ran its cost lines) is not a case "with cost lines"
    bare = batch_cost_rows(_batch(tmp_path / "bare", [("gone", "PASS", "1000", cpu)]))
    assert bare[0]["cpu_s"] == 14.0 and bare[0]["extra_s"] is None
    assert summarise(bare) == ["no PASS case with zl_bench's cost lines"]


def test_pytest_outcomes_with_and_without_s_and_a_cut_node_left_out():
    assert pytest_finished(ONE_PROCESS) == [("benchmark/test_abs.py::test_abs", "PASSED"),
                                            ("benchmark/test_bitwise_and.py::test_bitwise_and", "FAILED")]
    # -v without -s: one line each, with a skip reason and the progress column
    assert pytest_finished("a/test_x.py::test_x PASSED      [ 50%]\na/test_y.py::test_y SKIPPED (why) [100%]\n"
                           "a/test_z.py::test_z \nSUCCESS 1.0 PASSED_TOO\n") == [
        ("a/test_x.py::test_x", "PASSED"), ("a/test_y.py::test_y", "SKIPPED")]
    assert pytest_finished("") == []


def test_node_seconds_from_a_stamped_log_and_a_missing_stamp_is_named():
    stamped = "".join(f"{100 + i * 1.5:.2f} {line}\n" for i, line in enumerate(ONE_PROCESS.splitlines()))
    got = node_seconds(stamped)
    # abs: from the blank line after collection (101.5) to PASSED on its own line (109.0);
    # bitwise_and: from abs's PASSED to its own line (110.5). The id line's stamp (103.0) is
    # no start: through a pipe it arrives with the node's output, after the node ran.
    assert got == [("benchmark/test_abs.py::test_abs", "PASSED", 7.5),
                   ("benchmark/test_bitwise_and.py::test_bitwise_and", "FAILED", 1.5)]
    with pytest.raises(ValueError, match="line 2 has no time stamp"):
        node_seconds("1.0 a/test_x.py::test_x PASSED\nnot stamped\n")


def _batch(tmp_path, cases):
    batch = tmp_path / "b"
    rows = []
    for name, status, elapsed_ms, log in cases:
        d = batch / "main" / name
        d.mkdir(parents=True)
        if log is not None:
            (d / "run.log").write_text(log)
        rows.append({"repo": "main", "op": name, "op_file": "reduction" if name == "sum" else name,
                     "run_name": name, "status": status,
                     "elapsed_ms": elapsed_ms, "out_dir": f"/elsewhere/main/{name}"})
    with open(batch / "ops_status.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return batch


def test_batch_rows_pair_with_upstream_and_the_summary_splits_the_excess(tmp_path):
    batch = _batch(tmp_path, [("clamp", "PASS", "20000", LEDGER), ("sum", "PASS", "12000", LEDGER),
                              ("bitwise_and", "TIMEOUT", "120000", None)])
    per_node = tmp_path / "per_node.tsv"
    per_node.write_text("benchmark/test_clamp.py::test_clamp\t0\t15\n"
                        "benchmark/test_reduction.py::test_sum\t0\t11\n"
                        "benchmark/test_other.py::test_clamp\t0\t99\n"
                        "benchmark/test_bitwise_and.py::test_bitwise_and\t1\t11\n")
    rows = batch_cost_rows(batch, read_upstream_per_node(per_node))
    clamp = rows[0]
    # paired by file and function: test_other.py's test_clamp is another node
    assert clamp["elapsed_s"] == 20.0 and clamp["upstream_s"] == 15 and clamp["excess_s"] == 5.0
    assert clamp["timer_s"] == 3.9 and clamp["extra_s"] == pytest.approx(1.084)
    assert rows[2]["timer_s"] is None and rows[2]["upstream_rc"] == 1
    text = "\n".join(summarise(rows))
    # the TIMEOUT case has no cost lines and stays out of the pairing
    assert "2 PASS case(s)" in text and "zl_bench 32 s, upstream 26 s, excess 6 s (23 %)" in text
    assert "results check, fingerprints, IR callbacks and dump): 2 s" in text
    assert summarise(rows[2:]) == ["no PASS case with zl_bench's cost lines"]


def test_costs_tsv_marks_missing_figures(tmp_path):
    batch = _batch(tmp_path, [("clamp", "PASS", "20000", LEDGER), ("gone", "FAIL", "", None)])
    lines = write_batch_costs(batch)
    table = list(csv.DictReader(open(batch / "costs.tsv", newline=""), delimiter="\t"))
    assert [r["run_name"] for r in table] == ["clamp", "gone"]
    assert table[0]["timer_graph_s"] == "3.5" and table[1]["timer_graph_s"] == "-"
    assert table[1]["elapsed_s"] == "0.0" and lines[0].startswith("1 PASS case(s)")


def test_a_malformed_per_node_line_is_named(tmp_path):
    bad = tmp_path / "per_node.tsv"
    bad.write_text("benchmark/test_clamp.py::test_clamp\t0\n")
    with pytest.raises(ValueError, match="not a per-node line"):
        read_upstream_per_node(bad)


def test_batch_costs_script_prints_a_table_and_refuses_bad_input(tmp_path):
    batch = _batch(tmp_path, [("clamp", "PASS", "20000", LEDGER)])
    script = ROOT / "benchmarks/batch_costs.py"
    ok = subprocess.run([sys.executable, str(script), str(batch)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    table = list(csv.DictReader(ok.stdout.splitlines(), delimiter="\t"))
    assert table[0]["run_name"] == "clamp" and table[0]["timer_graph_s"] == "3.5"
    assert "upstream_s" not in table[0] and "1 PASS case(s)" in ok.stderr
    missing = subprocess.run([sys.executable, str(script), str(tmp_path / "none")], capture_output=True, text=True)
    assert missing.returncode == 2 and "no ops_status.csv" in missing.stderr
    usage = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and "batch_dir" in usage.stderr


def test_batch_costs_adds_the_rate_and_its_projections_given_the_wall(tmp_path):
    batch = _batch(tmp_path, [("clamp", "PASS", "20000", LEDGER), ("relu", "PASS", "30000", LEDGER),
                              ("mv", "TIMEOUT", "70000", LEDGER)])
    (batch / "costs.tsv").write_text("run_name\tstatus\tcpu_s\nclamp\tPASS\t10.0\nrelu\tPASS\t20.0\n"
                                     "mv\tTIMEOUT\t-\n")
    script = ROOT / "benchmarks/batch_costs.py"
    r = subprocess.run([sys.executable, str(script), str(batch), "--wall-s", "60", "--slots", "2",
                        "--inventory", "120"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # 3 side runs in 60 s; 120 case seconds, 40 a side run; 30 CPU-s over 60 s
    assert "# rate: 3 side run(s) in 60.0 s: 180.0 per hour (PASS 2, TIMEOUT 1)" in r.stderr
    assert ("# case seconds 120.0 (mean 40.0 s a side run); cores busy 0.50; CPU-s per PASS side run: "
            "median 15.0, mean 15.0") in r.stderr
    assert "# with 2 slot(s) never idle: 180.0 side runs per hour" in r.stderr
    assert "# 120 side runs: 40.0 minutes at the measured rate, 40.0 with 2 slot(s) never idle" in r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "ops_status.csv").write_text("repo,op,op_file,run_name,status,elapsed_ms,out_dir\n")
    r = subprocess.run([sys.executable, str(script), str(empty), "--wall-s", "60", "--slots", "2"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "# rate: no case in" in r.stderr and "Traceback" not in r.stderr
    for bad, says in ((["--slots", "2"], "need --wall-s"), (["--wall-s", "0"], "must be positive")):
        r = subprocess.run([sys.executable, str(script), str(batch), *bad], capture_output=True, text=True)
        assert r.returncode == 2 and says in r.stderr


def test_batch_report_counts_a_cut_one_process_run(tmp_path):
    root = tmp_path / "root"
    (root / "upstream").mkdir(parents=True)
    (root / "upstream/one_process.log").write_text(ONE_PROCESS)
    (root / "commands.tsv").write_text("stage\tstart\tend\twall_s\trc\tcommand\n"
                                       "upstream_one_process\t-\t-\t36\t124\tpytest\n")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/batch_report.py"), str(root), "1", "1",
                          "plain"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "upstream one process: 2 node(s) finished in 36 s of wall: 200 nodes/hour (rc 124)" in out.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks/batch_report.py"), str(root)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "batch_root" in bad.stderr
    script = str(ROOT / "benchmarks/batch_report.py")
    helped = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "BATCH_ROOT SHARE" in helped.stdout and not (root / "report.txt").exists()
    gone = subprocess.run([sys.executable, script, str(tmp_path / "none"), "1", "1", "plain"],
                          capture_output=True, text=True)
    assert gone.returncode == 2 and "no such batch root" in gone.stderr
    # upstream's per-node table is read by read_upstream_per_node: rows counted, a bad line named
    (root / "upstream/per_node.tsv").write_text("benchmark/test_abs.py::test_abs\t0\t12\n"
                                                "benchmark/test_flip.py::test_flip\t1\t8\n")
    out = subprocess.run([sys.executable, script, str(root), "1", "2", "plain"], capture_output=True, text=True)
    assert "upstream one process per node: 2 node(s), rc 0 on 1, 20 s of node time: 360 nodes/hour" in out.stdout
    (root / "upstream/per_node.tsv").write_text("benchmark/test_abs.py::test_abs 0 12\n")
    broken = subprocess.run([sys.executable, script, str(root), "1", "2", "plain"], capture_output=True, text=True)
    assert broken.returncode == 2 and "not a per-node line" in broken.stderr and "Traceback" not in broken.stderr


def test_batch_report_reads_what_run_batch_writes_and_names_bad_numbers(tmp_path):
    """A FAIL row of a case that never started records elapsed_ms 0 (zl/batch/case.py), a batch
    may lack notes; neither may stop the report. A number that is none exits 2, named."""
    script = str(ROOT / "benchmarks/batch_report.py")
    root = tmp_path / "root"
    (root / "plain").mkdir(parents=True)
    (root / "commands.tsv").write_text("stage\twall_s\trc\nplain\t100\t0\n")
    (root / "plain/ops_status.csv").write_text("repo,op,status,elapsed_ms\nmain,abs,FAIL,0\n")
    out = subprocess.run([sys.executable, script, str(root), "1", "1", "plain"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "== plain batch: 1 cases: FAIL=1" in out.stdout and "no case time recorded" in out.stdout
    (root / "plain/ops_status.csv").write_text("repo,op,status,elapsed_ms\nmain,abs,PASS,1234.5\n"
                                               "main,exp,PASS,2765.5\n")
    out = subprocess.run([sys.executable, script, str(root), "1", "1", "plain"], capture_output=True, text=True)
    assert out.returncode == 0 and "2 case(s) in 4 s of case time: 1800 cases/hour per slot" in out.stdout
    assert "2 case(s) over 100 s of stage wall: 72 cases/hour on one device" in out.stdout
    (root / "commands.tsv").write_text("stage\twall_s\trc\nplain\tlong\t0\n")
    bad = subprocess.run([sys.executable, script, str(root), "1", "1", "plain"], capture_output=True, text=True)
    assert bad.returncode == 2 and "commands.tsv wall_s: 'long' is not a number" in bad.stderr
    for share in ("abc", "0"):
        bad = subprocess.run([sys.executable, script, str(root), share, "1", "plain"], capture_output=True, text=True)
        assert bad.returncode == 2 and "not a positive integer" in bad.stderr and "Traceback" not in bad.stderr


def test_node_table_gives_the_one_process_rate():
    stamped = "".join(f"{100 + i * 1.5:.2f} {line}\n" for i, line in enumerate(ONE_PROCESS.splitlines()))
    table = node_table(stamped).splitlines()
    assert table[0] == "node\toutcome\tseconds"
    assert table[1] == "benchmark/test_abs.py::test_abs\tPASSED\t7.5"
    # 11 lines, 1.5 s apart: 15 s wall, 2 finished nodes -> 480 per hour
    assert table[-1] == "# 2 node(s) finished (1 PASSED), 9.0 s in nodes, 15.0 s wall, 480 per hour"
    assert node_table("").splitlines()[-1].endswith("0.0 s wall, - per hour")


# An H100 one-process run's shape (2026-12-06): softmax_backward's failed capture, then every
# later node failing within a second, FlagGems' colour codes and all.
CASCADE = """collecting ... collected 5 items
benchmark/test_special_expit.py::test_special_expit 
Operator: special_expit  Performance Test (dtype=torch.float16, mode=cudagraph,level=core)
SUCCESS               0.001690            0.001200               1.409               0.003          [torch.Size([64, 64])]
PASSED
benchmark/test_softmax.py::test_softmax_backward FAILED
benchmark/test_true_divide.py::test_true_divide \x1b[31mFAILED\x1b[0m: Operator=div_tensor dtype={dtype} err=<<<{e}>>>
FAILED
benchmark/test_any.py::test_any \x1b[31mFAILED\x1b[0m: Operator=any dtype={dtype} err=<<<{e}>>>
FAILED
benchmark/test_indexer.py::test_indexer_k_quant SKIPPED (needs sm100)
"""


def test_one_process_figures_count_passed_nodes_and_name_the_first_failure():
    stamps = [100.0, 100.5, 110.0, 110.0, 110.2, 110.4, 110.5, 110.6, 110.7, 110.8, 110.9]
    lines = CASCADE.splitlines()
    assert len(stamps) == len(lines)
    stamped = "".join(f"{t:.2f} {line}\n" for t, line in zip(stamps, lines))
    names = {"benchmark/test_softmax.py::test_softmax_backward": "softmax_backward"}
    f = one_process_figures(stamped, names)
    assert {n: v["outcome"] for n, v in f["nodes"].items()} == {
        "benchmark/test_special_expit.py::test_special_expit": "PASSED", "softmax_backward": "FAILED",
        "benchmark/test_true_divide.py::test_true_divide": "FAILED", "benchmark/test_any.py::test_any": "FAILED",
        "benchmark/test_indexer.py::test_indexer_k_quant": "SKIPPED"}
    # 10.9 s of wall: 5 finished nodes read 1651.4 per hour, the one that passed 330.3
    assert (f["wall_s"], f["nodes_finished"], f["nodes_passed"], f["nodes_failed"]) == (10.9, 5, 1, 3)
    assert (f["nodes_per_hour"], f["passed_per_hour"], f["first_failed"]) == (1651.4, 330.3, "softmax_backward")
    clean = one_process_figures("".join(f"{t:.2f} {line}\n" for t, line in zip(stamps, lines[:5])), {})
    assert (clean["nodes_failed"], clean["first_failed"], clean["nodes_passed"]) == (0, None, 1)
    empty = one_process_figures("", {})
    assert (empty["wall_s"], empty["nodes_per_hour"], empty["passed_per_hour"], empty["nodes"]) == (0.0, None, None, {})
