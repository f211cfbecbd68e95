"""benchmarks/overlap_throughput.py on the batch stub: one A/A screen per --overlap value over
the same nodes, the figures it reports computed from what the batches wrote."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

from harness.runner import REPO_ROOT, base_env, procs_with_env
from test_batch import STUB

TOOL = REPO_ROOT / "benchmarks" / "overlap_throughput.py"


def run(tmp_path, *args, **env):
    e = base_env(tmp_path, ZL_RUN_PYTEST=str(STUB), ZL_STUB_STATE=str(tmp_path), ZL_RUNS_ROOT=str(tmp_path / "runs"),
                 ZL_STUB_SWITCH="ZL_AA_NOOP", ZL_STUB_IR_MAP="relu=same,softmax=same,abs=same", **env)
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], env=e, capture_output=True, text=True,
                          timeout=300)


def test_each_overlap_gets_its_screen_and_the_report_reads_the_batches(tmp_path):
    out = tmp_path / "ovl"
    r = run(tmp_path, "--ops", "relu", "softmax", "abs", "--overlap", "1", "2", "--devices", "0", "--out", out,
            ZL_STUB_B_SCALE="1.05", ZL_STUB_PLAN="abs=fail", ZL_STUB_CPU="1.5,0.5", ZL_STUB_AGED="1")
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads((out / "overlap_throughput.json").read_text())
    assert data["nodes"] == ["relu", "softmax", "abs"] and data["switch"] == "ZL_AA_NOOP"
    solo, over = data["results"]
    assert (solo["overlap"], over["overlap"]) == (1, 2)
    for res in (solo, over):
        nodes = res["nodes"]
        assert nodes["relu"]["status"] == "PASS/PASS" and nodes["abs"]["status"] == "FAIL/NOT_RUN"
        assert nodes["relu"]["verdict"] == "NO_IR_DIFF" and nodes["relu"]["shapes"] == 2
        # side B's planted 5 % on both shapes; a failed node has no pair
        assert abs(nodes["softmax"]["aa_median_abs_delta"] - 0.05) < 1e-9
        assert nodes["abs"]["aa_median_abs_delta"] is None
        assert res["side_runs"] == 5 and res["wall_s"] > 0
        assert res["side_runs_per_hour"] == round(5 / res["wall_s"] * 3600, 1)
        # timings valid only where the side passed: relu's and softmax's two sides, not abs's FAIL
        assert res["passed_side_runs"] == 4
        assert res["passed_side_runs_per_hour"] == round(4 / res["wall_s"] * 3600, 1)
        assert res["nodes_finished"] == 3                # FAIL/NOT_RUN: done
        assert res["nodes_per_hour"] == round(3 / res["wall_s"] * 3600, 1)
        assert res["gpu"] is None                       # no nvidia-smi here: not a made-up share
        # the stub's 8 and 16 us shapes: all in the middle band, B 5 % slower on each
        small, mid, large = res["aa_by_latency"]
        assert (small["shapes"], large["shapes"], small["median_abs"]) == (0, 0, None)
        assert mid["shapes"] == 4 and abs(mid["median_abs"] - 0.05) < 1e-9 and mid["positive_share"] == 1.0
    assert ("Overlap 2: A/A by side A's latency: < 5 us 0 shape(s), median n/a, B slower in n/a; "
            "5-50 us 4 shape(s), median 5.00%, B slower in 100%; >= 50 us 0 shape(s)") in r.stdout
    assert solo["lock_held_share"] is None and solo["nodes"]["relu"]["lock_held_s"] is None
    # overlapped: the stub's lock line, 0.5 s held per side run (5 side runs wrote one)
    assert over["nodes"]["relu"]["lock_held_s"] == 1.0 and over["nodes"]["abs"]["lock_waited_s"] == 0.25
    # of the waits, the stub's 0.1 s per side run held back its GPU work while another timed
    assert over["nodes"]["relu"]["share_waited_s"] == 0.2 and over["share_waited_s"] == 0.5
    assert over["lock_waited_s"] == 1.25 and solo["share_waited_s"] is None
    # the stub's shares: 0.75 s per side run, what other cases' timers had to wait out
    assert over["nodes"]["relu"]["share_held_s"] == 1.5 and over["share_held_s"] == 3.75
    assert solo["share_held_s"] is None and over["share_stretches"] == 15
    assert ("cases waited 1.2 s for the lock in all, 0.5 s of it (40.0%) to start GPU work while another "
            "case timed (5 share(s) closed the turnstile after waiting their age); they held it shared 3.8 s "
            "in all (0.8 s per side run, 0.25 s per stretch).") in r.stdout
    # each side run's processes: 1.5 + 0.5 CPU-s (the stub's CPU line); cores busy over the wall
    for res in (solo, over):
        assert res["cpu_s_median"] == 2.0 and res["cores_busy"] == round(5 * 2.0 / res["wall_s"], 2)
    assert f"the side runs' processes used a median 2.0 CPU-s each, {over['cores_busy']:.2f} cores" in r.stdout
    assert over["lock_held_share"] == round(2.5 / over["wall_s"], 3)
    # case time: the sides' own seconds from ops_status.csv, against 2 slots over the wall
    case = sum(float(r["elapsed_ms"] or 0) / 1000 for side in ("before", "after")
               for r in csv.DictReader(open(out / "overlap-2" / side / "ops_status.csv")))
    assert over["case_s"] == round(case, 3) > 0 and over["timeout_case_s"] == 0.0
    assert over["slot_share"] == round(over["case_s"] / (2 * over["wall_s"]), 3)
    assert (f"the side runs' own seconds sum to {over['case_s']:.0f} s, {over['slot_share']:.1%} of 2 slot(s) "
            f"over the wall; lock waits {1.25 / over['case_s']:.1%} of it, TIMEOUT sides 0 s (0.0%).") in r.stdout
    assert over["lock_bound_side_runs_per_hour"] == 7200.0
    # every overlapped side run's lock line counts one aged share: 2 nodes both sides, abs's A
    assert over["aged_shares"] == 5 and solo["aged_shares"] == 0
    ident = json.loads((out / "overlap-2/before/main/relu/run_identity.json").read_text())
    assert ident["device_overlap"] == 2
    assert "| 2 |" in r.stdout and "| True | True |" in r.stdout and "5.00%" in r.stdout
    # called again: both batches resume, only the failed node reruns; the rate covers both calls
    r = run(tmp_path, "--ops", "relu", "softmax", "abs", "--overlap", "1", "2", "--devices", "0", "--out", out,
            ZL_STUB_PLAN="abs=fail")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 reused, 1 to run" in (out / "console-overlap-2.log").read_text().split("[batch] backend=")[-1]
    second = json.loads((out / "overlap_throughput.json").read_text())["results"]
    again = second[1]
    assert again["calls"] == 2 and again["wall_s"] > over["wall_s"]
    # the report of a moved bundle, running nothing: the same figures
    moved = tmp_path / "bundle"
    out.rename(moved)
    r = run(tmp_path, "--report-only", "--overlap", "1", "2", "--out", moved)
    assert r.returncode == 0, r.stdout + r.stderr
    redo = json.loads((moved / "overlap_throughput.json").read_text())
    # a reader gone before the report (`| true` reads nothing): exit 0, no traceback, the report
    # files written first
    (moved / "overlap_throughput.md").unlink()
    piped = subprocess.run(["bash", "-c", f"set -o pipefail; '{sys.executable}' '{TOOL}' --report-only --overlap 1 2 "
                            f"--out '{moved}' | true"], env=base_env(tmp_path), capture_output=True, text=True,
                           timeout=300)
    assert piped.returncode == 0 and "Traceback" not in piped.stderr, piped.stderr
    assert (moved / "overlap_throughput.md").is_file()
    assert json.loads((moved / "overlap_throughput.json").read_text()) == redo
    assert redo["nodes"] == ["relu", "softmax", "abs"]
    assert [x["wall_s"] for x in redo["results"]] == [x["wall_s"] for x in second]
    assert redo["results"][1]["nodes"]["softmax"]["aa_median_abs_delta"] == again["nodes"]["softmax"]["aa_median_abs_delta"]
    # an interrupted side did not end: neither a side run nor a finished node
    table = moved / "overlap-2" / "after" / "ops_status.csv"
    with open(table, newline="") as fh:
        reader = csv.DictReader(fh)
        fields, rows = reader.fieldnames, list(reader)
    cut = next(row for row in rows if row["run_name"] == "relu")
    cut["status"] = "INTERRUPTED"
    with open(table, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    r = run(tmp_path, "--report-only", "--overlap", "1", "2", "--out", moved)
    assert r.returncode == 0, r.stdout + r.stderr
    part = json.loads((moved / "overlap_throughput.json").read_text())["results"][1]
    assert part["nodes"]["relu"]["status"] == "PASS/INTERRUPTED"
    assert part["side_runs"] == redo["results"][1]["side_runs"] - 1
    assert part["nodes_finished"] == redo["results"][1]["nodes_finished"] - 1
    r = run(tmp_path, "--report-only", "--overlap", "1", "4", "--out", moved)
    assert r.returncode == 2 and "holds no batch for every --overlap value" in r.stderr


def test_nodes_per_hour_counts_only_the_nodes_the_batch_finished(tmp_path):
    """A batch cut by --budget-s: the node left PENDING is not in the rate; one whose side A
    failed (side B NOT_RUN) is done."""
    out = tmp_path / "ovl"
    # each start reserves 1 s x 2 sides + grace 10 + 5 = 17 s of the 18: relu starts, times
    # out after 1 s (side B NOT_RUN), and softmax may no longer start
    r = run(tmp_path, "--ops", "relu", "softmax", "--overlap", "1", "--devices", "0", "--out", out,
            "--op-timeout", "1", "--budget-s", "18", ZL_STUB_PLAN="relu=slow,softmax=slow", ZL_STUB_SLOW_S="30")
    assert r.returncode == 3, r.stdout + r.stderr
    res = json.loads((out / "overlap_throughput.json").read_text())["results"][0]
    assert {n: v["status"] for n, v in res["nodes"].items()} == {"relu": "TIMEOUT/NOT_RUN",
                                                                 "softmax": "PENDING/PENDING"}
    assert res["nodes_finished"] == 1 and res["wall_s"] > 0
    assert res["timeout_case_s"] == res["nodes"]["relu"]["case_s"] >= 1.0     # relu's side A timed out
    assert res["nodes_per_hour"] == round(1 / res["wall_s"] * 3600, 1)
    assert res["passed_side_runs"] == 0 and res["passed_side_runs_per_hour"] == 0.0   # a TIMEOUT times nothing
    assert f"| {res['side_runs_per_hour']} | 0.0 | 1 | {res['nodes_per_hour']} |" in r.stdout
    assert "--budget-s 18 reached after" in (out / "console-overlap-1.log").read_text()
    # relu timed out running, not waiting for the lock; killed while waiting, it is named
    assert res["cut_waiting"] == [] and "killed still waiting" not in r.stdout
    (out / "overlap-1" / "before" / "main" / "relu" / "lock_wait.json").write_text(
        json.dumps({"waited_s": 0.5, "waiting_since": time.time() - 1}))
    r = run(tmp_path, "--report-only", "--overlap", "1", "--out", out)
    res = json.loads((out / "overlap_throughput.json").read_text())["results"][0]
    assert res["cut_waiting"] == ["relu"] and res["nodes"]["relu"]["cut_waiting"] == 1
    assert "killed still waiting for the lock: relu." in r.stdout, r.stdout + r.stderr


def fake_smi(tmp_path, body: str) -> str:
    """PATH with an nvidia-smi stand-in (a sh script of `body`) first."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/sh\n" + body)
    (bindir / "nvidia-smi").chmod(0o755)
    return f"{bindir}{os.pathsep}{os.environ['PATH']}"


def test_a_resumed_batch_keeps_every_calls_gpu_samples(tmp_path):
    """The GPU-busy share of a batch made by several calls covers all of them: an H100 batch
    resumed after its first call's time limit reported only its second call's samples."""
    # two samples per sampling call; anything else: no GPU here
    path = fake_smi(tmp_path, 'case "$*" in *utilization.gpu*-lms*) echo 0; echo 40; exec sleep 60;; esac\nexit 1\n')
    out = tmp_path / "ovl"
    for call in (1, 2):
        r = run(tmp_path, "--ops", "relu", "--overlap", "2", "--devices", "0", "--out", out, PATH=path)
        assert r.returncode == 0, r.stdout + r.stderr
        res = json.loads((out / "overlap_throughput.json").read_text())["results"][0]
        assert res["calls"] == call and res["gpu"] == {"samples": 2 * call, "busy_share": 0.5, "mean_util": 20.0}


def test_bad_arguments_exit_2(tmp_path):
    r = run(tmp_path, "--ops", "relu", "--overlap", "0", "--out", tmp_path / "o")
    assert r.returncode == 2 and "--overlap values must be >= 1" in r.stderr
    r = run(tmp_path, "--out", tmp_path / "o")
    assert r.returncode == 2 and "no nodes" in r.stderr
    assert "--sample" in run(tmp_path, "--help").stdout


def test_upstream_runs_the_same_nodes_in_one_process_beside_the_batches(tmp_path):
    """--upstream: FlagGems' own harness (here the fake tree's, --mode kernel on the CPU) over
    the same nodes in one pytest process, each node's outcome and seconds read from the
    stamped log, the rate from its wall."""
    out = tmp_path / "ovl"
    r = run(tmp_path, "--ops", "relu", "amax", "--overlap", "1", "--devices", "0", "--out", out,
            "--upstream", "--upstream-mode", "kernel", "--dtypes", "float32")
    assert r.returncode == 0, r.stdout + r.stderr
    up = json.loads((out / "overlap_throughput.json").read_text())["upstream"]
    # amax's core shapes exceed the fake kernel's block limit: upstream fails it, as the tree does
    assert {n: v["outcome"] for n, v in up["nodes"].items()} == {"relu": "PASSED", "amax": "FAILED"}
    assert up["nodes_finished"] == 2 and up["rc"] == 1 and up["gpu"] is None
    assert up["nodes_per_hour"] == round(2 / up["wall_s"] * 3600, 1)
    # the failure is flagged: nodes/h counts it, passed/h does not
    assert (up["nodes_passed"], up["nodes_failed"], up["first_failed"]) == (1, 1, "amax")
    assert up["passed_per_hour"] == round(1 / up["wall_s"] * 3600, 1)
    assert "!!! upstream's one process failed 1 of 2 node(s), the first amax: compare passed/h, or run it again " \
           "with --upstream-leave-out amax" in r.stdout
    assert all(0 <= v["seconds"] <= up["wall_s"] for v in up["nodes"].values())
    log = (out / "upstream.log").read_text()
    assert "--mode kernel" in log and "--dtypes float32" in log
    assert all(ln.split(" ", 1)[0].replace(".", "", 1).isdigit() for ln in log.splitlines())
    assert "| relu | PASS/PASS NO_IR_DIFF" in r.stdout and "PASSED" in r.stdout
    # the report of a returned bundle includes it, with nothing rerun
    again = run(tmp_path, "--report-only", "--overlap", "1", "--out", out)
    assert again.returncode == 0 and json.loads((out / "overlap_throughput.json").read_text())["upstream"] == up
    # --upstream-only reruns the one-process run alone, leaving amax out; the batch is not run again
    console, walls = (out / "console-overlap-1.log").read_text(), (out / "walls-overlap-1.json").read_text()
    r = run(tmp_path, "--ops", "relu", "amax", "--overlap", "1", "--devices", "0", "--out", out, "--upstream-only",
            "--upstream-leave-out", "amax", "--upstream-mode", "kernel", "--dtypes", "float32")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (out / "console-overlap-1.log").read_text() == console and (out / "walls-overlap-1.json").read_text() == walls
    assert json.loads((out / "upstream.json").read_text())["left_out"] == ["amax"]
    data = json.loads((out / "overlap_throughput.json").read_text())
    assert list(data["upstream"]["nodes"]) == ["relu"] and data["upstream"]["left_out"] == ["amax"]
    assert data["results"][0]["rc"] is None and data["results"][0]["nodes"]["amax"]["status"] == "PASS/PASS"
    assert "Left out of the one-process run (--upstream-leave-out): amax" in r.stdout
    assert data["upstream"]["nodes_failed"] == 0 and "!!! upstream" not in r.stdout
    assert "amax" not in (out / "upstream.log").read_text().splitlines()[0]
    assert next(ln for ln in r.stdout.splitlines() if ln.startswith("| amax |")).endswith("| left out |")


def test_a_terminated_tool_takes_its_batch_with_it(tmp_path):
    """SIGTERM to the tool while a case hangs: run_batch.py (in its own session) and the case
    are killed with it, nothing of the batch is left running; exit 130 with one line."""
    out = tmp_path / "ovl"
    e = base_env(tmp_path, ZL_RUN_PYTEST=str(STUB), ZL_STUB_STATE=str(tmp_path), ZL_RUNS_ROOT=str(tmp_path / "runs"),
                 ZL_STUB_SWITCH="ZL_AA_NOOP", ZL_STUB_PLAN="relu=hang")
    proc = subprocess.Popen([sys.executable, str(TOOL), "--ops", "relu", "--overlap", "1", "--devices", "0",
                             "--out", str(out)], env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "relu.pids").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (tmp_path / "relu.pids").exists(), "the hanging case never started"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    err = proc.stderr.read()
    assert "overlap_throughput.py stopped" in err and "Traceback" not in err, err
    deadline = time.monotonic() + 30
    while procs_with_env(str(out)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert procs_with_env(str(out)) == []
    # the killed call's seconds count in the batch's wall, for the call that resumes it
    walls = json.loads((out / "walls-overlap-1.json").read_text())
    assert len(walls) == 1 and walls[0] > 0


def test_reference_sets_each_nodes_aa_beside_another_runs(tmp_path):
    """--reference: the A/A of the nodes both runs measured, beside each other; a reference
    that is not an overlap_throughput.json exits 2 before any batch runs."""
    ref = tmp_path / "solo"
    r = run(tmp_path, "--ops", "relu", "softmax", "abs", "--overlap", "1", "--devices", "0", "--out", ref,
            ZL_STUB_B_SCALE="relu=1.02,softmax=1.10", ZL_STUB_PLAN="abs=fail")
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "over"
    r = run(tmp_path, "--ops", "relu", "softmax", "abs", "--overlap", "2", "--devices", "0", "--out", out,
            "--reference", ref / "overlap_throughput.json", ZL_STUB_B_SCALE="1.05")
    assert r.returncode == 0, r.stdout + r.stderr
    cmp = json.loads((out / "overlap_throughput.json").read_text())["reference"]
    c = cmp["per_overlap"]["2"]
    assert cmp["overlap"] == 1 and sorted(c["nodes"]) == ["relu", "softmax"]      # abs failed there
    assert [round(x, 6) for x in c["nodes"]["relu"]] == [0.02, 0.05]
    assert round(c["median_reference"], 6) == 0.06 and round(c["median"], 6) == 0.05 and c["no_higher"] == 1
    assert "| 2 | 2 | 6.00% | 5.00% | 1 |" in r.stdout and "| softmax | 10.00% | 5.00% |" in r.stdout
    for bad, needle in ((tmp_path / "nothing.json", "not an overlap_throughput.json"),
                        (ref / "overlap_throughput.json", "holds no overlap 4")):
        r = run(tmp_path, "--ops", "relu", "--overlap", "2", "--out", tmp_path / "never", "--reference", bad,
                "--reference-overlap", "4")
        assert r.returncode == 2 and needle in r.stderr, r.stderr
        assert not (tmp_path / "never").exists()


def test_the_lock_and_cpu_lines_are_read_with_and_without_the_shared_stretch_figures(tmp_path):
    """Runs overlapped before the shared stretches wrote no third figure, and before the share
    total no fourth: read as unknown, never as zero (raw bundles are reread with --report-only).
    The newest line is the one ExclusiveBench.summary writes."""
    from zl.timing.exclusive import ExclusiveBench
    import importlib.util
    spec = importlib.util.spec_from_file_location("overlap_throughput", REPO_ROOT / "benchmarks" / "overlap_throughput.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    head = "[timing-plugin] exclusive timing (overlap=8, lock /b/.timing-locks/device-0.lock): 12 do_bench call(s) "
    (tmp_path / "run.log").write_text(head + "held the device 7.125 s, waited 20.500 s\n")
    assert tool.log_figures(tmp_path) == ((7.125, 20.5, None, None, None), None, 0)
    (tmp_path / "run.log").write_text(head + "held the device 7.125 s, waited 20.500 s (3.250 s of it for GPU "
                                      "work while others timed); 1 test run(s) held it shared, 9 compile(s) outside\n")
    assert tool.log_figures(tmp_path) == ((7.125, 20.5, 3.25, None, None), None, 0)
    bench = ExclusiveBench(lambda *a, **k: None, str(tmp_path / "device-0.lock"), lambda: None)
    bench.stats.update(calls=12, held_s=7.125, waited_s=20.5, share_waited_s=3.25, stretches=1,
                       share_held_s=41.5, share_longest_s=6.0, share_takes=7, compiles=9)
    (tmp_path / "run.log").write_text("[timing-plugin] " + bench.summary(8) + "\n")
    assert tool.log_figures(tmp_path) == ((7.125, 20.5, 3.25, 41.5, 7.0), None, 0)
    bench.stats.update(aged_shares=2)       # two shares waited their age for a gap between timers
    (tmp_path / "run.log").write_text("[timing-plugin] " + bench.summary(8) + "\n")
    bench.close()
    assert tool.log_figures(tmp_path) == ((7.125, 20.5, 3.25, 41.5, 7.0), None, 2)
    (tmp_path / "run.log").write_text("[run] the run's processes used CPU: user 2.50 s sys 0.50 s\n")
    assert tool.log_figures(tmp_path) == (None, 3.0, 0)
    assert tool.log_figures(tmp_path / "missing") == (None, None, 0)


def test_a_side_run_counts_once_it_ended_and_a_node_is_finished_when_every_side_is_final():
    from zl.batch.status import node_finished, side_ran
    assert [side_ran(s) for s in ("PASS", "FAIL", "TIMEOUT", "NO_ROWS", "SKIP")] == [True] * 5
    assert [side_ran(s) for s in ("-", "NOT_RUN", "PENDING", "RUNNING", "INTERRUPTED")] == [False] * 5
    assert node_finished(["FAIL", "NOT_RUN"]) and node_finished(["PASS", "PASS"])
    assert not node_finished(["PASS", "-"]) and not node_finished(["PASS", "PENDING"])
    assert not node_finished(["INTERRUPTED", "NOT_RUN"])


def test_each_side_gets_the_sm_clock_it_timed_at(tmp_path):
    """With nvidia-smi answering (a stand-in printing one stamped H100 line every 50 ms), the sampler's
    stamped samples inside each side's timed stretches (lock_wait.json) give the clock that side
    timed at, and the report says how many nodes timed their sides at clocks apart."""
    path = fake_smi(tmp_path, "while :; do echo \"$(date '+%Y/%m/%d %H:%M:%S.%3N'), 0, 1980, 2619, 41, 122.35, 63\"; "
                              "sleep 0.05; done\n")
    out = tmp_path / "ovl"
    r = run(tmp_path, "--ops", "relu", "softmax", "--overlap", "2", "--devices", "0", "--out", out,
            ZL_STUB_PLAN="relu=lockwait,softmax=lockwait", ZL_STUB_TIMED_S="0.5", PATH=path)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "overlap_throughput.json").read_text())["results"][0]
    assert {n: v["timed_clock_mhz"] for n, v in res["nodes"].items()} == {"relu": [1980, 1980],
                                                                          "softmax": [1980, 1980]}
    c = res["clock_split"]
    assert (c["nodes"], c["clock_min"], c["clock_max"], c["apart_nodes"], c["aa_apart"]) == (2, 1980, 1980, [], None)
    assert ("Overlap 2: the sides timed at SM clocks of 1980-1980 MHz; 0 of 2 node(s) timed their sides more "
            "than 1% apart (A/A median n/a, the others 0.00%).") in r.stdout
    assert "Overlap 2: SM clock over busy samples: median 1980 MHz" in r.stdout
