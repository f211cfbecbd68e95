"""Whether this run sweeps its autotune configs in parallel, or why not (`StepBack`).

Each step back is the ordinary serial sweep with its own log line and its own
`autotune_sweep_reason` in run_identity.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

from zl.warmup import DEFAULT_TIMEOUT_S, GPUS_ENV, TIMEOUT_ENV
from zl.warmup.yamlkeys import benchmark_file, read_shapes, yaml_key_candidates

AUTOTUNE_PLUGIN = "_autotune_record_plugin"


class StepBack(Exception):
    """The sweep runs serially instead; `code` goes to run_identity.json."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def requested_gpus(raw: str, log: Callable[[str], None]) -> int:
    """N from PARALLEL_WARMUP_GPUS; 0 means "not requested" (unset, < 2, not a number)."""
    raw = (raw or "").strip()
    if not raw:
        return 0
    try:
        n = int(raw)
    except ValueError:
        log(f"!!! {GPUS_ENV}={raw!r} is not an integer; sweeping serially")
        return 0
    return n if n >= 2 else 0


def sweep_timeout(raw: str) -> float:
    """Seconds the whole sweep may take; unset -> the default. No 'unlimited': a shard
    without a bound is what kept writing after its driver was gone."""
    raw = (raw or "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise StepBack("bad_timeout", f"{TIMEOUT_ENV}={raw!r} is not a positive number of "
                       "seconds; sweeping serially")
    return value


@dataclass
class Facts:
    """What the plan reads; the plugin fills it from options, env and pytest's config."""
    op: str
    record_dir: str
    replay_dir: str
    autotune_loaded: bool
    level: str
    shape_file: str
    args: Sequence[str]
    cwd: Path
    devices: List[str]


@dataclass
class Plan:
    op: str
    doc: Dict[str, Any]
    key: str
    shapes: List[Any]
    devices: List[str]


def make_plan(f: Facts) -> Plan:
    """Everything the sweep needs, or StepBack with the reason."""
    if f.replay_dir:
        raise StepBack("replay", "REPLAY_FROM is set: the configs are already pinned, nothing to sweep")
    if not f.record_dir:
        raise StepBack("no_record_dir", "FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR is not set, so "
                       "there is nowhere to publish the merged configs")
    if not f.autotune_loaded:
        raise StepBack("no_autotune_plugin", f"{AUTOTUNE_PLUGIN} is not loaded "
                       "(ZL_ENABLE_AUTOTUNE=0?), so nothing would replay the merge")
    level = (f.level or "comprehensive").strip().lower()
    if level != "core":
        # At comprehensive FlagGems merges set_more_shapes() -- per-class Python this
        # plugin cannot see -- into the yaml's list. Sharding the yaml alone sweeps a
        # subset (mm: 5 of 29 shapes, 90 AUTOTUNE_REPLAY_FALLBACK reason=key_missing)
        # and every uncovered key then tunes live in a run that claims to replay.
        raise StepBack("bench_level", f"--level {level} merges shapes this plugin cannot "
                       "enumerate (set_more_shapes); sharding a subset would break the "
                       "same-config premise, so sweeping serially instead")
    if not f.op:
        raise StepBack("no_op", "ZL_OP is not set; cannot tell which yaml entry to shard")
    if not f.shape_file or not Path(f.shape_file).is_file():
        raise StepBack("no_shape_file", f"no readable --shape_file ({f.shape_file or 'unset'}); "
                       "sweeping serially")
    candidates = yaml_key_candidates(benchmark_file(f.args, f.cwd), f.op)
    try:
        doc, key, shapes = read_shapes(f.shape_file, candidates)
    except Exception as exc:  # yaml errors have many types; any of them means "cannot shard"
        raise StepBack("bad_shape_file", f"cannot read shapes from {f.shape_file} "
                       f"({type(exc).__name__}: {exc}); sweeping serially")
    if not key:
        raise StepBack("no_yaml_entry", f"no yaml entry for {f.op!r} in {f.shape_file} "
                       f"(tried: {', '.join(candidates)}); sweeping serially")
    if len(shapes) < 2:
        raise StepBack("few_shapes", f"only {len(shapes)} shape(s) under yaml key {key!r}; "
                       "sharding would not pay off, sweeping serially")
    if len(f.devices) < 2:
        raise StepBack("few_devices", f"only {len(f.devices)} device(s) visible "
                       f"({','.join(f.devices) or 'none'}); need 2 to shard, sweeping serially")
    return Plan(f.op, doc, key, shapes, list(f.devices))
