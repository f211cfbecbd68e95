"""One parallel sweep: a pytest per shard, each pinned to one device, then the merge.

Only the decision "which config wins" is parallelised. Measurement stays serial in the
parent: N busy cards on one host couple through the power cap and cooling, so a card's
latency depends on its neighbours; the count of keys whose winners differ across shards
says how much that interference reached the sweep.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from zl import config as run_config
from zl.autotune import records as store
from zl.childenv import shard_environ
from zl.warmup import GPUS_ENV
from zl.warmup.plan import Plan
from zl.warmup.shards import Job, child_argv, merge, run_jobs, shard


@dataclass
class Outcome:
    identity: Dict[str, Any]
    preswept: bool          # the record dir now holds the merge: tell the autotune plugin


def shard_jobs(plan: Plan, parts: List[List[Any]], scratch: Path, args: Sequence[str], cwd: Path,
               backend: Any, environ: Mapping[str, str], isolate: bool = False,
               parent: Optional[run_config.RunConfig] = None) -> List[Job]:
    """One pytest per shard: its own run configuration (`--zl-config`: its OUT_DIR, device,
    shape file, record dir, no replay, the worker flag) and environment (the device pinned,
    with isolation its own tuner store)."""
    import yaml

    parent = parent or run_config.current()
    jobs = []
    for i, shapes in enumerate(parts):
        w = scratch / f"shard{i}"
        (w / "autotune_records").mkdir(parents=True)
        sub = dict(plan.doc)
        sub[plan.key] = dict(plan.doc[plan.key], shapes=shapes)
        shape_path = w / "shapes.yaml"
        shape_path.write_text(yaml.safe_dump(sub, sort_keys=False))
        device = plan.devices[i]
        tuner_dir = ""
        if isolate:
            # One sqlite per shard: N writers on one store is what isolation avoids (its folder:
            # childenv.tuner_store, through shard_environ below).
            tuner_dir = str(w / "flaggems_cache")
        # Its identity and IR stay private, it sweeps (never replays) and starts no shards.
        cfg = replace(parent, out_dir=str(w), device=device, shape_file=str(shape_path),
                      ttgir_dump_dir=str(w / "ttgir"), record_dir=str(w / "autotune_records"),
                      replay_dir="", parallel_worker="1", tuner_cache_dir=tuner_dir)
        config_path = run_config.write(cfg, str(w))
        env = shard_environ(cfg, backend, environ)
        cmd = [sys.executable, "-m", "pytest"] + child_argv(args, str(shape_path)) \
            + [run_config.OPTION, str(config_path)]
        jobs.append(Job(cmd, str(cwd), env, str(w / "worker.log")))
    return jobs


def run_sweep(plan: Plan, n: int, args: Sequence[str], cwd: Path, backend: Any, record_dir: str,
              provider: str, timeout_s: float, environ: Mapping[str, str],
              log: Callable[[str], None], isolate: bool = False,
              parent: Optional[run_config.RunConfig] = None) -> Outcome:
    """Sweep, merge and publish into `record_dir`; any failure -> serial, with the reason."""
    parts = shard(plan.shapes, n)
    scratch = Path(tempfile.mkdtemp(prefix=f"zl_warmup_{plan.op}_"))
    log(f"sweeping {len(plan.shapes)} shapes (yaml key {plan.key!r}) on {n} devices "
        f"{list(plan.devices[:n])} (shards: {[len(s) for s in parts]}); this phase's latency "
        "is discarded, only configs are kept")
    t0 = time.time()
    keep = True
    kept = f"(worker logs kept in {scratch})"
    try:
        jobs = shard_jobs(plan, parts, scratch, args, cwd, backend, environ, isolate, parent)
        rcs, timed_out = run_jobs(jobs, timeout_s)
        elapsed = time.time() - t0
        if timed_out:
            log(f"shard(s) {timed_out} still running after the {timeout_s:.0f}s sweep limit "
                f"(ZL_PARALLEL_WARMUP_TIMEOUT) and were killed; falling back to normal serial autotune {kept}")
            return Outcome({"autotune_sweep": "serial", "autotune_sweep_reason": "shard_timeout"}, False)
        bad = [i for i, rc in enumerate(rcs) if rc != 0]
        if bad:
            # A dead shard's shapes were never swept; publishing the merge would
            # hand the measurement a config set with holes that silently self-tune.
            log(f"shard(s) {bad} exited non-zero after {elapsed:.0f}s; their shapes were "
                "never swept, so the merged configs would have holes. Discarding this "
                f"sweep and falling back to normal serial autotune {kept}")
            return Outcome({"autotune_sweep": "serial", "autotune_sweep_reason": "shard_failed"}, False)
        merged, total, conflicts = merge([store.load_records(str(scratch / f"shard{i}" / "autotune_records"),
                                                             plan.op) for i in range(len(jobs))])
        if not total:
            log(f"shards recorded no autotune configs after {elapsed:.0f}s (nothing of this "
                f"op autotunes?); sweeping serially {kept}")
            return Outcome({"autotune_sweep": "serial", "autotune_sweep_reason": "no_records"}, False)
        path = store.write_records(record_dir, plan.op, merged, backend.name, provider)
        keep = False
        log(f"sweep done in {elapsed:.0f}s: {len(merged)} kernel(s) / {total} config(s) -> "
            f"{path}; measurement continues serially on one device")
        if conflicts:
            log(f"WARNING {conflicts} config key(s) got different winners across shards "
                "-- parallel interference reached the sweep; rerun without "
                f"{GPUS_ENV} before drawing conclusions")
        return Outcome({"autotune_sweep": f"parallel:{n}", "autotune_sweep_conflicts": conflicts}, True)
    except Exception as exc:
        log(f"sweep failed ({type(exc).__name__}: {exc}); sweeping serially {kept}")
        return Outcome({"autotune_sweep": "serial", "autotune_sweep_reason": "sweep_error"}, False)
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
