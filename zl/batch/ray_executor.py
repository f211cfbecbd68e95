"""run_batch.py --executor ray: the batch's cases as Ray tasks on a cluster of hosts.

Each case (both sides of a screen) is one task holding one GPU of its node (num_gpus=1; with
--share-device N, 1/N: N cases per GPU, timings marked invalid as on one host). The task runs
the local executor's case function (zl.batch.execute.run_sides: run_pytest.sh in its own
process group, --op-timeout kill, retries, dtype fallbacks) into a scratch directory on its
node, under the environment the driver recorded in batch.json, then returns that directory as
gzip'd tar bytes through the object store: no shared filesystem. The driver unpacks it into
its batch directory and writes the same tables as the local executor, each row noting the
host, Ray node and device name it ran on.

Faults: a task whose node or worker dies is rerun by Ray on a live node, up to --ray-retries
times; the dead attempt's directory never reaches the driver and the row notes it
(attempt_lost=host/node). A driver that ends (Ctrl-C, SIGTERM: tasks cancelled; SIGKILL: Ray ends
the dead driver's job) leaves no task running: a killed task's Ray worker takes its case
process group with it (PR_SET_PDEATHSIG, and the reaper, detached from the worker since the
raylet kills a dead worker's children: zl/batch/executor.py).

Ray is imported only here, and only for --executor ray (pip install -e '.[ray]').
"""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
import tarfile
import tempfile
import threading
import time
import uuid
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from zl.batch.case import CaseRunner, case_dir
from zl.batch.executor import Executor, GroupGuard
from zl.batch.screen import SIDES
from zl.batch.status import join_notes
from zl.runlog.caliber import caliber_of

INSTALL = "pip install -e '.[ray]'  (in the zl_bench checkout; or: pip install 'ray[default]>=2.9')"
# Ray's accelerator resource per backend: "GPU" is what Ray detects and isolates (it sets the
# visibility variable) for NVIDIA and AMD devices.
RAY_GPU_BACKENDS = ("cuda", "rocm")
LOG = "[batch]"
INCOMING = ".ray_incoming"


class RayError(ValueError):
    """--executor ray cannot run: Ray missing, the cluster unreachable or without GPUs (exit 2)."""


def require_ray():
    try:
        import ray
    except ImportError as exc:
        raise RayError(f"--executor ray needs Ray, which this interpreter cannot import ({exc}); "
                       f"install it with: {INSTALL}") from None
    return ray


# ------------------------------------------------------------------ on the case's node

def pack(root: Path) -> bytes:
    """`root`'s tree as gzip'd tar bytes (a case directory: logs, IR, CSVs; text compresses ~5-10x)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for p in sorted(root.iterdir()):
            tar.add(str(p), arcname=p.name)
    return buf.getvalue()


def run_case_task(configs: Dict, names: List[str], case, dtypes: str, backend: str,
                  kill_grace: float, attempts) -> Dict:
    """The task body: the case on the GPU Ray gave this task, in a scratch directory of this
    node (one subdirectory per side), returned packed with its rows and where it ran."""
    import ray

    from zl.batch.execute import run_sides

    where = {"host": socket.gethostname(), "node": ray.get_runtime_context().get_node_id()[:8]}
    gpus = ray.get_gpu_ids()
    device = str(gpus[0]) if gpus else "0"
    history = ray.get(attempts.started.remote((case.repo, case.run_name), dict(where, device=device)))
    scratch = Path(tempfile.mkdtemp(prefix="zl_ray_case_"))
    guard = GroupGuard(kill_grace, detached=True)
    try:
        dirs = {n: scratch / (n or "plain") for n in names}
        runners = {}
        for n in names:
            cfg = replace(configs[n], batch_dir=dirs[n],
                          replay_root=dirs[SIDES[0]] if n == SIDES[1] else configs[n].replay_root)
            dirs[n].mkdir(parents=True)
            runners[n] = CaseRunner(cfg, guard, threading.Event())
        rows, dt = run_sides(runners, names, case, device, dtypes, backend, dirs.__getitem__)
        for n, row in rows.items():
            ident = caliber_of(case_dir(dirs[n], case)) or {}
            row["device_name"] = ident.get("device_name", "")
        return {"rows": rows, "dt": dt, "tar": pack(scratch), "where": where, "device": device,
                "history": history}
    finally:
        guard.close()
        shutil.rmtree(scratch, ignore_errors=True)


class Attempts:
    """Ray actor on the driver's node: every start of every case's task, so the driver
    marks cases RUNNING and notes the attempts a dead node took with it."""

    def __init__(self):
        self.starts: Dict[Tuple[str, str], List[Dict]] = {}
        self.fresh: List[Tuple[Tuple[str, str], Dict]] = []

    def started(self, key, where: Dict) -> List[Dict]:
        self.starts.setdefault(tuple(key), []).append(where)
        self.fresh.append((tuple(key), where))
        return list(self.starts[tuple(key)])

    def drain(self) -> List:
        out, self.fresh = self.fresh, []
        return out


# ------------------------------------------------------------------ on the driver

def check_backend(backend: str) -> None:
    if backend not in RAY_GPU_BACKENDS:
        raise RayError(f"--executor ray: backend {backend} has no Ray accelerator resource here "
                       f"(supported: {', '.join(RAY_GPU_BACKENDS)}); use the local executor")


def probe(address: Optional[str]) -> None:
    """A HOST:PORT that nothing answers is refused at once: ray.init retries an unreachable
    head for minutes before it gives up."""
    m = re.fullmatch(r"\[?([^\[\]/\s]+?)\]?:(\d+)", address or "")
    if not m:
        return
    try:
        socket.create_connection((m.group(1), int(m.group(2))), timeout=5).close()
    except OSError as exc:
        raise RayError(f"--executor ray: nothing answers at --ray-address {address} "
                       f"({exc.strerror or exc}); start the head there with: ray start --head "
                       f"--port={m.group(2)}") from None


class Cluster:
    """The driver's connection, made before the batch directory is written (so an unreachable
    or GPU-less cluster exits 2 having changed nothing)."""

    def __init__(self, address: Optional[str], backend: str, retries: int, repo_root: Path,
                 pythonpath: str):
        check_backend(backend)
        self.ray = require_ray()
        probe(address)
        # the workers import zl from the same checkout path as the driver (README: each host)
        path = str(repo_root) + (os.pathsep + pythonpath if pythonpath else "")
        try:
            self.ray.init(address=address, logging_level="WARNING", log_to_driver=False,
                          runtime_env={"env_vars": {"PYTHONPATH": path}})
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RayError(f"--executor ray: cannot connect to the Ray cluster "
                           f"{address or '(local)'}: {exc}") from None
        self.gpus = self.ray.cluster_resources().get("GPU", 0)
        if self.gpus < 1:
            self.ray.shutdown()
            raise RayError(f"--executor ray: the Ray cluster {address or '(local)'} offers no GPU "
                           "resource; start each node with its GPUs (ray start ... --num-gpus N)")
        self.address = address
        self.retries = retries

    def describe(self) -> str:
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        return (f"Ray cluster {self.address or '(local)'}: {len(nodes)} node(s), {self.gpus:g} GPU(s) "
                f"on {', '.join(sorted({n.get('NodeManagerHostname', '?') for n in nodes}))}")

    def executor(self, batch) -> "RayExecutor":
        return RayExecutor(self, batch)

    def shutdown(self) -> None:
        self.ray.shutdown()


class RayExecutor(Executor):
    """Submits the cases as tasks, at most as many in flight as the cluster has GPU slots now
    (so --budget-s and Ctrl-C stop starting new ones), and records each result as it lands."""

    def __init__(self, cluster: Cluster, batch):
        self.cluster, self.ray, self.batch = cluster, cluster.ray, batch
        self.errors: List[BaseException] = []
        self.inflight: Dict = {}
        self.device_names: Dict[str, int] = {}

    def run(self, shards, work, may_start) -> None:
        ray, batch, plan = self.ray, self.batch, self.batch.plan
        share = plan.args.share_device
        names = [n for n, _ in plan.sides]
        here = ray.get_runtime_context().get_node_id()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        attempts = ray.remote(num_cpus=0)(Attempts).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
        task = ray.remote(run_case_task).options(
            num_gpus=1 / share, num_cpus=1 if share == 1 else 1 / share,
            max_retries=self.cluster.retries, retry_exceptions=False)
        configs = {n: r.cfg for n, r in batch.runners.items()}
        pending = deque(c for cs in shards.values() for c in cs)
        while pending or self.inflight:
            slots = max(1, int(ray.cluster_resources().get("GPU", 0) * share))
            while pending and len(self.inflight) < slots and may_start():
                c = pending.popleft()
                ref = task.remote(configs, names, c, plan.dtypes, plan.backend.name,
                                  plan.args.kill_grace, attempts)
                self.inflight[ref] = c
            if not self.inflight:
                break
            done, _ = ray.wait(list(self.inflight), num_returns=1, timeout=0.5)
            for key, where in ray.get(attempts.drain.remote()):
                label = f"{where['host']}:{where['device']}"
                batch.tables.status[names[0]].set(key, status="RUNNING", device=label, gpu=label)
            for ref in done:
                c = self.inflight.pop(ref)
                try:
                    result = ray.get(ref)
                except (ray.exceptions.RayError, OSError) as exc:
                    result = None
                    self.lost(c, names, exc)
                if result is not None:
                    self.accept(c, names, result)
        mixed = sorted(self.device_names)
        if len(mixed) > 1:
            print(f"!!! {LOG} MIXED HARDWARE: cases of this batch ran on {', '.join(mixed)}; compare "
                  "timings only within one device name (the rows' notes say which)", flush=True)

    def lost(self, c, names: List[str], exc: BaseException) -> None:
        """A task Ray gave up on (its retries spent on dead nodes, or its worker crashed)."""
        plan = self.batch.plan
        from zl.batch.status import blank_row
        for n in names:
            row = blank_row(c.repo, c.op, c.op_file, c.run_name, plan.backend.name, "",
                            str(case_dir(plan.side_dir(n), c)), status="FAIL",
                            notes="reason=" + " ".join(
                                f"ray task failed ({self.cluster.retries} retries for dead nodes or "
                                f"workers): {type(exc).__name__}: {exc}".replace(";", ",").split())[:200])
            self.batch.tables.status[n].replace((c.repo, c.run_name), row)
        self.batch.record(c, "-", {names[0]: self.batch.tables.status[names[0]].get((c.repo, c.run_name))}, "")

    def accept(self, c, names: List[str], result: Dict) -> None:
        """Unpack the case's directories into the batch directory, then write its rows."""
        plan, batch = self.batch.plan, self.batch
        staging = plan.batch_dir / INCOMING / uuid.uuid4().hex
        staging.mkdir(parents=True)
        try:
            with tarfile.open(fileobj=io.BytesIO(result["tar"]), mode="r:gz") as tar:
                tar.extractall(staging, filter="data")
            for n in names:
                src = staging / (n or "plain")
                dest = case_dir(plan.side_dir(n), c)
                console = Path("console") / c.repo / f"{c.run_name}.log"
                for a, b in ((case_dir(src, c), dest), (src / console, plan.side_dir(n) / console)):
                    if b.is_dir():
                        shutil.rmtree(b)
                    if a.exists():
                        b.parent.mkdir(parents=True, exist_ok=True)
                        os.replace(a, b)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        where, history = result["where"], result["history"]
        lost = [f"{h['host']}/{h['node']}" for h in history[:-1]]
        label = f"{where['host']}:{result['device']}"
        rows = {}
        for n, row in result["rows"].items():
            name = row.pop("device_name", "")
            if name:
                self.device_names[name] = self.device_names.get(name, 0) + 1
            row["out_dir"] = str(case_dir(plan.side_dir(n), c))
            row["notes"] = join_notes(row.get("notes", ""), f"host={where['host']}", f"node={where['node']}",
                                      f"device_name={name}" if name else "",
                                      *[f"attempt_lost={x}(partial discarded)" for x in lost])
            batch.tables.status[n].replace((c.repo, c.run_name), row)
            rows[n] = row
        batch.record(c, label, rows, result["dt"])

    def join(self) -> None:
        """Cancel every task in flight (force: its worker dies, and its case process group with
        it) and wait for Ray to confirm."""
        refs = list(self.inflight)
        for ref in refs:
            self.ray.cancel(ref, force=True)
        # submitted cases whose start the driver has not heard of yet: RUNNING, so that
        # execute() marks them INTERRUPTED like the rest (never PENDING: they may have run)
        first = self.batch.plan.sides[0][0]
        for c in self.inflight.values():
            key = (c.repo, c.run_name)
            if self.batch.tables.status[first].get(key)["status"] == "PENDING":
                self.batch.tables.status[first].set(key, status="RUNNING")
        deadline = time.monotonic() + self.batch.plan.args.kill_grace + 10
        while refs and time.monotonic() < deadline:
            _, refs = self.ray.wait(refs, num_returns=len(refs), timeout=0.5)
        self.inflight.clear()
