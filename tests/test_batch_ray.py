"""run_batch.py --executor ray (zl/batch/ray_executor.py, its node check zl/batch/ray_nodes.py) on a
real local Ray cluster.

One cluster per module: a head without GPUs and two worker nodes with one fake GPU each
(ray.cluster_utils.Cluster, loopback), which state no FlagGems path of their own (so they use
the driver's). Cases are the stub (tests/fixtures/batch/stub_case.sh), as in
tests/test_batch.py, so the module spends its time in Ray, not in pytest runs. The last tests
add a third node that states its own tree path and, through a test interpreter, reports
another device (TestNodeChecks).
"""

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

from harness.runner import FAKE_FLAGGEMS_DIR, REPO_ROOT, base_env
from test_batch import STUB, batch, batch_processes, most_at_once, pid_alive, status, trace

SELECTION = ("softmax", "abs", "amax", "exp", "zl_flaky", "zl_skipped", "relu", "gelu_backward", "zl_hang")
PLAN = "abs=dtype,amax=rescue,exp=fail,zl_flaky=flaky,zl_skipped=skip,relu=slow,gelu_backward=slow,zl_hang=hang"


def node_args(**env):
    """A worker node: one fake GPU; the environment of its `ray start` states no tree path
    (empty = not stated) unless `env` does, whatever this process's environment holds."""
    return dict(num_cpus=2, num_gpus=1, env_vars={"FLAGGEMS_DIR": "", "FLAGGEMS_VLLM_DIR": "", **env})


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster   # requirements-ci.txt: CI runs these on real Ray
    c = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=1, num_gpus=0, include_dashboard=False,
        # a removed node is declared dead in ~1.5 s, not Ray's default ~15 s
        _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 3}))
    c.workers = [c.add_node(**node_args()) for _ in range(2)]
    c.wait_for_nodes()
    yield c
    c.shutdown()


def ray_batch(cluster, tmp_path, *args, **env):
    return batch(tmp_path, "--executor", "ray", "--ray-address", cluster.address, *args, timeout=180, **env)


def notes(row):
    return dict(p.split("=", 1) for p in row["notes"].split(";") if "=" in p)


def spans(path, unfinished_s=0.0):
    """{op: (start, end)} from the stub's ZL_STUB_TIMES lines; a killed case (no end line)
    held its GPU `unfinished_s` (its --op-timeout)."""
    out = defaultdict(dict)
    for what, op, _dev, t in (ln.split() for ln in path.read_text().splitlines()):
        out[op][what] = float(t)
    return {op: (v["start"], v.get("end", v["start"] + unfinished_s)) for op, v in out.items()}


def test_statuses_match_the_local_executor_one_case_per_gpu(cluster, tmp_path):
    (tmp_path / "local").mkdir()
    (tmp_path / "ray").mkdir()
    common = dict(ZL_STUB_PLAN=PLAN, ZL_STUB_SLOW_S="0.6")
    opts = ("--ops", *SELECTION, "--dtypes", "float16", "--op-timeout", "2", "--kill-grace", "0.5")
    local = batch(tmp_path / "local", *opts, "--devices", "0,1", "--batch-dir", tmp_path / "local/b", **common)
    assert local.returncode == 0, local.stdout + local.stderr
    r = ray_batch(cluster, tmp_path / "ray", *opts, "--batch-dir", tmp_path / "ray/b",
                  ZL_STUB_TIMES=tmp_path / "times", **common)
    assert r.returncode == 0, r.stdout + r.stderr
    lo, st = status(tmp_path / "local/b"), status(tmp_path / "ray/b")
    same = ("status", "return_code", "rows_total", "rows_success", "timer")
    assert {k: [v[f] for f in same] for k, v in st.items()} == {k: [v[f] for f in same] for k, v in lo.items()}
    assert st["exp"]["status"] == "FAIL" and "dtype_rescue" in st["amax"]["notes"]
    # --op-timeout on the node: TIMEOUT, the hanging case's whole group killed (TERM ignored)
    assert st["zl_hang"]["status"] == "TIMEOUT" and st["zl_hang"]["return_code"] == "124"
    assert not any(pid_alive(int(p)) for p in (tmp_path / "ray/zl_hang.pids").read_text().split())
    # the case directories came back whole into the driver's batch directory
    for name, row in st.items():
        d = tmp_path / "ray/b/main" / name
        assert row["out_dir"] == str(d.resolve())
        assert sorted(p.name for p in d.iterdir()) == sorted(p.name for p in (tmp_path / "local/b/main" / name).iterdir())
        assert (tmp_path / "ray/b/console/main" / f"{name}.log").is_file()
    assert (tmp_path / "ray/b/summary.csv").is_file() and (tmp_path / "ray/b/costs.tsv").is_file()
    assert not (tmp_path / "ray/b/.ray_incoming").exists() or not any((tmp_path / "ray/b/.ray_incoming").iterdir())
    # each row says where it ran; both nodes took cases, never two at once on one fake GPU
    where = {k: notes(v) for k, v in st.items()}
    ids = {n.node_id[:8] for n in cluster.workers}
    assert {w["node"] for w in where.values()} == ids and all(w["host"] for w in where.values())
    by_node = defaultdict(list)
    for op, span in spans(tmp_path / "times", unfinished_s=2.0).items():
        by_node[where[op]["node"]].append(span)
    for runs in by_node.values():
        runs.sort()
        assert all(a[1] <= b[0] for a, b in zip(runs, runs[1:])), runs
    record = (tmp_path / "ray/b/batch.json").read_text()
    assert '"executor": "ray"' in record and cluster.address in record


def test_screen_keeps_both_sides_of_a_case_on_one_gpu_and_rows_name_their_device(cluster, tmp_path):
    bd = tmp_path / "rb"
    # run_identity.json's device_name as a real run records it: relu "ran on" another device
    wrapper = tmp_path / "named_case.sh"
    wrapper.write_text(
        f'bash "{STUB}"; rc=$?\n'
        '"$ZL_PYTHON" - <<\'PY\'\nimport json, os, pathlib\n'
        'p = pathlib.Path(os.environ["OUT_DIR"]) / "run_identity.json"\nd = json.loads(p.read_text())\n'
        'd["device_name"] = "NVIDIA H100" if d["op"] == "relu" else "NVIDIA H200"\np.write_text(json.dumps(d))\nPY\n'
        'exit $rc\n')
    r = ray_batch(cluster, tmp_path, "--ops", "relu", "abs", "exp", "amax", "--switch", "ZL_TEST_SWITCH",
                  "--batch-dir", bd, ZL_STUB_SWITCH="ZL_TEST_SWITCH", ZL_STUB_IR_MAP="abs=same,exp=none",
                  ZL_STUB_PLAN="amax=fail", ZL_RUN_PYTEST=wrapper)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(bd / "screen.tsv", newline="") as fh:
        rows = {x["run_name"]: x for x in csv.DictReader(fh, delimiter="\t")}
    assert {k: v["verdict"] for k, v in rows.items()} == {
        "relu": "IR_CHANGED@ttgir", "abs": "NO_IR_DIFF", "exp": "NO_TRITON", "amax": "NO_ROWS"}
    before, after = status(bd / "before"), status(bd / "after")
    assert after["amax"]["status"] == "NOT_RUN"
    for op in ("relu", "abs", "exp"):
        assert notes(before[op])["node"] == notes(after[op])["node"]     # one task per pair
    # side B replayed side A's directory on its node (a scratch path there, not the driver's)
    replays = [t[5] for t in trace(tmp_path) if t[0] == "relu" and t[5] != "replay=-"]
    assert len(replays) == 1 and replays[0].endswith("/before/main/relu") and str(bd) not in replays[0]
    assert notes(after["relu"])["device_name"] == "NVIDIA H100" and notes(before["abs"])["device_name"] == "NVIDIA H200"
    assert "!!! [batch] MIXED HARDWARE: cases of this batch ran on NVIDIA H100, NVIDIA H200" in r.stdout


def test_rounds_run_in_one_task_every_side_replaying_side_a_on_its_node(cluster, tmp_path):
    bd = tmp_path / "rr"
    r = ray_batch(cluster, tmp_path, "--ops", "relu", "--switch", "ZL_TEST_SWITCH", "--rounds", "2",
                  "--batch-dir", bd, ZL_STUB_SWITCH="ZL_TEST_SWITCH", ZL_STUB_SIDES=str(tmp_path / "sides"))
    assert r.returncode == 0, r.stdout + r.stderr
    runs = [ln.split() for ln in (tmp_path / "sides").read_text().splitlines()]
    assert [(side, switch) for _, side, switch, _ in runs] == [
        ("before", "0"), ("after", "1"), ("r2_B", "1"), ("r2_A", "0")]
    # every later side replayed side A's directory on the node (a scratch path), not the driver's
    assert all(rep.endswith("/before/main/relu") and str(bd) not in rep for *_, rep in runs[1:])
    sides = ("before", "after", "r2_B", "r2_A")
    assert len({notes(status(bd / s)["relu"])["node"] for s in sides}) == 1     # one task per case
    assert all((bd / s / "main/relu/.complete").is_file() for s in sides)


def test_driver_sigkill_leaves_no_case_running_then_resume(cluster, tmp_path):
    bd = tmp_path / "rb"
    env = dict(ZL_STUB_PLAN="relu=hang", ZL_RUN_PYTEST=str(STUB), ZL_STUB_STATE=str(tmp_path),
               ZL_STUB_TRACE=str(tmp_path / "trace"))
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "run_batch.py"), "--executor", "ray",
                             "--ray-address", cluster.address, "--ops", "softmax", "relu", "abs",
                             "--batch-dir", str(bd), "--kill-grace", "0.5"],
                            env=base_env(home, **env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pidfile = tmp_path / "relu.pids"
    deadline = time.monotonic() + 120
    while not (pidfile.exists() and bd.joinpath("ops_status.csv").exists()
               and status(bd)["softmax"]["status"] == "PASS") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pidfile.exists() and status(bd)["softmax"]["status"] == "PASS"
    hung = [int(p) for p in pidfile.read_text().split()]
    soft_before = (bd / "main/softmax/run.log").stat().st_mtime_ns
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60     # Ray ends the dead driver's job and its workers
    while (any(pid_alive(p) for p in hung) or batch_processes("rb-")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(p) for p in hung) and not batch_processes("rb-")
    st = status(bd)
    assert st["relu"]["status"] == "RUNNING" and st["softmax"]["status"] == "PASS"
    r = ray_batch(cluster, tmp_path, "--resume", "--batch-dir", bd, **{**env, "ZL_STUB_PLAN": "relu=pass"})
    assert r.returncode == 0, r.stdout + r.stderr
    st2 = status(bd)
    assert all(v["status"] == "PASS" for v in st2.values()) and st2["softmax"] == st["softmax"]
    assert (bd / "main/softmax/run.log").stat().st_mtime_ns == soft_before
    assert [t[0] for t in trace(tmp_path)].count("softmax") == 1


def ancestors(pid):
    out = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rfind(")") + 2:].split()[1])
        out.append(pid)
    return out


def case_processes(batch_id_part, op):
    """batch_processes() of one case: the environment's TEST_NODE names test_<op> (other cases
    of the batch run on the other node at the same time)."""
    out = []
    for pid in batch_processes(batch_id_part):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(b"TEST_NODE=") and e.endswith(f"::test_{op}".encode()) for e in env):
            out.append(pid)
    return out


def test_a_dead_node_s_case_finishes_on_the_other_node(cluster, tmp_path):
    bd = tmp_path / "rb"
    times = tmp_path / "times"
    proc = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "run_batch.py"), "--executor", "ray", "--ray-address", cluster.address,
         "--ops", "relu", "abs", "--batch-dir", str(bd), "--kill-grace", "0.5"],
        env=base_env(tmp_path, ZL_RUN_PYTEST=str(STUB), ZL_STUB_STATE=str(tmp_path), ZL_STUB_PLAN="relu=slow",
                     ZL_STUB_SLOW_S="3", ZL_STUB_TIMES=str(times), ZL_RUNS_ROOT=str(tmp_path / "runs")),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    raylets = {n.all_processes["raylet"][0].process.pid: i for i, n in enumerate(cluster.workers)}
    try:
        deadline = time.monotonic() + 120
        while not (times.exists() and "start relu" in times.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        # the node whose raylet runs the slow case (stub <- Ray worker <- raylet)
        on = {raylets[a] for p in case_processes("rb-", "relu") for a in ancestors(p) if a in raylets}
        assert len(on) == 1, "the slow case is not running on one worker node"
        dead = cluster.workers[on.pop()]
        cluster.remove_node(dead, allow_graceful=False)
        out, _ = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    i = cluster.workers.index(dead)
    cluster.workers[i] = cluster.add_node(**node_args())
    cluster.wait_for_nodes()
    assert proc.returncode == 0, out
    st = status(bd)
    assert all(v["status"] == "PASS" for v in st.values()), st
    alive, gone = cluster.workers[1 - i].node_id[:8], dead.node_id[:8]
    assert notes(st["relu"])["node"] == alive
    assert [k for k, v in st.items() if gone in v["notes"]] == ["relu"]
    assert "attempt_lost=" in st["relu"]["notes"] and "partial discarded" in st["relu"]["notes"]
    deadline = time.monotonic() + 30     # the dead worker's case group: killed by its reaper
    while batch_processes("rb-") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not batch_processes("rb-")

def test_without_ray_the_executor_exits_2_with_the_install_command(tmp_path):
    shim = tmp_path / "shim" / "ray"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named ray (test shim)')\n")
    env = {"PYTHONPATH": f"{tmp_path / 'shim'}{os.pathsep}{base_env(tmp_path)['PYTHONPATH']}"}
    r = batch(tmp_path, "--executor", "ray", "--ops", "softmax", "--batch-dir", tmp_path / "rb", **env)
    assert r.returncode == 2 and "pip install -e '.[ray]'" in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "rb").exists()
    # the command names an extra that exists
    with open(REPO_ROOT / "pyproject.toml", "rb") as fh:
        extras = tomllib.load(fh)["project"]["optional-dependencies"]
    assert [d.split(">")[0] for d in extras["ray"]] == ["ray"]
    r = batch(tmp_path, "--ray-address", "127.0.0.1:1", "--ops", "softmax", "--batch-dir", tmp_path / "rb")
    assert r.returncode == 2 and "--ray-address needs --executor ray" in r.stderr
    for opt in ("--ray-exclude-failing-nodes",):   # --allow-mixed-hardware also serves local devices
        r = batch(tmp_path, opt, "--ops", "softmax", "--batch-dir", tmp_path / "rb")
        assert r.returncode == 2 and f"{opt} needs --executor ray" in r.stderr
    r = batch(tmp_path, "--executor", "ray", "--devices", "0", "--ops", "softmax", "--batch-dir", tmp_path / "rb")
    assert r.returncode == 2 and "drop --devices/--gpus/--balance" in r.stderr
    assert not (tmp_path / "rb").exists()


def test_a_head_that_does_not_answer_or_a_cluster_without_gpus_exits_2(tmp_path):
    with socket.socket() as s:     # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = batch(tmp_path, "--executor", "ray", "--ray-address", f"127.0.0.1:{port}", "--ops", "softmax",
              "--batch-dir", tmp_path / "rb", timeout=60)
    assert r.returncode == 2 and f"nothing answers at --ray-address 127.0.0.1:{port}" in r.stderr, r.stderr
    assert not (tmp_path / "rb").exists()
    # "local": a new one-host cluster (here without a GPU), even beside the module's cluster
    r = batch(tmp_path, "--executor", "ray", "--ray-address", "local", "--ops", "softmax",
              "--batch-dir", tmp_path / "rb", timeout=120)
    assert r.returncode == 2 and "offers no GPU resource" in r.stderr, r.stderr
    r = batch(tmp_path, "--executor", "ray", "--backend", "musa", "--ops", "softmax", "--batch-dir", tmp_path / "rb")
    assert r.returncode == 2 and "backend musa has no Ray accelerator resource" in r.stderr, r.stderr
    assert not (tmp_path / "rb").exists()


def test_share_device_puts_n_cases_on_one_gpu_and_marks_them(cluster, tmp_path):
    ops = ("relu", "abs", "exp", "amax")
    r = ray_batch(cluster, tmp_path, "--ops", *ops, "--share-device", "2", "--batch-dir", tmp_path / "rb",
                  ZL_STUB_PLAN=",".join(f"{op}=slow" for op in ops), ZL_STUB_SLOW_S="2",
                  ZL_STUB_TIMES=tmp_path / "times")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FUNCTIONAL ONLY" in r.stdout
    st = status(tmp_path / "rb")
    assert all(v["status"] == "PASS" and "shared_device=2" in v["notes"] for v in st.values())
    assert all('"device_share": 2' in (tmp_path / "rb/main" / op / "run_identity.json").read_text() for op in ops)
    assert most_at_once(tmp_path / "times") > 2   # two fake GPUs: more than two at once only if they are shared


def test_overlap_puts_n_cases_on_one_gpu_each_under_its_nodes_lock(cluster, tmp_path):
    """--overlap 2 on Ray: two cases per GPU at once, timing valid (no FUNCTIONAL ONLY), each
    handed the lock file of its GPU in its node's temporary directory (the driver's batch
    directory is not on the node), the same file for the cases that shared a GPU."""
    ops = ("relu", "abs", "exp", "amax")
    r = ray_batch(cluster, tmp_path, "--ops", *ops, "--overlap", "2", "--batch-dir", tmp_path / "rb",
                  ZL_STUB_PLAN=",".join(f"{op}=slow" for op in ops), ZL_STUB_SLOW_S="2",
                  ZL_STUB_TIMES=tmp_path / "times")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FUNCTIONAL ONLY" not in r.stdout
    st = status(tmp_path / "rb")
    assert all(v["status"] == "PASS" and "overlap=2" in v["notes"] for v in st.values()), st
    idents = {op: json.loads((tmp_path / "rb/main" / op / "run_identity.json").read_text()) for op in ops}
    assert all(i["device_overlap"] == 2 for i in idents.values())
    locks = {op: Path(i["stub_timing_lock"]) for op, i in idents.items()}
    assert all(p.name.startswith("device-") and p.parent.name.startswith("zl_bench-timing-locks-rb-")
               and tmp_path / "rb" not in p.parents for p in locks.values()), locks
    # one lock per node and GPU: the cases that ran on one GPU of one node took one file, and
    # the two nodes (one host here, each with its GPU 0) two files
    by_gpu = defaultdict(set)
    for op in ops:
        by_gpu[(notes(st[op])["node"], st[op]["device"])].add(locks[op])
    assert len(by_gpu) == 2 and all(len(files) == 1 for files in by_gpu.values()), (by_gpu, st)
    assert len(set(locks.values())) == 2
    assert most_at_once(tmp_path / "times") > 2   # two fake GPUs: more than two at once only two to a GPU


def test_executor_overhead_tool_reads_both_batches_of_the_same_nodes(cluster, tmp_path):
    """benchmarks/executor_overhead.py: the local and the Ray batch of the same nodes, their
    statuses side by side (a planted failure fails under both), the per-case overhead from the
    two walls, where the Ray cases ran, and a bundle's report without its case directories."""
    tool = REPO_ROOT / "benchmarks" / "executor_overhead.py"
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(home, ZL_RUN_PYTEST=str(STUB), ZL_STUB_STATE=str(tmp_path), ZL_RUNS_ROOT=str(tmp_path / "runs"),
                   ZL_STUB_PLAN="exp=fail")

    def tool_run(*args):
        return subprocess.run([sys.executable, str(tool), *map(str, args)], env=env, capture_output=True,
                              text=True, timeout=240)
    out = tmp_path / "exo"
    r = tool_run("--ray-address", cluster.address, "--ops", "relu", "abs", "exp", "--devices", "0",
                 "--op-timeout", "20", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads((out / "executor_overhead.json").read_text())
    assert {n["node"]: (n["local"], n["ray"]) for n in s["nodes"]} == {
        "relu": ("PASS", "PASS"), "abs": ("PASS", "PASS"), "exp": ("FAIL", "FAIL")}
    assert s["statuses_identical"] and s["cases"] == 3 and s["rc"] == {"local": 0, "ray": 0}
    walls = {x: json.loads((out / f"walls-{x}.json").read_text()) for x in ("local", "ray")}
    assert s["overhead_per_case_s"] == round((sum(walls["ray"]) - sum(walls["local"])) / 3, 2)
    assert sum(s["ray_ran_on"].values()) == 3 and all(k.startswith(socket.gethostname()) for k in s["ray_ran_on"])
    assert s["case_dir_kib"]["max"] > 0 and 0 < s["returned_kib"]["max"] <= s["case_dir_kib"]["max"]
    assert "statuses identical: yes" in r.stdout and "| exp | FAIL | FAIL |" in r.stdout
    # a returned bundle: only the tables, no case directories; the same figures, the weights kept
    for x in ("local", "ray"):
        shutil.rmtree(out / x / "main")
    again = tool_run("--report-only", "--out", out)
    assert again.returncode == 0, again.stderr
    redo = json.loads((out / "executor_overhead.json").read_text())
    assert {k: redo[k] for k in ("nodes", "walls_s", "overhead_per_case_s", "case_dir_kib", "rc")} == \
        {k: s[k] for k in ("nodes", "walls_s", "overhead_per_case_s", "case_dir_kib", "rc")}
    # a case that never finished under one executor: the comparison says INCOMPLETE, no overhead
    table = out / "ray" / "ops_status.csv"
    with open(table, newline="") as fh:
        reader = csv.DictReader(fh)
        fields, rows = reader.fieldnames, list(reader)
    rows[0]["status"] = "INTERRUPTED"
    with open(table, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    cut = tool_run("--report-only", "--out", out)
    assert cut.returncode == 0, cut.stderr
    part = json.loads((out / "executor_overhead.json").read_text())
    assert part["unfinished"] == [rows[0]["run_name"]] and not part["statuses_identical"]
    assert part["overhead_per_case_s"] is None and part["walls_s"] == s["walls_s"]
    assert f"statuses identical: INCOMPLETE, 1 node(s) without a final status under both executors: " \
        f"{rows[0]['run_name']}" in cut.stdout
    bad = tool_run("--ops", "relu", "--out", tmp_path / "o")
    assert bad.returncode == 2 and "--ray-address" in bad.stderr
    assert tool_run("--report-only", "--out", tmp_path / "none").returncode == 2
    stub = tool_run("--stub", "--cases", "3")
    assert stub.returncode == 0 and "3 cases: direct" in stub.stdout and "batch layer overhead" in stub.stdout


def test_ctrl_c_cancels_the_tasks_and_marks_them_interrupted(cluster, tmp_path):
    bd = tmp_path / "rb"
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "run_batch.py"), "--executor", "ray",
                             "--ray-address", cluster.address, "--ops", "relu", "abs", "--batch-dir", str(bd),
                             "--kill-grace", "0.5"],
                            env=base_env(home, ZL_RUN_PYTEST=str(STUB), ZL_STUB_STATE=str(tmp_path),
                                         ZL_STUB_PLAN="relu=hang,abs=hang"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    pidfiles = [tmp_path / "relu.pids", tmp_path / "abs.pids"]
    deadline = time.monotonic() + 120
    while not all(p.exists() for p in pidfiles) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(p.exists() for p in pidfiles), "the hanging cases never started"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    hung = [int(x) for p in pidfiles for x in p.read_text().split()]
    deadline = time.monotonic() + 60
    while any(pid_alive(p) for p in hung) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(p) for p in hung)
    assert {v["status"] for v in status(bd).values()} == {"INTERRUPTED"}


def test_a_crashing_worker_is_retried_within_the_budget(cluster, tmp_path):
    # the case kills its Ray worker ($PPID of run_pytest.sh): relu every time, abs once
    wrapper = tmp_path / "crash_case.sh"
    wrapper.write_text(
        'op="${TEST_NODE##*::test_}"\n'
        'if [ "$op" = relu ] || { [ "$op" = abs ] && [ ! -e "$ZL_STUB_STATE/abs.crashed" ]; }; then\n'
        '  touch "$ZL_STUB_STATE/$op.crashed"; kill -9 "$PPID"; sleep 30\nfi\n'
        f'exec bash "{STUB}"\n')
    r = ray_batch(cluster, tmp_path, "--ops", "relu", "abs", "--ray-retries", "1",
                  "--batch-dir", tmp_path / "rb", ZL_RUN_PYTEST=wrapper)
    assert r.returncode == 0, r.stdout + r.stderr
    st = status(tmp_path / "rb")
    assert st["abs"]["status"] == "PASS" and st["abs"]["notes"].count("attempt_lost=") == 1
    assert (tmp_path / "rb/main/abs/.complete").is_file()
    assert st["relu"]["status"] == "FAIL" and "ray task failed (1 retries" in st["relu"]["notes"]
    deadline = time.monotonic() + 30     # the reaper kills a dead worker's case group on its own
    while batch_processes("rb-") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not batch_processes("rb-")


# ---------------------------------------------------------------- the node check (no cluster)

def test_tree_differences_name_the_commit_or_the_working_state():
    from zl.batch.ray_nodes import CLEAN_WORKTREE, batch_device, judge_node, tree_difference
    drv = {"path": "/d/FlagGems", "commit": "a" * 40, "worktree": CLEAN_WORKTREE}
    assert tree_difference("FLAGGEMS_DIR", dict(drv, path="/n/FlagGems"), drv) == ""
    assert tree_difference("FLAGGEMS_DIR", dict(drv, path="/n", commit="b" * 40), drv) == (
        f"FLAGGEMS_DIR /n is at commit {'b' * 40}, the driver's /d/FlagGems at {'a' * 40}")
    assert "has uncommitted changes (a dirty tree); the driver's has none" in tree_difference(
        "FLAGGEMS_DIR", dict(drv, worktree="git-sha256:1"), drv)
    assert "has no uncommitted changes; the driver's has some" in tree_difference(
        "FLAGGEMS_DIR", drv, dict(drv, worktree="git-sha256:1"))
    # the paths each side changes, where the identities list them (a node of an older zl_bench: none)
    assert tree_difference("FLAGGEMS_DIR", dict(drv, worktree="git-sha256:1", changed=["src/x.py"], changed_total=1),
                           dict(drv, changed=[], changed_total=0)).endswith(
        "the driver's has none (/d/FlagGems; only in the node: src/x.py)")
    assert tree_difference("FLAGGEMS_DIR", dict(drv, worktree="git-sha256:1"),
                           dict(drv, changed=[], changed_total=0)).endswith(
        "(/d/FlagGems; the node's record predates the list of changed paths; the driver changes no path)")
    stat = {"path": "/d", "commit": "", "worktree": "stat-sha256:1"}
    assert "sizes or mtimes" in tree_difference("FLAGGEMS_DIR", dict(stat, worktree="stat-sha256:2"), stat)
    # zl_bench: the driver's checkout before or after the check (edited meanwhile) both match
    node = {"host": "h", "node_id": "n" * 16, "stated": {}, "trees": {}, "problems": [],
            "zl_bench": dict(drv, worktree="git-sha256:new")}
    assert judge_node(node, {}, [drv, dict(drv, worktree="git-sha256:new")]) == ([], [])
    trees, problems = judge_node(node, {}, [drv, drv])
    assert trees == [] and problems == [
        "the zl_bench checkout /d/FlagGems at the same commit has uncommitted changes (a dirty tree); "
        "the driver's has none (/d/FlagGems)"]
    # the batch's device: the one of most GPUs (ties by name), a named one, a --resume's record
    nodes = [{"device_name": "H200", "device_arch": "9.0", "gpus": 8},
             {"device_name": "H100", "device_arch": "9.0", "gpus": 4},
             {"device_name": "H100", "device_arch": "9.0", "gpus": 4}]
    assert batch_device(nodes, None, None) == ("H100", "9.0")
    assert batch_device(nodes[:2], None, None) == ("H200", "9.0")
    assert batch_device(nodes, "H200", None) == ("H200", "9.0")
    assert batch_device(nodes, "A100", None) == ("A100", "")
    assert batch_device(nodes, None, {"name": "B200", "arch": "10.0"}) == ("B200", "10.0")


# ---------------------------------------------------------------- the node check (a third node)

H100 = "NVIDIA H100 80GB HBM3"
WRAPPER = """#!/bin/bash
# The cases' interpreter on a node whose tree lies under $ZL_TEST_NODE_TREES/h100*: torch.cuda
# reports an H100; under .../broken*: no flag_gems on its path (an install without it).
case "${{FLAGGEMS_DIR:-}}" in
  "$ZL_TEST_NODE_TREES"/h100*) export PYTHONPATH="$ZL_TEST_NODE_TREES/fake_gpu${{PYTHONPATH:+:$PYTHONPATH}}" ;;
  "$ZL_TEST_NODE_TREES"/broken*) export PYTHONPATH="{repo}" ;;
esac
exec "{python}" "$@"
"""
# torch.cuda patched as it is imported (so a process that never imports torch pays nothing)
FAKE_GPU = f"""import importlib.abc, importlib.util, sys


class FakeGpu(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch.cuda":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.device_count = lambda: 1
            module.current_device = lambda: 0
            module.get_device_name = lambda device=None: {H100!r}
            module.get_device_capability = lambda device=None: (9, 0)
        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, FakeGpu())
"""
# records the tree each case ran against, then the stub
RECORD_PATHS = 'echo "${{TEST_NODE##*::test_}} $FLAGGEMS_DIR $TEST_NODE" >> "$ZL_STUB_STATE/paths"\nexec bash "{stub}"\n'


def copy_tree(dest):
    """The fake tree at another path, sizes and mtimes kept: the same stat identity."""
    shutil.copytree(FAKE_FLAGGEMS_DIR, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def point(link, target):
    tmp = link.with_name(link.name + ".new")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def git(*args, cwd):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True).stdout.strip()


def last_call(bd):
    return json.loads((bd / "batch.json").read_text())["calls"][-1]


@pytest.fixture(scope="class")
def odd(cluster, tmp_path_factory):
    """A third GPU node whose `ray start` environment states FLAGGEMS_DIR=<root>/flaggems, a
    link each test points at the tree it needs; the cases' interpreter is WRAPPER. Removed
    after TestNodeChecks, so the other tests see the module's two workers only."""
    root = tmp_path_factory.mktemp("odd_node").resolve()
    (root / "fake_gpu").mkdir()
    (root / "fake_gpu" / "sitecustomize.py").write_text(FAKE_GPU)
    py = root / "python"
    py.write_text(WRAPPER.format(repo=REPO_ROOT, python=sys.executable))
    py.chmod(0o755)
    link = root / "flaggems"
    point(link, FAKE_FLAGGEMS_DIR)
    node = cluster.add_node(**node_args(FLAGGEMS_DIR=str(link)))
    cluster.wait_for_nodes()
    yield type("Odd", (), dict(root=root, link=link, python=py, node=node, id=node.node_id[:8]))
    cluster.remove_node(node)


class TestNodeChecks:

    def run(self, cluster, odd, tmp_path, *args, **env):
        return ray_batch(cluster, tmp_path, *args, ZL_PYTHON=odd.python, ZL_TEST_NODE_TREES=odd.root, **env)

    def test_a_node_s_own_tree_path_and_other_hardware_left_out_or_marked_mixed(self, cluster, odd, tmp_path):
        h100 = copy_tree(odd.root / "h100")
        point(odd.link, h100)
        workers = {n.node_id[:8] for n in cluster.workers}
        env = dict(ZL_RUN_PYTEST=tmp_path / "record.sh")
        (tmp_path / "record.sh").write_text(RECORD_PATHS.format(stub=STUB))
        ops = ("--ops", "relu", "abs", "exp")
        # a timing batch: the device of most GPUs (the two cpu workers); the H100 node left out
        r = self.run(cluster, odd, tmp_path, *ops, "--batch-dir", tmp_path / "a", **env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"(node {odd.id}): 1 GPU(s), device {H100} (arch triton-interpreter)" in r.stdout
        assert (f"FLAGGEMS_DIR={h100}: EXCLUDED: its device {H100} (arch triton-interpreter) is not the "
                "batch's cpu (arch triton-interpreter)") in r.stdout
        assert "MIXED HARDWARE" not in r.stdout
        assert {notes(v)["node"] for v in status(tmp_path / "a").values()} <= workers
        ray_rec = last_call(tmp_path / "a")["ray"]
        assert ray_rec["device"] == {"name": "cpu", "arch": "triton-interpreter"} and not ray_rec["mixed_hardware"]
        # the conditions name the batch's device model, as the local executor's do
        assert json.loads((tmp_path / "a/batch.json").read_text())["conditions"]["device"] == {"models": ["cpu"]}
        mine = [n for n in ray_rec["nodes"] if n["node_id"].startswith(odd.id)]
        assert mine[0]["status"] == "excluded" and mine[0]["roots"] == {"main": str(h100)}
        assert mine[0]["stated"] == {"main": True} and mine[0]["torch"] and mine[0]["triton"]
        assert ray_rec["excluded"] == [f"{mine[0]['host']} (node {odd.id}): {mine[0]['reason']}"]
        # --allow-mixed-hardware: every node (three cases at once: one each), the batch and
        # each of its reports marked
        (tmp_path / "paths").unlink()
        r = self.run(cluster, odd, tmp_path, *ops, "--allow-mixed-hardware", "--batch-dir", tmp_path / "b",
                     ZL_STUB_PLAN="relu=slow,abs=slow,exp=slow", ZL_STUB_SLOW_S="1", **env)
        assert r.returncode == 0, r.stdout + r.stderr
        mixed = (f"MIXED HARDWARE: this batch runs on {H100} (arch triton-interpreter), cpu (arch "
                 "triton-interpreter)")
        assert f"!!! [batch] {mixed}" in r.stdout
        assert "!!! [batch-summary] MIXED HARDWARE: rows measured on" in r.stdout
        record = json.loads((tmp_path / "b/batch.json").read_text())
        assert any(w.startswith(mixed) for w in record["warnings"]) and record["calls"][-1]["ray"]["mixed_hardware"]
        st = status(tmp_path / "b")
        on_odd = [op for op, v in st.items() if notes(v)["node"] == odd.id]
        assert len(on_odd) == 1 and notes(st[on_odd[0]])["device_name"] == H100
        assert all(notes(st[op])["device_name"] == "cpu" for op in st if op not in on_odd)
        # the case on the H100 node ran against that node's tree; the others against the driver's
        ran = {op: (d, node) for op, d, node in (ln.split() for ln in (tmp_path / "paths").read_text().splitlines())}
        assert ran[on_odd[0]][0] == str(h100) and ran[on_odd[0]][1].startswith(f"{h100}/benchmark/")
        assert all(ran[op][0] == str(FAKE_FLAGGEMS_DIR) for op in ran if op not in on_odd)
        with open(tmp_path / "b/summary.csv", newline="") as fh:
            assert {r["device_name"] for r in csv.DictReader(fh)} == {H100, "cpu"}
        rep = subprocess.run([sys.executable, str(REPO_ROOT / "batch_summary.py"), "--batch", str(tmp_path / "b"),
                              "--json", str(tmp_path / "rep.json")], capture_output=True, text=True)
        assert rep.returncode == 0, rep.stdout + rep.stderr
        rep_json = json.loads((tmp_path / "rep.json").read_text())
        assert rep_json["mixed_hardware"] and "MIXED HARDWARE" in rep_json["timing_warning"]
        assert {o["device_name"] for o in rep_json["ops"]} == {H100, "cpu"}
        # a named device no node has: exit 2, nothing written; a --resume keeps its batch's device
        r = self.run(cluster, odd, tmp_path, *ops, "--ray-device-name", "NVIDIA A100", "--batch-dir",
                     tmp_path / "c", **env)
        assert r.returncode == 2 and (
            "no checked GPU node has the batch's device NVIDIA A100 (arch ?) (--ray-device-name); the nodes have: "
            f"{H100} (arch triton-interpreter), cpu (arch triton-interpreter); give --allow-mixed-hardware") in r.stderr
        assert not (tmp_path / "c").exists()
        r = self.run(cluster, odd, tmp_path, "--resume", "--ray-device-name", H100, "--batch-dir", tmp_path / "a", **env)
        assert r.returncode == 2 and ("--resume: the batch runs on cpu (arch triton-interpreter) (batch.json), "
                                      f"this call gives --ray-device-name '{H100}'") in r.stderr
        # resumed by the local executor, whose devices are not "cpu" (none named, or a real GPU): refused
        before = (tmp_path / "a/batch.json").read_bytes()
        r = batch(tmp_path, "--resume", "--batch-dir", tmp_path / "a", "--devices", "0", ZL_PYTHON=odd.python,
                  ZL_TEST_NODE_TREES=odd.root, **env)
        assert r.returncode == 2 and ("--resume: the batch was started on cpu (batch.json conditions.device), "
                                      "this call's devices are ") in r.stderr, r.stdout + r.stderr
        assert (tmp_path / "a/batch.json").read_bytes() == before

    def test_a_node_at_another_commit_or_with_a_dirty_tree_exits_2_before_any_case(self, cluster, odd, tmp_path):
        drv = copy_tree(tmp_path / "driver_tree")
        a = git("init", "-q", ".", cwd=drv) and git("add", "-A", cwd=drv) and git("commit", "-qm", "a", cwd=drv)
        other = odd.root / "commit_b"
        git("clone", "-q", str(drv), str(other), cwd=tmp_path)
        (other / "README.zl").write_text("another commit\n")
        git("add", "-A", cwd=other)
        b = git("commit", "-qm", "b", cwd=other)
        point(odd.link, other)
        r = self.run(cluster, odd, tmp_path, "--ops", "relu", "--batch-dir", tmp_path / "rb", FLAGGEMS_DIR=drv)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "1 of 3 GPU node(s) refused before any case (a node holds another FlagGems tree)" in r.stderr
        assert (f"(node {odd.id}): FLAGGEMS_DIR {other} is at commit {b}, the driver's {drv} at {a} "
                "(stated by its ray start environment)") in r.stderr
        assert "--ray-exclude-failing-nodes" in r.stderr and not (tmp_path / "rb").exists()
        dirty = odd.root / "dirty"
        git("clone", "-q", str(drv), str(dirty), cwd=tmp_path)
        (dirty / "benchmark" / "conftest.py").write_text("# edited on this host\n")
        point(odd.link, dirty)
        r = self.run(cluster, odd, tmp_path, "--ops", "relu", "--batch-dir", tmp_path / "rb", FLAGGEMS_DIR=drv)
        assert r.returncode == 2 and (f"(node {odd.id}): FLAGGEMS_DIR {dirty} at the same commit has uncommitted "
                                      f"changes (a dirty tree); the driver's has none ({drv}; "
                                      "only in the node: benchmark/conftest.py)") in r.stderr
        assert not (tmp_path / "rb").exists()

    def test_a_node_that_cannot_import_flag_gems_exits_4_or_is_left_out_when_asked(self, cluster, odd, tmp_path):
        point(odd.link, copy_tree(odd.root / "broken"))
        r = self.run(cluster, odd, tmp_path, "--ops", "relu", "abs", "--batch-dir", tmp_path / "rb")
        assert r.returncode == 4, r.stdout + r.stderr
        assert "1 of 3 GPU node(s) refused before any case (a node failed its check)" in r.stderr
        assert f"(node {odd.id}): {sys.executable} cannot import flag_gems: ModuleNotFoundError" in r.stderr
        assert not (tmp_path / "rb").exists()
        r = self.run(cluster, odd, tmp_path, "--ops", "relu", "abs", "--ray-exclude-failing-nodes",
                     "--batch-dir", tmp_path / "rb")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"(node {odd.id}): 1 GPU(s), device ? (arch ?)" in r.stdout and "cannot import flag_gems" in r.stdout
        ray_rec = last_call(tmp_path / "rb")["ray"]
        assert ray_rec["exclude_failing_nodes"] and len(ray_rec["excluded"]) == 1
        assert odd.id in ray_rec["excluded"][0] and "cannot import flag_gems" in ray_rec["excluded"][0]
        workers = {n.node_id[:8] for n in cluster.workers}
        st = status(tmp_path / "rb")
        assert all(v["status"] == "PASS" and notes(v)["node"] in workers for v in st.values())


def test_note_value_reads_one_key_of_a_rows_notes():
    from zl.batch.status import note_value
    notes = "attempt=2;host=gpu-a;node=abc;device_name=NVIDIA H200;device_arch=9.0"
    assert note_value(notes, "host") == "gpu-a" and note_value(notes, "device_name") == "NVIDIA H200"
    # a key is matched whole, never as a suffix of another key; a missing key reads ''
    assert note_value("xhost=a;host=b", "host") == "b" and note_value(notes, "gpu") == "" and note_value("", "host") == ""
