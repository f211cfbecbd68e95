"""run_batch.py, ops/gen_inventory.py, partition.py and campaign.sh (zl/batch/).

Control flow (timeouts, retries, dtype fallbacks, SIGKILL + --resume) runs against
tests/fixtures/batch/stub_case.sh (ZL_RUN_PYTEST), which acts per operator in milliseconds;
one test goes through the real run_pytest.sh and the fake FlagGems tree.
"""

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runner import FAKE_FLAGGEMS_DIR, REPO_ROOT, base_env
from zl.batch import inventory as inv
from zl.batch import partition as pt
from zl.batch import shard
from zl.batch.select import SelectionError, Selector, read_dismiss

STUB = REPO_ROOT / "tests" / "fixtures" / "batch" / "stub_case.sh"


def batch(tmp_path, *args, stub=True, timeout=120, **env):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.setdefault("ZL_RUNS_ROOT", str(tmp_path / "runs"))
    if stub:
        env.setdefault("ZL_RUN_PYTEST", str(STUB))
        env.setdefault("ZL_STUB_STATE", str(tmp_path))
        env.setdefault("ZL_STUB_TRACE", str(tmp_path / "trace"))
    return subprocess.run([sys.executable, str(REPO_ROOT / "run_batch.py"), *map(str, args)],
                          cwd=str(tmp_path), env=base_env(home, **env), capture_output=True,
                          text=True, timeout=timeout)


def status(batch_dir):
    with open(Path(batch_dir) / "ops_status.csv", newline="") as fh:
        return {r["run_name"]: r for r in csv.DictReader(fh)}


def trace(tmp_path):
    p = tmp_path / "trace"
    return [ln.split() for ln in p.read_text().splitlines()] if p.exists() else []


def most_at_once(times_file: Path) -> int:
    """The largest number of cases running at one instant, from the stub's start/end stamps."""
    events = []
    for line in times_file.read_text().splitlines():
        what, _op, _dev, t = line.split()
        events.append((float(t), 1 if what == "start" else -1))
    running = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):   # an end before a start at a tie
        running += step
        peak = max(peak, running)
    return peak


def pid_alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def batch_processes(batch_id_part):
    """pids whose environment carries a ZL_BATCH_ID containing batch_id_part."""
    out = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            data = env.read_bytes()
        except OSError:
            continue
        if f"ZL_BATCH_ID={batch_id_part}".encode() in data and pid_alive(int(env.parent.name)):
            out.append(int(env.parent.name))
    return out


# ---------------------------------------------------------------- inventory

@pytest.fixture(scope="module")
def fake_inv():
    return inv.scan_tree(FAKE_FLAGGEMS_DIR, "main")


def test_inventory_scans_statically_with_duplicates_subpackages_and_skips(fake_inv):
    by = {e.run_name: e for e in fake_inv}
    # one function name in two files: both spelled <op>@<op_file>, neither keeps the bare name
    assert "zl_dup" not in by
    assert by["zl_dup@zl_batch"].test_file == "test_zl_batch.py"
    sub = by["zl_dup@zl_sub"]
    assert sub.test_file == "test_ZL/test_zl_sub.py" and sub.collected == "3"
    assert sub.node("/x") == "/x/benchmark/test_ZL/test_zl_sub.py::test_zl_dup"
    assert by["zl_skipped"].marked_skip == "1" and by["zl_hang"].marked_skip == "0"
    assert by["softmax"].benchmark_class == "UnaryReductionBenchmark"
    assert by["softmax"].markers == "softmax" and by["gelu_backward"].op_file == "gelu"
    assert "benchmark.test_zl_batch" not in sys.modules   # read, never imported


def test_gen_inventory_cli_and_the_committed_upstream_csv(tmp_path):
    out = tmp_path / "inv.csv"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "ops/gen_inventory.py"), "--repo", "main",
                        "--root", str(FAKE_FLAGGEMS_DIR), "--commit", "abc123", "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    bad = subprocess.run([sys.executable, str(REPO_ROOT / "ops/gen_inventory.py"), "--repo", "main",
                          "--root", str(tmp_path / "none"), "-o", str(tmp_path / "x.csv")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no benchmark/ directory" in bad.stderr and not (tmp_path / "x.csv").exists()
    entries, source = inv.read_csv(out)
    assert inv.source_commit(source) == "abc123"
    assert entries == inv.scan_tree(FAKE_FLAGGEMS_DIR, "main")
    # the CSV is used only for a tree at its commit; any other tree is scanned
    ops_dir = tmp_path
    (ops_dir / "inventory_main.csv").write_text(out.read_text().replace("softmax", "softmax_csv"))
    assert "softmax_csv" in {e.op for e in inv.load_for_tree("main", FAKE_FLAGGEMS_DIR, ops_dir, "abc123")[0]}
    assert "softmax_csv" not in {e.op for e in inv.load_for_tree("main", FAKE_FLAGGEMS_DIR, ops_dir, "fff")[0]}
    # upstream, as committed
    up, src = inv.read_csv(REPO_ROOT / "ops/inventory_main.csv")
    assert inv.source_commit(src).startswith("ed2508bcb")
    names = {e.run_name for e in up}
    assert len(up) == len(names) == 1122
    assert {"nextafter_@nextafter_", "nextafter_@nextafter", "softmax"} <= names
    assert sum(e.marked_skip == "1" for e in up) == 3
    assert any(e.test_file.startswith("test_FLA/") for e in up)


def test_bad_inventory_input_is_a_named_error(tmp_path):
    (tmp_path / "benchmark").mkdir()
    (tmp_path / "benchmark" / "test_bad.py").write_text("def test_x(:\n")
    with pytest.raises(inv.InventoryError, match="test_bad.py: not parseable"):
        inv.scan_tree(tmp_path, "main")
    with pytest.raises(inv.InventoryError, match="no benchmark/"):
        inv.scan_tree(tmp_path / "nothing", "main")


# ---------------------------------------------------------------- selection

def test_selection_syntax(fake_inv, tmp_path):
    sel = Selector({"main": fake_inv})
    cases, _ = sel.select(["softmax", "main:relu", "zl_dup@zl_sub", "softmax"])
    assert [c.run_name for c in cases] == ["softmax", "relu", "zl_dup@zl_sub"]
    with pytest.raises(SelectionError, match="defined in 2 files; use one of: zl_dup@zl_batch, zl_dup@zl_sub"):
        sel.resolve("zl_dup")
    with pytest.raises(SelectionError, match="close matches: softmax"):
        sel.resolve("softmx")
    with pytest.raises(SelectionError, match="no inventory for repo 'vllm'"):
        sel.resolve("vllm:fused_marlin_moe")
    dismiss = tmp_path / "dismiss.txt"
    dismiss.write_text("# c\nmain:relu  broken upstream\nexp  no baseline\n")
    assert read_dismiss(dismiss) == {("main", "relu"): "broken upstream", ("main", "exp"): "no baseline"}
    cases, notes = sel.select(all_ops=True, dismiss=read_dismiss(dismiss))
    names = {c.run_name for c in cases}
    assert "zl_skipped" not in names and "relu" not in names and "exp" not in names
    assert "softmax" in names and "--all left out 1 marked skip and 2 dismissed" in notes
    assert "zl_skipped" in {c.run_name for c in sel.select(all_ops=True, include_skipped=True)[0]}
    dismiss.write_text("relu\n")
    with pytest.raises(SelectionError, match="'relu' has no reason"):
        read_dismiss(dismiss)


def test_sharding_is_stable_across_order_and_selection(fake_inv):
    devs = ["0", "1", "2"]
    full = shard.by_hash(fake_inv, devs)
    where = {c.run_name: d for d, cs in full.items() for c in cs}
    assert sum(1 for cs in full.values() if cs) >= 2           # it does spread
    rev = shard.by_hash(list(reversed(fake_inv))[:4], devs)     # other order, fewer cases
    assert all(where[c.run_name] == d for d, cs in rev.items() for c in cs)
    weights = {e.run_name: float(i + 1) for i, e in enumerate(fake_inv)}
    balanced, missing = shard.by_weight(fake_inv, ["0", "1"], weights)
    assert missing == 0
    loads = [sum(weights[c.run_name] for c in cs) for cs in balanced.values()]
    assert abs(loads[0] - loads[1]) <= max(weights.values())
    assert balanced["0"][0].run_name == max(weights, key=weights.get)   # longest first


# ---------------------------------------------------------------- command line

@pytest.mark.parametrize("args, needle", [
    (["--ops", "softmx"], "unknown operator 'softmx' in repo main; close matches: softmax"),
    (["--ops", "softmax", "--devices", "0", "--gpus", "1"], "--devices and --gpus"),
    (["--ops", "softmax", "--op-timeout", "0"], "--op-timeout: must be > 0"),
    (["--ops", "softmax", "--op-timeout", "soon"], "--op-timeout: not a number"),
    (["--resume"], "--resume needs --batch-dir"),
    (["--ops", "softmax", "--dtype-fallback", "newest"], "argument --dtype-fallback: invalid choice: 'newest'"),
    (["--ops", "softmax", "--dtype-fallback", "first"], "--dtype-fallback first picks the dtype measured where "
                                                        "upstream refuses --dtypes; give --dtypes"),
    (["--ops", "softmax", "--backend", "tpu"], "unknown backend 'tpu'"),
    ([], "nothing selected"),
])
def test_bad_input_exits_2_naming_the_problem(tmp_path, args, needle):
    r = batch(tmp_path, *args)
    assert r.returncode == 2 and needle in r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "runs").exists()


def test_help_starts_nothing(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    inv_before = (REPO_ROOT / "ops/inventory_main.csv").stat().st_mtime_ns
    for script in ("run_batch.py", "partition.py", "ops/gen_inventory.py"):
        r = subprocess.run([sys.executable, str(REPO_ROOT / script), "--help"], cwd=str(work),
                           capture_output=True, text=True,
                           env=base_env(tmp_path, ZL_RUNS_ROOT=tmp_path / "runs", ZL_RUN_PYTEST="/bin/false"))
        assert r.returncode == 0 and "exit codes" in r.stdout.lower(), script
    r = subprocess.run(["bash", str(REPO_ROOT / "campaign.sh"), "--help"], capture_output=True, text=True,
                       env=base_env(tmp_path))
    assert r.returncode == 0 and "Exit codes:" in r.stdout
    assert list(work.iterdir()) == [] and not (tmp_path / "runs").exists()
    assert (REPO_ROOT / "ops/inventory_main.csv").stat().st_mtime_ns == inv_before


# ---------------------------------------------------------------- case control flow

def test_timeout_retries_and_dtype_fallbacks(tmp_path):
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "softmax", "zl_hang", "zl_flaky", "abs", "amax", "exp", "zl_skipped",
              "--devices", "3,5", "--op-timeout", "2", "--kill-grace", "0.5", "--dtypes", "float16",
              "--batch-dir", bd, PARALLEL_WARMUP_GPUS="2", REPLAY_FROM="/nowhere", OUT_DIR="/nowhere",
              CUDA_VISIBLE_DEVICES="7",
              ZL_STUB_PLAN="zl_hang=hang,zl_flaky=flaky,abs=dtype,amax=rescue,exp=fail,zl_skipped=skip")
    assert r.returncode == 0, r.stdout + r.stderr
    st = status(bd)
    assert {k: v["status"] for k, v in st.items()} == {
        "softmax": "PASS", "zl_hang": "TIMEOUT", "zl_flaky": "PASS", "abs": "PASS", "amax": "PASS",
        "exp": "FAIL", "zl_skipped": "SKIP"}
    calls = {}
    for op, dev, vis, dtypes, inherited, replay in trace(tmp_path):
        calls.setdefault(op, []).append(dtypes)
        assert dev == vis and dev in ("3", "5") and inherited == "inherited=-" and replay == "replay=-"
    # hang: killed with its child (TERM ignored -> KILL), rc 124, marker, no retry
    assert calls["zl_hang"] == ["float16"] and st["zl_hang"]["return_code"] == "124"
    pids = [int(p) for p in (tmp_path / "zl_hang.pids").read_text().split()]
    assert not any(pid_alive(p) for p in pids)
    assert "CELL_TIMEOUT op=zl_hang" in (bd / "main/zl_hang/run.log").read_text()
    # flaky: one retry, the first attempt's log kept
    assert "rc=1->0" in st["zl_flaky"]["notes"] and (bd / "main/zl_flaky/run.attempt1.log").is_file()
    # upstream's dtype refusal: rerun without the restriction
    assert calls["abs"] == ["float16", "-"] and "dtype_fallback" in st["abs"]["notes"]
    # another zero-row failure: one retry (same rc repeats -> stop), then one unrestricted try
    assert calls["amax"] == ["float16", "float16", "-"] and "dtype_rescue" in st["amax"]["notes"]
    assert calls["exp"] == ["float16", "float16", "-"] and "rc=1->1->1" in st["exp"]["notes"]
    assert "reason=test_exp.py::test_exp: planted failure" in st["exp"]["notes"]
    assert st["softmax"]["rows_success"] == "2" and st["softmax"]["timer"] == "cuda_graph"
    done = {p.parent.name for p in bd.glob("main/*/.complete")}
    assert done == {"softmax", "zl_flaky", "abs", "amax", "zl_skipped"}
    assert (bd / "summary.csv").is_file() and "1 x test_exp.py::test_exp" in r.stdout


def test_dtype_fallback_first_measures_in_the_same_run_and_a_screen_keeps_it(tmp_path):
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "abs", "relu", "amax", "--switch", "ZL_TEST_SWITCH", "--devices", "0",
              "--dtypes", "float16", "--dtype-fallback", "first", "--batch-dir", bd,
              ZL_STUB_SWITCH="ZL_TEST_SWITCH", ZL_STUB_PLAN="abs=dtype,amax=rescue")
    assert r.returncode == 0, r.stdout + r.stderr
    calls = {}
    for op, *_, dtypes, _inherited, _replay in trace(tmp_path):
        calls.setdefault(op, []).append(dtypes)
    a, b = status(bd / "before"), status(bd / "after")
    # upstream no longer refuses: one attempt per side, both asking float16, no rerun
    assert calls["abs"] == ["float16", "float16"] and not (bd / "before/main/abs/run.attempt1.log").exists()
    assert "dtype_fallback=first:int32" in a["abs"]["notes"].split(";") and "rc=" not in a["abs"]["notes"]
    assert "dtype_fallback=first:int32" in b["abs"]["notes"].split(";")
    assert "dtype_fallback" not in a["relu"]["notes"] and calls["relu"] == ["float16", "float16"]
    # another zero-row failure is still rescued unrestricted, and side B follows it there
    assert calls["amax"] == ["float16", "float16", "-", "-"] and "dtype_rescue" in a["amax"]["notes"]
    assert "dtype_fallback=first" not in a["amax"]["notes"]
    with open(bd / "screen.tsv", newline="") as fh:
        rows = {x["run_name"]: x for x in csv.DictReader(fh, delimiter="\t")}
    # the screen names the dtype measured, so partition.py hands the campaign one abs takes
    assert {k: v["dtypes"] for k, v in rows.items()} == {"abs": "int32", "relu": "float16", "amax": "<all>"}
    assert {v["dtype_fallback"] for v in rows.values()} == {"first"}
    assert json.loads((bd / "batch.json").read_text())["conditions"]["dtype_fallback"] == "first"
    # policy all, with ZL_DTYPE_FALLBACK=first in the batch's environment: the batch's option
    # decides (the variable is dropped from the cases'), nothing recorded
    bd2 = tmp_path / "b2"
    r = batch(tmp_path, "--ops", "abs", "--devices", "0", "--dtypes", "float16", "--batch-dir", bd2,
              ZL_STUB_PLAN="abs=dtype", ZL_DTYPE_FALLBACK="first", ZL_STUB_TRACE=str(tmp_path / "trace2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dtype_fallback" in status(bd2)["abs"]["notes"].split(";")
    assert [t[3] for t in (ln.split() for ln in (tmp_path / "trace2").read_text().splitlines())] == ["float16", "-"]
    assert "dtype_fallback" not in json.loads((bd2 / "batch.json").read_text())["conditions"]
    assert "dtype_fallback" not in json.loads((bd2 / "main/abs/run_identity.json").read_text())


def test_sigkill_mid_batch_then_resume(tmp_path):
    bd = tmp_path / "b"
    env = dict(ZL_STUB_PLAN="softmax=pass,relu=hang", ZL_RUN_PYTEST=str(STUB),
               ZL_STUB_STATE=str(tmp_path), ZL_STUB_TRACE=str(tmp_path / "trace"))
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "run_batch.py"), "--ops", "softmax",
                             "relu", "abs", "--devices", "0", "--batch-dir", str(bd), "--kill-grace", "0.5"],
                            env=base_env(home, **env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pidfile = tmp_path / "relu.pids"   # written atomically once the hanging case runs
    deadline = time.monotonic() + 120
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pidfile.exists()
    hung = [int(p) for p in pidfile.read_text().split()]
    soft_before = (bd / "main/softmax/run.log").stat().st_mtime_ns
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60     # the reaper: TERM, 0.5 s grace, KILL, then it exits
    while (any(pid_alive(p) for p in hung) or batch_processes("b-")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(p) for p in hung) and not batch_processes("b-")
    st = status(bd)
    assert [st[k]["status"] for k in ("softmax", "relu", "abs")] == ["PASS", "RUNNING", "PENDING"]
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", **{**env, "ZL_STUB_PLAN": "relu=pass"})
    assert r.returncode == 0, r.stdout + r.stderr
    st2 = status(bd)
    assert list(st2) == ["softmax", "relu", "abs"]                      # one row per case
    assert all(v["status"] == "PASS" for v in st2.values())
    assert st2["softmax"] == st["softmax"]                               # reused untouched
    assert (bd / "main/softmax/run.log").stat().st_mtime_ns == soft_before
    assert [t[0] for t in trace(tmp_path)] == ["softmax", "relu", "relu", "abs"]


def test_ctrl_c_kills_running_cases_and_marks_them(tmp_path):
    bd = tmp_path / "b"
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "run_batch.py"), "--ops", "relu", "abs",
                             "--devices", "0", "--batch-dir", str(bd), "--kill-grace", "0.5"],
                            env=base_env(home, ZL_RUN_PYTEST=str(STUB), ZL_STUB_STATE=str(tmp_path),
                                         ZL_STUB_PLAN="relu=hang"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            # a suite started as a background job inherits SIGINT ignored, and
                            # Python keeps an ignored SIGINT: Ctrl-C is what is tested here
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    pidfile = tmp_path / "relu.pids"   # written atomically once the hanging case runs
    deadline = time.monotonic() + 120
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pidfile.exists(), "the hanging case never started"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    hung = [int(p) for p in pidfile.read_text().split()]
    deadline = time.monotonic() + 60   # SIGKILL is sent to the group; dying takes a moment
    while any(pid_alive(p) for p in hung) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(p) for p in hung)
    st = status(bd)
    assert st["relu"]["status"] == "INTERRUPTED" and st["abs"]["status"] == "PENDING"


def test_budget_stops_starting_cases_then_resume_finishes(tmp_path):
    bd = tmp_path / "b"
    # A case starts while elapsed + its worst case (op timeout 2 + grace 0.5 + 5) fits the
    # 9 s budget: softmax, if started within 1.5 s (a loaded machine's start-up); not relu,
    # after softmax's 2 s timeout.
    r = batch(tmp_path, "--ops", "softmax", "relu", "abs", "--devices", "0", "--batch-dir", bd,
              "--op-timeout", "2", "--kill-grace", "0.5", "--budget-s", "9",
              ZL_STUB_PLAN="softmax=slow,relu=slow,abs=slow", ZL_STUB_SLOW_S="60")
    assert r.returncode == 3 and "--resume --batch-dir" in r.stdout, r.stdout + r.stderr
    st = status(bd)
    assert st["softmax"]["status"] == "TIMEOUT" and st["abs"]["status"] == "PENDING"
    # the line before "not run" says the budget held them back, the reserve and the way out
    lines = r.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if "case(s) not run; continue with" in ln)
    assert lines[at].startswith("!!! [batch] 2 case(s) not run")
    why = lines[at - 1]
    assert why.startswith("!!! [batch] --budget-s 9 reached after "), r.stdout
    assert ("--op-timeout 2 s x 1 side(s) + --kill-grace 0.5 s + 5 s = 7.5 s; "
            "give a larger --budget-s or a smaller --op-timeout") in why
    # said before the first case too: how long cases may start
    assert ("[batch] --budget-s 9: cases start during its first 2 s; a case starts only if it can end "
            "within the budget") in r.stdout
    assert r.stdout.index("cases start during its first") < r.stdout.index("main:softmax")
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0")
    assert "--budget-s" not in r.stdout
    # a budget below one case's reserve is said at once
    r2 = batch(tmp_path, "--ops", "relu", "--devices", "0", "--batch-dir", tmp_path / "tiny",
               "--op-timeout", "2", "--kill-grace", "0.5", "--budget-s", "5")
    assert r2.returncode == 3 and "!!! [batch] --budget-s 5 is below one case's reserve: no case will start" \
        in r2.stdout, r2.stdout + r2.stderr
    assert r.returncode == 0 and all(v["status"] == "PASS" for k, v in status(bd).items()
                                     if k != "softmax")
    assert status(bd)["softmax"]["status"] == "PASS"    # a TIMEOUT is rerun by --resume


def test_replay_root_and_balance(tmp_path):
    src = tmp_path / "src"
    (src / "main" / "softmax").mkdir(parents=True)
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "softmax", "relu", "--devices", "0", "--batch-dir", bd,
              "--replay-root", src)
    assert r.returncode == 0, r.stdout + r.stderr
    st = status(bd)
    assert st["softmax"]["status"] == "PASS" and st["relu"]["status"] == "FAIL"
    assert "no replay source" in st["relu"]["notes"]
    assert trace(tmp_path)[0][5] == f"replay={src.resolve()}/main/softmax"
    weights = tmp_path / "w.csv"
    weights.write_text("repo,run_name,elapsed_ms\nmain,softmax,9000\nmain,relu,5000\nmain,abs,4000\n")
    r = batch(tmp_path, "--ops", "softmax", "relu", "abs", "--devices", "0,1", "--balance", weights, "--list")
    lines = dict(ln.split("\t")[:2] for ln in r.stdout.splitlines() if ln.startswith("main:"))
    assert lines == {"main:softmax": "device=0", "main:relu": "device=1", "main:abs": "device=1"}


def test_real_run_pytest_dtype_fallback_and_runtime_skip(tmp_path):
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "abs", "zl_hang", "--devices", "0", "--dtypes", "float16",
              "--batch-dir", bd, "--op-timeout", "200", stub=False, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    st = status(bd)
    assert st["abs"]["status"] == "PASS" and "dtype_fallback" in st["abs"]["notes"]
    assert int(st["abs"]["rows_success"]) > 0 and st["abs"]["device"] == "0"
    assert "can't be supported by this op" in (bd / "main/abs/run.attempt1.log").read_text()
    assert st["zl_hang"]["status"] == "SKIP" and "skipped=1" in st["zl_hang"]["notes"]
    for name in ("run.log", "run_identity.json", "shapes.yaml", "autotune_records", "ttgir"):
        assert (bd / "main/abs" / name).exists(), name
    with open(bd / "summary.csv", newline="") as fh:
        assert any(row["op"] == "abs" and row["row_status"] == "SUCCESS" for row in csv.DictReader(fh))
    # costs.tsv: abs's figures from its run.log (on the CPU every shape is a fallback row);
    # the skipped case's plugins logged their lines with nothing timed
    with open(bd / "costs.tsv", newline="") as fh:
        costs = {row["run_name"]: row for row in csv.DictReader(fh, delimiter="\t")}
    assert float(costs["abs"]["timer_fallback_s"]) > 0 and float(costs["abs"]["results_s"]) >= 0
    # the CPU of each case's processes (run_pytest.sh's `times` line): pytest imported torch
    assert float(costs["abs"]["cpu_s"]) > 0.5 and float(costs["zl_hang"]["cpu_s"]) > 0.5
    assert "(CPU of the run's processes, 1 case(s))" in r.stdout
    assert float(costs["zl_hang"]["timer_s"]) == 0 and costs["zl_hang"]["status"] == "SKIP"
    assert "[batch] costs: 1 PASS case(s) with cost lines" in r.stdout


def test_real_run_pytest_dtype_fallback_first(tmp_path):
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "abs", "relu", "--devices", "0", "--dtypes", "float16", "--dtype-fallback",
              "first", "--batch-dir", bd, "--op-timeout", "200", stub=False, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    st = status(bd)
    assert st["abs"]["status"] == "PASS" and "dtype_fallback=first:float32" in st["abs"]["notes"].split(";")
    assert "rc=" not in st["abs"]["notes"] and not (bd / "main/abs/run.attempt1.log").exists()
    assert "DTYPE_FALLBACK op=abs asked=float16 measured=float32" in (bd / "main/abs/run.log").read_text()
    assert st["relu"]["status"] == "PASS" and "dtype_fallback" not in st["relu"]["notes"]
    for op in ("abs", "relu"):
        ident = json.loads((bd / "main" / op / "run_identity.json").read_text())
        assert ident["dtype_fallback"] == "first" and ident["dtypes"] == "float16", op
    with open(bd / "summary.csv", newline="") as fh:
        rows = [row for row in csv.DictReader(fh) if row["row_status"] == "SUCCESS"]
    assert {row["dtype"] for row in rows if row["op"] == "abs"} == {"torch.float32"}
    assert {row["dtype"] for row in rows if row["op"] == "relu"} == {"torch.float16"}
    assert int(st["abs"]["rows_success"]) == sum(row["op"] == "abs" for row in rows) > 0


def test_switch_screen_judges_like_ab_rlc_and_feeds_partition(tmp_path):
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "relu", "abs", "exp", "amax", "mm", "--switch", "ZL_TEST_SWITCH",
              "--devices", "0,1", "--batch-dir", bd, "--dtypes", "float16",
              ZL_STUB_SWITCH="ZL_TEST_SWITCH", ZL_STUB_IR_MAP="abs=same,exp=none",
              ZL_STUB_PLAN="amax=fail,mm=dtype")
    assert r.returncode == 0, r.stdout + r.stderr
    with open(bd / "screen.tsv", newline="") as fh:
        rows = {x["run_name"]: x for x in csv.DictReader(fh, delimiter="\t")}
    assert {k: v["verdict"] for k, v in rows.items()} == {
        "relu": "IR_CHANGED@ttgir", "abs": "NO_IR_DIFF", "exp": "NO_TRITON", "amax": "NO_ROWS",
        "mm": "IR_CHANGED@ttgir"}
    assert rows["relu"]["ir_levels"] == "ttgir" and rows["relu"]["results"].startswith("n/a")
    assert rows["relu"]["kernels_after"] == "1" and rows["relu"]["timer"] == "cuda_graph"
    assert rows["mm"]["dtypes"] == "<all>" and rows["relu"]["dtypes"] == "float16"
    assert status(bd / "after")["amax"]["status"] == "NOT_RUN"
    calls = [t for t in trace(tmp_path) if t[0] in ("relu", "mm")]
    # side B replays side A on the same device, without the dtype A had to drop
    assert ["relu", "float16", f"replay={bd.resolve()}/before/main/relu"] in [[t[0], t[3], t[5]] for t in calls]
    assert [t[3] for t in calls if t[0] == "mm"] == ["float16", "-", "-"]
    assert len({t[1] for t in trace(tmp_path) if t[0] == "relu"}) == 1
    r = subprocess.run([sys.executable, str(REPO_ROOT / "partition.py"), "--screen", str(bd / "screen.tsv"),
                        "--devices", "0", "--format", "shell"], capture_output=True, text=True)
    assert r.returncode == 0 and sorted(r.stdout.split("\t")[1].split()) == ["mm:mm", "relu:relu:float16"]
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--switch", "ZL_TEST_SWITCH", "--devices", "0,1",
              ZL_STUB_SWITCH="ZL_TEST_SWITCH", ZL_STUB_PLAN="mm=dtype")
    assert r.returncode == 0 and "4 reused, 1 to run" in r.stdout, r.stdout
    with open(bd / "screen.tsv", newline="") as fh:
        assert [x["verdict"] for x in csv.DictReader(fh, delimiter="\t")].count("IR_CHANGED@ttgir") == 3


# ---------------------------------------------------------------- partition.py and campaign.sh

SCREEN_HEADER = ("op\top_file\tdtypes\trows_before\trows_after\tkernels_before\tkernels_after\tcvt_before\t"
                 "cvt_after\telapsed_before\telapsed_after\trc_before\trc_after\tverdict\n")


def write_screen(path, rows):
    text = SCREEN_HEADER + "".join(
        f"{op}\t{op}\t{dt}\t6\t6\t1\t1\t0\t0\t{w}\t{w}\t0\t0\t{v}\n" for op, dt, w, v in rows)
    path.write_text(text)
    return path


def test_partition_plan_floor_and_formats(tmp_path):
    assignment = pt.plan([("a", 5), ("b", 4), ("c", 3), ("d", 3), ("e", 1)], ["0", "1"])
    assert pt.loads(assignment) == {"0": 8.0, "1": 8.0}
    st = pt.stats(pt.plan([("topk", 70), ("x", 10), ("y", 10)], ["0", "1", "2"]))
    assert st.heaviest_sets_floor and st.critical_path == 70 and st.floor == 70
    assert not pt.stats(assignment).heaviest_sets_floor
    screen = write_screen(tmp_path / "s.tsv", [("topk", "<all>", 300, "IR_CHANGED"),
                                               ("mm", "float16,bfloat16", 60, "IR_CHANGED"),
                                               ("relu", "<all>", 30, "IR_CHANGED"),
                                               ("exp", "<all>", 30, "NO_IR_DIFF")])
    run = lambda *a: subprocess.run([sys.executable, str(REPO_ROOT / "partition.py"), "--screen",
                                     str(screen), *a], capture_output=True, text=True, cwd=str(REPO_ROOT))
    r = run("--devices", "0,1", "--rounds", "4")
    assert r.returncode == 0, r.stderr
    assert "the heaviest operator alone sets the floor: 40.0 min" in r.stdout
    assert "not planned (1): exp(NO_IR_DIFF)" in r.stdout
    r = run("--devices", "0,1", "--format", "shell", "--extra", "softmax:softmax")
    assert r.stdout.splitlines() == ["0\ttopk:topk\t600\t3600",
                                     "1\tmm:mm:float16,bfloat16 relu:relu softmax:softmax\t180\t1080"]
    assert run("--devices", "0,0").returncode == 2
    assert run("--devices", "0", "--verdict", "NO_TRITON").returncode == 3


def test_campaign_dry_run_prints_the_plan_and_creates_nothing(tmp_path):
    screen = write_screen(tmp_path / "s.tsv", [("relu", "<all>", 10, "IR_CHANGED"),
                                               ("abs", "<all>", 5, "IR_CHANGED"),
                                               ("exp", "<all>", 5, "NO_TRITON")])
    root = tmp_path / "camp"
    r = subprocess.run(["bash", str(REPO_ROOT / "campaign.sh")], capture_output=True, text=True,
                       env=base_env(tmp_path, SWITCH="ZL_TEST_SWITCH", SCREEN=screen, DEVICES="4,6",
                                    DRY_RUN="1", CAMPAIGN_ROOT=root, ROUNDS="2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CUDA_VISIBLE_DEVICES=4 ZL_DEVICE=4 ZL_ISOLATE_TUNER_CACHE=1" in r.stdout
    assert f'AB_ROOT={root}/device6 SWITCH=ZL_TEST_SWITCH ROUNDS=2 OPS="abs:abs"' in r.stdout
    assert "exp" not in r.stdout.split("DRY_RUN")[1] and not root.exists()
    bad = subprocess.run(["bash", str(REPO_ROOT / "campaign.sh")], capture_output=True, text=True,
                         env=base_env(tmp_path, SWITCH="ZL_TEST_SWITCH", SCREEN=screen, DRY_RUN="maybe"))
    assert bad.returncode == 2 and "DRY_RUN" in bad.stderr


def test_campaign_runs_one_ab_repeat_per_device_and_merges(tmp_path):
    screen = write_screen(tmp_path / "s.tsv", [("relu", "<all>", 10, "IR_CHANGED"),
                                               ("abs", "<all>", 5, "IR_CHANGED")])
    root = tmp_path / "camp"
    r = subprocess.run(["bash", str(REPO_ROOT / "campaign.sh")], capture_output=True, text=True, timeout=240,
                       env=base_env(tmp_path, SWITCH="ZL_TEST_SWITCH", SCREEN=screen, DEVICES="4,6",
                                    CAMPAIGN_ROOT=root, ROUNDS="2", TELEMETRY_INTERVAL="0",
                                    ZL_RUN_PYTEST=REPO_ROOT / "tests/fixtures/runlogs/stub_run_pytest.sh",
                                    ZL_STUB_SWITCH="ZL_TEST_SWITCH", ZL_STUB_FAIL="abs/r2_B"))
    assert r.returncode == 0, r.stdout + r.stderr
    with open(root / "status.tsv", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert {(x["device"], x["op"]) for x in rows} == {("4", "relu"), ("6", "abs")}
    # relu: 2 rounds x 2 sides; abs stops at its failed cell (round 2 runs B first)
    assert len(rows) == 4 + 3 and (root / "device4" / "relu" / "r2_B" / "run.log").is_file()
    assert [x["rc"] for x in rows if x["op"] == "abs" and x["round"] == "2"] == ["1"]
    assert ">>> cells: 7, non-zero rc: 1" in r.stdout


def test_partition_selects_every_level_of_a_changed_verdict():
    from zl.batch.partition import REPEAT_VERDICTS, verdict_selected
    for v in ("IR_CHANGED@ttgir", "IR_CHANGED@llir", "IR_CHANGED@ptx", "BINARY_CHANGED"):
        assert verdict_selected(v, REPEAT_VERDICTS), v
    for v in ("NO_IR_DIFF", "VARIANTS_DIFFER", "WRONG_RESULTS", "NO_ROWS", "NO_TRITON", "IR_CHANGEDX"):
        assert not verdict_selected(v, REPEAT_VERDICTS), v
    assert verdict_selected("IR_CHANGED@llir", "IR_CHANGED@llir")
    assert not verdict_selected("IR_CHANGED@ttgir", "IR_CHANGED@llir")
    assert verdict_selected("NO_ROWS", "")


def test_a_broken_interpreter_stops_the_batch_before_any_case(tmp_path):
    """Like the A/B drivers: triton and flag_gems are imported once, for real, first."""
    bad = tmp_path / "py"
    bad.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named flag_gems' >&2\nexit 3\n")
    bad.chmod(0o755)
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "abs", "--devices", "0", "--batch-dir", bd, ZL_PYTHON=str(bad))
    assert r.returncode == 4, r.stdout + r.stderr
    assert "No module named flag_gems" in r.stderr
    assert not (bd / "ops_status.csv").exists() and trace(tmp_path) == []


def test_cases_get_a_private_tuner_cache_unless_told_otherwise(tmp_path):
    script = tmp_path / "seen.sh"
    script.write_text('#!/bin/bash\nmkdir -p "$OUT_DIR"\necho "${ZL_ISOLATE_TUNER_CACHE-unset}" '
                      '>> "$ZL_SEEN"\necho "collected 0 items" > "$OUT_DIR/run.log"\n')
    seen = tmp_path / "seen"
    for value, want in ((None, "1"), ("0", "0")):
        extra = {} if value is None else {"ZL_ISOLATE_TUNER_CACHE": value}
        seen.write_text("")
        r = batch(tmp_path, "--ops", "abs", "--devices", "0", "--retries", "0", "--batch-dir",
                  tmp_path / f"b{want}", ZL_RUN_PYTEST=str(script), ZL_SEEN=str(seen), **extra)
        assert r.returncode == 0, r.stdout + r.stderr
        assert set(seen.read_text().split()) == {want}


def test_a_case_spawned_after_an_abort_is_killed_at_once():
    """The Ctrl-C race: a worker's Popen returned, the abort took its snapshot of the groups,
    then the worker registered its case. The late case must die with the batch."""
    from zl.batch.executor import GroupGuard
    guard = GroupGuard(0.5)
    try:
        guard.abort_all()
        t0 = time.monotonic()
        proc = guard.spawn([sys.executable, "-c", "import time; time.sleep(600)"])
        # killed at spawn, not after its sleep; the bound leaves a loaded machine its start-up
        assert proc.wait(timeout=120) != 0 and time.monotonic() - t0 < 120
        guard.release(proc)
    finally:
        guard.close()


def test_cases_share_one_bytecode_cache_for_the_call_then_it_is_removed(tmp_path):
    """--bytecode-cache shared: every case's interpreter caches bytecode in one TMPDIR folder of
    the call and side, also under the PYTHONDONTWRITEBYTECODE=1 the harness sets; the second
    case of a side reads what the first compiled; the folder is gone after the call. auto here (torch ships
    bytecode, or no torch) and off leave the environment alone; a user's prefix is kept."""
    tmp, log = tmp_path / "tmp", tmp_path / "pyc.log"
    tmp.mkdir()
    r = batch(tmp_path, "--ops", "relu", "softmax", "--devices", "0", "--bytecode-cache", "shared",
              "--batch-dir", tmp_path / "shared", TMPDIR=tmp, ZL_STUB_PYCACHE=log)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [dict(kv.split("=", 1) for kv in ln.split()[1:]) for ln in log.read_text().splitlines()]
    prefixes = {ln["prefix"] for ln in lines}
    assert len(lines) == 2 and len(prefixes) == 1
    prefix = Path(prefixes.pop())
    assert [ln["write"] for ln in lines] == ["1", "1"]
    assert sorted(ln["had"] for ln in lines) == ["0", "1"] and {ln["has"] for ln in lines} == {"1"}
    assert prefix.name == "cases" and prefix.parent.parent == tmp and prefix.parent.name.startswith("zl_pycache.")
    assert f"bytecode cache shared by this call's cases: {prefix.parent}" in r.stdout
    assert not prefix.parent.exists() and list(tmp.iterdir()) == []
    # a screen: each side's cases share one folder, and no side reads another side's bytecode
    log.write_text("")
    r = batch(tmp_path, "--ops", "relu", "softmax", "--devices", "0", "--bytecode-cache", "shared",
              "--switch", "ZL_STUB_FLAG", "--batch-dir", tmp_path / "screen", TMPDIR=tmp, ZL_STUB_PYCACHE=log)
    assert r.returncode == 0, r.stdout + r.stderr
    seen = [dict(kv.split("=", 1) for kv in ln.split()[1:]) for ln in log.read_text().splitlines()]
    by_side = {}
    for ln in seen:
        by_side.setdefault(Path(ln["prefix"]).name, []).append(ln["had"])
    assert {k: sorted(v) for k, v in by_side.items()} == {"before": ["0", "1"], "after": ["0", "1"]}
    assert len({Path(ln["prefix"]).parent for ln in seen}) == 1 and list(tmp.iterdir()) == []
    for mode in ("auto", "off"):
        log.write_text("")
        r = batch(tmp_path, "--ops", "relu", "--devices", "0", "--bytecode-cache", mode,
                  "--batch-dir", tmp_path / mode, TMPDIR=tmp, ZL_STUB_PYCACHE=log)
        assert r.returncode == 0, r.stdout + r.stderr
        assert log.read_text().split()[1:3] == ["prefix=-", "write=0"], mode
        assert "bytecode cache shared" not in r.stdout
    own = tmp_path / "own"
    log.write_text("")
    r = batch(tmp_path, "--ops", "relu", "--devices", "0", "--bytecode-cache", "shared",
              "--batch-dir", tmp_path / "own_prefix", TMPDIR=tmp, ZL_STUB_PYCACHE=log,
              PYTHONPYCACHEPREFIX=own)
    assert r.returncode == 0, r.stdout + r.stderr
    assert log.read_text().split()[1:3] == [f"prefix={own}", "write=0"]
    assert list(tmp.iterdir()) == []      # the user's prefix, under the user's own PYTHONDONTWRITEBYTECODE


def test_bytecode_cache_auto_follows_whether_the_cases_torch_ships_bytecode(tmp_path):
    from types import SimpleNamespace
    from zl.batch.execute import wants_bytecode_cache
    torch_dir = tmp_path / "torch"
    (torch_dir / "__pycache__").mkdir(parents=True)

    def plan(mode, path=str(torch_dir), python="3.12.3"):
        return SimpleNamespace(args=SimpleNamespace(bytecode_cache=mode),
                               conditions={"toolchain": {"python": python, "torch": {"path": path}}})
    assert wants_bytecode_cache(plan("auto"))                   # compiled from source by every case
    (torch_dir / "__pycache__" / "__init__.cpython-312.pyc").write_bytes(b"")
    assert not wants_bytecode_cache(plan("auto"))
    assert wants_bytecode_cache(plan("auto", python="3.11.7"))  # not for this Python
    assert not wants_bytecode_cache(plan("auto", path=""))      # no torch found: nothing to cache
    assert wants_bytecode_cache(plan("shared")) and not wants_bytecode_cache(plan("off", python="3.11.7"))
