"""pytest plugin: run the autotune sweep on N devices at once, measure on one.

With many shapes nearly all wall time is the autotune sweep, not the measurement.
`PARALLEL_WARMUP_GPUS=N` (N >= 2) shards the yaml's shape list round-robin over N
pytest subprocesses, each pinned to one device through the backend's visibility
variable and recording its own picks. The picks are merged into this run's
`autotune_records/<op>.json`, and the measurement then runs serially in this process,
on one device, seeded from the merge (handed to `_autotune_record_plugin` as
`zl.autotune.options.PRESWEPT` in the session's stash). Artifacts and the latency table are those of a run without it.
Code: zl.warmup (plan, shards, sweep); the record store is zl.autotune.records.

What it patches, only while active (N >= 2, not itself a shard), for the sweep's
duration only: SIGTERM/SIGHUP handlers and an atexit hook that kill
the shards' process groups (zl.warmup.shards: shards never outlive the sweep, are
bounded by ZL_PARALLEL_WARMUP_TIMEOUT, default 3600 s, and die with this process).

Why subprocesses, not pytest-xdist: `_device_setup_plugin` may create a device context
at import, which fork-based workers do not survive, and each shard must get its own
visibility variable before its runtime starts. Shards inherit the parent's device
selection (`ZL_PARALLEL_DEVICES`, else the inherited visibility variable), so a caller
who picked idle cards 5,6 gets shards on 5 and 6, never on 0 and 1.

It steps back to the ordinary serial sweep, each time with its own log line and
`autotune_sweep_reason`, when: BENCH_LEVEL is not core, a shard exits non-zero or
times out, the yaml has no entry for the op, fewer than 2 shapes, REPLAY_FROM is set,
fewer than 2 devices, a bad timeout, or no record dir / autotune plugin to hand the
merge to. Unset or < 2: silent no-op.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zl import childenv
from zl import config as run_config
from zl.autotune import options as zl_options
from zl.backends import UnknownBackendError, get_backend
from zl.identity import update_identity
from zl.options import value
from zl.term import log as _term_log
from zl.warmup import plan as sweep_plan
from zl.warmup.sweep import run_sweep

NAME = "zl_parallel_warmup"
_TAG = "[parallel-warmup-plugin]"


def _log(msg: str) -> None:
    _term_log(_TAG, msg)


def pytest_addoption(parser):
    zl_options.declare(parser, zl_options.AUTOTUNE + zl_options.WARMUP)


class WarmupControl:
    """The registered plugin object: the backend, identity target and patches of one session."""

    def __init__(self, config, backend, want: int) -> None:
        self.config = config
        self.backend = backend
        self.want = want
        self.out_dir = value(config, "--zl-out-dir").strip()
        self.isolate = False

    def identity(self, **fields) -> None:
        try:
            update_identity(self.out_dir, **fields)
        except Exception as exc:
            _log(f"run identity not updated ({type(exc).__name__}: {exc})")

    def facts(self) -> sweep_plan.Facts:
        config = self.config
        explicit = value(config, "--zl-parallel-devices").strip() or None
        try:
            devices = list(self.backend.enumerate_devices(explicit))
        except Exception as exc:  # a device list the backend cannot read: name it, sweep serially
            raise sweep_plan.StepBack("few_devices", f"device enumeration failed ({type(exc).__name__}: "
                                      f"{exc}); sweeping serially") from None
        return sweep_plan.Facts(
            op=value(config, "--zl-op").strip(),
            record_dir=value(config, "--zl-autotune-record-dir").strip(),
            replay_dir=value(config, "--zl-autotune-replay-dir").strip(),
            autotune_loaded=config.pluginmanager.get_plugin(sweep_plan.AUTOTUNE_PLUGIN) is not None,
            level=str(_option(config, "level") or value(config, "--zl-bench-level")),
            shape_file=str(_option(config, "shape_file") or value(config, "--zl-shape-file")),
            args=list(config.invocation_params.args),
            cwd=Path(config.invocation_params.dir),
            devices=devices,
        )

    def sweep(self) -> None:
        try:
            self.isolate = zl_options.switch(self.config, "--zl-isolate-tuner-cache")
            timeout_s = sweep_plan.sweep_timeout(value(self.config, "--zl-parallel-warmup-timeout"))
            plan = sweep_plan.make_plan(self.facts())
        except sweep_plan.StepBack as sb:
            _log(str(sb))
            self.identity(autotune_sweep="serial", autotune_sweep_reason=sb.code)
            return
        n = min(self.want, len(plan.shapes), len(plan.devices))
        if self.want > len(plan.devices):
            _log(f"PARALLEL_WARMUP_GPUS={self.want} but only {len(plan.devices)} device(s) visible; using {n}")
        outcome = run_sweep(plan, n, list(self.config.invocation_params.args),
                            Path(self.config.invocation_params.dir), self.backend,
                            value(self.config, "--zl-autotune-record-dir").strip(),
                            value(self.config, "--zl-provider").strip() or "flaggems",
                            timeout_s, childenv.inherited(), _log, isolate=self.isolate,
                            parent=run_config.of(self.config))
        if outcome.preswept:
            self.config.stash[zl_options.PRESWEPT] = True
        self.identity(**outcome.identity)


def _option(config, name: str):
    try:
        return config.getoption(name)
    except (ValueError, AttributeError):
        return None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Sweep before any measurement plugin configures (tryfirst), then hand the
    merge to _autotune_record_plugin through the session's stash (PRESWEPT)."""
    if zl_options.switch(config, "--zl-parallel-worker"):
        return
    want = sweep_plan.requested_gpus(value(config, "--zl-parallel-warmup-gpus"), _log)
    if not want:
        return
    try:
        backend = get_backend()
    except UnknownBackendError as exc:
        raise pytest.UsageError(str(exc)) from None
    plugin = WarmupControl(config, backend, want)
    config.pluginmanager.register(plugin, NAME)
    plugin.sweep()


def pytest_unconfigure(config):
    """Unregister the session's sweep object."""
    plugin = config.pluginmanager.get_plugin(NAME)
    if plugin is not None:
        config.pluginmanager.unregister(plugin, NAME)
