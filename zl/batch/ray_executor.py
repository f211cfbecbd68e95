"""run_batch.py --executor ray: the batch's cases as Ray tasks on a cluster of hosts.

Before the first case, `Cluster.check_nodes` runs the node check (zl/batch/ray_nodes.py:
each GPU node's FlagGems trees, interpreter, zl_bench checkout and device, judged against
the driver's) and keeps the nodes that pass.

Each case (both sides of a screen) is one task holding one GPU of a node that passed (num_gpus=1;
with --share-device N, 1/N: N cases per GPU, timings marked invalid as on one host; with
--overlap N, 1/N too, timing exclusive as on one host under a lock file per GPU in the node's
temporary directory, keyed by the batch and the Ray node: the tasks sharing a GPU share it;
the two empty files per GPU stay there), pinned to that
node: the driver places the cases itself, so no case reaches a node it did not check.
The task runs the local executor's case function (zl.batch.execute.run_sides: run_pytest.sh
in its own process group, --op-timeout kill, retries, dtype fallbacks) into a scratch
directory on its node, under the environment the driver recorded in batch.json with the
node's own FlagGems paths, then returns that directory as gzip'd tar bytes through the
object store: no shared filesystem. The driver unpacks it into its batch directory and writes
the same tables as the local executor, each row noting the host, Ray node and device it ran on.

Faults: a task whose node or worker dies is placed again on a live checked node (another
than the one it died on where there is one), up to --ray-retries times; the dead attempt's
directory never reaches the driver and the row notes it (attempt_lost=host/node). When no
checked node is left alive, the cases not started stay PENDING (exit 3, --resume). A driver
that ends (Ctrl-C, SIGTERM: tasks cancelled; SIGKILL: Ray ends the dead driver's job) leaves
no task running: a killed task's Ray worker takes its case process group with it
(PR_SET_PDEATHSIG, and the reaper, detached from the worker since the raylet kills a dead
worker's children: zl/batch/executor.py).

Ray is imported only here and in the node check's task (zl/batch/ray_nodes.py), and only
for --executor ray (pip install -e '.[ray]').
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
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from zl.batch.case import CaseRunner, case_dir
from zl.batch.executor import Executor, GroupGuard
from zl.batch.inventory import REPO_ENV
from zl.batch.ray_nodes import (NODE_CHECK_TIMEOUT_S, RayError, choose_nodes, device_of, label,
                                 node_check_task, recorded_device, shown)
from zl.batch.screen import SIDES, replays_before
from zl.batch.status import join_notes
from zl.runlog.caliber import caliber_of

INSTALL = "pip install -e '.[ray]'  (in the zl_bench checkout; or: pip install 'ray[default]>=2.9')"
# Ray's accelerator resource per backend: "GPU" is what Ray detects and isolates (it sets the
# visibility variable) for NVIDIA and AMD devices.
RAY_GPU_BACKENDS = ("cuda", "rocm")
LOG = "[batch]"
INCOMING = ".ray_incoming"


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
                  kill_grace: float, attempts, roots: Dict[str, str]) -> Dict:
    """The task body: the case on the GPU Ray gave this task, in a scratch directory of this
    node (one subdirectory per side), against this node's FlagGems trees (`roots`, checked by
    its node check), returned packed with its rows and where it ran."""
    import ray

    from zl.batch.execute import run_sides

    node_id = ray.get_runtime_context().get_node_id()
    where = {"host": socket.gethostname(), "node": node_id[:8], "node_id": node_id}
    gpus = ray.get_gpu_ids()
    device = str(gpus[0]) if gpus else "0"
    history = ray.get(attempts.started.remote((case.repo, case.run_name), dict(where, device=device)))
    scratch = Path(tempfile.mkdtemp(prefix="zl_ray_case_"))
    guard = GroupGuard(kill_grace, detached=True)
    try:
        dirs = {n: scratch / (n or "plain") for n in names}
        runners = {}
        for n in names:
            cfg = replace(configs[n], batch_dir=dirs[n], roots=dict(roots),
                          replay_root=dirs[SIDES[0]] if replays_before(n) else configs[n].replay_root)
            if cfg.device_overlap > 1:   # the lock of this node's GPU, not the driver's path
                cfg = replace(cfg, timing_locks=node_timing_locks(cfg.batch_id, node_id))
            dirs[n].mkdir(parents=True)
            runners[n] = CaseRunner(cfg, guard, threading.Event())
        rows, dt = run_sides(runners, names, case, device, dtypes, backend, dirs.__getitem__)
        for n, row in rows.items():
            ident = caliber_of(case_dir(dirs[n], case)) or {}
            row["device_name"] = ident.get("device_name", "")
            row["device_arch"] = ident.get("device_arch", "")
        return {"rows": rows, "dt": dt, "tar": pack(scratch), "where": where, "device": device,
                "history": history}
    finally:
        guard.close()
        shutil.rmtree(scratch, ignore_errors=True)


def node_timing_locks(batch_id: str, node_id: str) -> Path:
    """This Ray node's directory of the batch's per-GPU timing lock files (--overlap): every
    task of the batch that Ray gave the same GPU of this node takes the same file. The node id
    is in the name: two Ray nodes on one host may both number their GPU 0."""
    return Path(tempfile.gettempdir()) / f"zl_bench-timing-locks-{batch_id}-{node_id[:12]}"


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
    or GPU-less cluster, or a node it refuses, exits having changed nothing)."""

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
        self.repo_root = Path(repo_root)
        self.nodes: Dict[str, Dict] = {}     # node id -> facts of the nodes the cases may use
        self.record: Dict = {}               # batch.json's "ray" entry of this call
        self.warning = ""                    # the MIXED HARDWARE line, when the batch is mixed

    def describe(self) -> str:
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        return (f"Ray cluster {self.address or '(local)'}: {len(nodes)} node(s), {self.gpus:g} GPU(s) "
                f"on {', '.join(sorted({n.get('NodeManagerHostname', '?') for n in nodes}))}")

    def gpu_nodes(self) -> Dict[str, Dict]:
        return {n["NodeID"]: n for n in self.ray.nodes()
                if n.get("Alive") and (n.get("Resources") or {}).get("GPU", 0) > 0}

    def collect(self, base_env: Dict[str, str], backend: str, roots: Dict[str, str]) -> List[Dict]:
        """Every alive GPU node's facts (node_check_task), all at once; a node whose task
        fails or does not answer within NODE_CHECK_TIMEOUT_S carries that as its problem."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        task = self.ray.remote(node_check_task)
        refs = {}
        for nid, n in sorted(self.gpu_nodes().items()):
            gpus = n["Resources"]["GPU"]
            ref = task.options(num_gpus=min(1.0, gpus), num_cpus=0, max_retries=0,
                               scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False)
                               ).remote(base_env, backend, roots, str(self.repo_root))
            refs[ref] = {"host": n.get("NodeManagerHostname", "?"), "node_id": nid, "gpus": gpus}
        if not refs:
            return []
        done, late = self.ray.wait(list(refs), num_returns=len(refs), timeout=NODE_CHECK_TIMEOUT_S)
        out = []
        for ref in late:
            self.ray.cancel(ref, force=True)
            out.append(dict(refs[ref], problems=[f"its check did not answer within {NODE_CHECK_TIMEOUT_S:g} s "
                                                 "(its GPUs held by another job?)"]))
        for ref in done:
            try:
                out.append(dict(self.ray.get(ref), gpus=refs[ref]["gpus"]))
            except (self.ray.exceptions.RayError, OSError) as exc:
                first = (str(exc).strip().splitlines() or [""])[-1]
                out.append(dict(refs[ref], problems=[f"its check task failed: {type(exc).__name__}: {first}"]))
        return sorted(out, key=lambda f: (f.get("host", ""), f.get("node_id", "")))

    def check_nodes(self, plan) -> None:
        """Judge every GPU node before the first case (zl/batch/ray_nodes.py); sets `nodes`,
        `record` and `warning`, prints one line per node, raises RayError (exit 2) or
        NodePreflightError (exit 4) on what it refuses."""
        from zl.batch.conditions import tree_identity
        from zl.childenv import batch_case_base

        args = plan.args
        exclude = bool(getattr(args, "ray_exclude_failing_nodes", False))
        allow_mixed = bool(getattr(args, "allow_mixed_hardware", False))
        wanted = getattr(args, "ray_device_name", None)
        # functional batches (--share-device N > 1, --judge) time nothing: any device serves
        timing = args.share_device == 1 and not getattr(args, "judge", False)
        recorded = recorded_device(plan.started) if args.resume else None
        if recorded and wanted is not None and wanted != recorded.get("name"):
            raise RayError(f"--resume: the batch runs on {shown((recorded['name'], recorded.get('arch', '')))} "
                           f"(batch.json), this call gives --ray-device-name {wanted!r}; drop it")
        driver_zl = [tree_identity(str(self.repo_root))]
        facts = self.collect(batch_case_base(plan.common_env), plan.backend.name, plan.roots)
        driver_zl.append(tree_identity(str(self.repo_root)))
        if not facts:
            raise RayError("--executor ray: the cluster has no alive GPU node")
        device, used = choose_nodes(facts, plan.conditions["flaggems"], driver_zl, wanted, recorded,
                                    timing=timing, exclude=exclude, allow_mixed=allow_mixed)
        devices = sorted({shown(device_of(f)) for f in used} | ({shown(device)} if recorded or wanted else set()))
        mixed = len(devices) > 1
        self.warning = (f"MIXED HARDWARE: this batch runs on {', '.join(devices)}; compare its timings only "
                        "within one device name/arch (each row names its own: ops_status notes, summary.csv)"
                        if mixed else "")
        for f in facts:
            roots = " ".join(f"{REPO_ENV[r]}={p}" for r, p in sorted(f.get("roots", {}).items()))
            line = (f"{LOG} node {label(f)}: {f.get('gpus', 0):g} GPU(s), device {shown(device_of(f))}, "
                    f"torch {f.get('torch') or '?'}, triton {f.get('triton') or '?'}, {roots}")
            if f["status"] == "used":
                print(line + ": used", flush=True)
            else:
                print(f"!!! {line}: EXCLUDED: {f['reason']}", flush=True)
        if self.warning:
            print(f"!!! {LOG} {self.warning}", flush=True)
        self.nodes = {f["node_id"]: f for f in used}
        keep = ("host", "node_id", "gpus", "roots", "stated", "trees", "zl_bench", "python", "device_name",
                "device_arch", "torch", "triton", "status", "reason")
        self.record = {"device": {"name": device[0], "arch": device[1]}, "timing": timing,
                       "mixed_hardware": mixed, "allow_mixed_hardware": allow_mixed,
                       "exclude_failing_nodes": exclude, "warning": self.warning,
                       "excluded": [f"{label(f)}: {f['reason']}" for f in facts if f["status"] != "used"],
                       "nodes": [{k: f.get(k, "") for k in keep} for f in facts]}

    def executor(self, batch) -> "RayExecutor":
        return RayExecutor(self, batch)

    def shutdown(self) -> None:
        self.ray.shutdown()


class RayExecutor(Executor):
    """Places each case on a checked node with a free GPU slot (GPUs x --share-device),
    pinned to it, so --budget-s and Ctrl-C stop starting new ones; records each result as
    it lands; places a case whose node or worker died again, on another live checked node
    where there is one, up to --ray-retries times."""

    def __init__(self, cluster: Cluster, batch):
        self.cluster, self.ray, self.batch = cluster, cluster.ray, batch
        self.errors: List[BaseException] = []
        self.inflight: Dict = {}                   # ref -> (case, node id, tries)
        self.device_names: Dict[str, int] = {}

    def alive(self) -> List[str]:
        return [nid for nid in self.cluster.gpu_nodes() if nid in self.cluster.nodes]

    def run(self, shards, work, may_start) -> None:
        ray, batch, plan = self.ray, self.batch, self.batch.plan
        from zl.batch.execute import slots_per_device
        share = slots_per_device(plan.args)
        names = [n for n, _ in plan.sides]
        here = ray.get_runtime_context().get_node_id()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        attempts = ray.remote(num_cpus=0)(Attempts).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
        task = ray.remote(run_case_task)
        slot = dict(num_gpus=1 / share, num_cpus=1 if share == 1 else 1 / share, max_retries=0)
        configs = {n: r.cfg for n, r in batch.runners.items()}
        nodes = self.cluster.nodes
        capacity = {nid: max(1, int(f["gpus"] * share)) for nid, f in nodes.items()}
        busy: Counter = Counter()
        pending: List[Tuple] = [(c, 0, None) for cs in shards.values() for c in cs]   # case, tries, avoid
        while pending or self.inflight:
            alive = self.alive()
            waiting: List[Tuple] = []
            for i, (c, tries, avoid) in enumerate(pending):
                free = [nid for nid in alive if busy[nid] < capacity[nid]]
                if not free or not may_start():
                    waiting += pending[i:]
                    break
                fresh = [nid for nid in free if nid != avoid]
                if not fresh and any(nid != avoid for nid in alive):
                    waiting.append((c, tries, avoid))   # for a slot on another node than the one it died on
                    continue
                nid = max(fresh or free, key=lambda x: (capacity[x] - busy[x], x))
                ref = task.options(**slot, scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False)).remote(
                    configs, names, c, plan.dtypes, plan.backend.name, plan.args.kill_grace, attempts,
                    dict(nodes[nid]["roots"]))
                self.inflight[ref] = (c, nid, tries)
                busy[nid] += 1
            pending = waiting
            if not self.inflight:
                if pending and not alive:
                    print(f"!!! {LOG} no checked GPU node is alive: {len(pending)} case(s) not started "
                          "(continue with --resume)", flush=True)
                break
            done, _ = ray.wait(list(self.inflight), num_returns=1, timeout=0.5)
            for key, where in ray.get(attempts.drain.remote()):
                label_ = f"{where['host']}:{where['device']}"
                batch.tables.status[names[0]].set(key, status="RUNNING", device=label_, gpu=label_)
            for ref in done:
                c, nid, tries = self.inflight.pop(ref)
                busy[nid] -= 1
                try:
                    result = ray.get(ref)
                except (ray.exceptions.RayError, OSError) as exc:
                    lost_node = not isinstance(exc, (ray.exceptions.RayTaskError, ray.exceptions.TaskCancelledError))
                    if lost_node and tries < self.cluster.retries:
                        pending.insert(0, (c, tries + 1, nid))
                        continue
                    self.lost(c, names, exc)
                    continue
                self.accept(c, names, result)
        mixed = sorted(self.device_names)
        if self.cluster.warning or len(mixed) > 1:
            print(f"!!! {LOG} " + (self.cluster.warning or
                                   f"MIXED HARDWARE: cases of this batch ran on {', '.join(mixed)}; compare "
                                   "timings only within one device name (the rows' notes say which)"), flush=True)

    def lost(self, c, names: List[str], exc: BaseException) -> None:
        """A task given up on (its retries spent on dead nodes or workers, or it raised)."""
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
        node = self.cluster.nodes.get(where.get("node_id", ""), {})
        lost = [f"{h['host']}/{h['node']}" for h in history[:-1]]
        label_ = f"{where['host']}:{result['device']}"
        rows = {}
        for n, row in result["rows"].items():
            # the run's own identity, else the device its node's check saw (a run that
            # never got to record one)
            name = row.pop("device_name", "") or node.get("device_name", "")
            arch = row.pop("device_arch", "") or node.get("device_arch", "")
            if name:
                self.device_names[name] = self.device_names.get(name, 0) + 1
            row["out_dir"] = str(case_dir(plan.side_dir(n), c))
            row["notes"] = join_notes(row.get("notes", ""), f"host={where['host']}", f"node={where['node']}",
                                      f"device_name={name}" if name else "",
                                      f"device_arch={arch}" if arch else "",
                                      *[f"attempt_lost={x}(partial discarded)" for x in lost])
            batch.tables.status[n].replace((c.repo, c.run_name), row)
            rows[n] = row
        batch.record(c, label_, rows, result["dt"])

    def join(self) -> None:
        """Cancel every task in flight (force: its worker dies, and its case process group with
        it) and wait for Ray to confirm."""
        refs = list(self.inflight)
        for ref in refs:
            self.ray.cancel(ref, force=True)
        # submitted cases whose start the driver has not heard of yet: RUNNING, so that
        # execute() marks them INTERRUPTED like the rest (never PENDING: they may have run)
        first = self.batch.plan.sides[0][0]
        for c, _, _ in self.inflight.values():
            key = (c.repo, c.run_name)
            if self.batch.tables.status[first].get(key)["status"] == "PENDING":
                self.batch.tables.status[first].set(key, status="RUNNING")
        deadline = time.monotonic() + self.batch.plan.args.kill_grace + 10
        while refs and time.monotonic() < deadline:
            _, refs = self.ray.wait(refs, num_returns=len(refs), timeout=0.5)
        self.inflight.clear()
