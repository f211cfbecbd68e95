"""The pytest options behind the autotune and parallel-warmup plugins.

Both plugins read the record/replay directories and a few run facts, so both call
`declare`; `zl.options.add` declares each once, whichever plugin loads first.
Each is a setting of the run configuration (zl.config). `PRESWEPT` is the parallel
sweep's hand-over to the autotune plugin in the session's stash: the record dir holds the
sweep's merge, so the measuring process records as usual but seeds every lookup from it.
"""

from __future__ import annotations

from typing import Any

import pytest

from zl import options
from zl.autotune import RECORD_DIR_ENV, REPLAY_DIR_ENV
from zl.switches import SwitchError, parse_switch

AUTOTUNE = (
    ("--zl-autotune-record-dir", RECORD_DIR_ENV, "record mode: write <op>.json + meta.json here", ""),
    ("--zl-autotune-replay-dir", REPLAY_DIR_ENV, "replay mode: replay <op>.json from here (REPLAY_FROM/autotune_records)", ""),
    ("--zl-op", "ZL_OP", "operator name (test function minus test_)", ""),
    ("--zl-out-dir", "OUT_DIR", "run directory (run_identity.json, autotune_records/)", ""),
    ("--zl-provider", "ZL_PROVIDER", "provider written to meta.json", "flaggems"),
    ("--zl-isolate-tuner-cache", "ZL_ISOLATE_TUNER_CACHE", "on/off: a private FlagGems tuner store was asked for (checked, warned)", "0"),
)

WARMUP = (
    ("--zl-parallel-warmup-gpus", "PARALLEL_WARMUP_GPUS", "N >= 2: shard the autotune sweep over N devices", ""),
    ("--zl-parallel-devices", "ZL_PARALLEL_DEVICES", "explicit comma list of devices for the sweep shards", ""),
    ("--zl-parallel-warmup-timeout", "ZL_PARALLEL_WARMUP_TIMEOUT", "seconds the whole sweep may take before its shards are killed", "3600"),
    ("--zl-parallel-worker", "ZL_PARALLEL_WORKER", "internal: 1 in a sweep shard (no recursion)", ""),
    ("--zl-bench-level", "ZL_BENCH_LEVEL", "core / comprehensive, read when --level is not given", ""),
    ("--zl-shape-file", "ZL_SHAPE_FILE", "the shape yaml, read when --shape_file is not given", ""),
)


# Set by _parallel_warmup_plugin's configure (tryfirst), read by _autotune_record_plugin's.
PRESWEPT = pytest.StashKey[bool]()


def preswept(config: Any) -> bool:
    """True when this session's parallel sweep left its merge in the record dir."""
    stash = getattr(config, "stash", None)
    return bool(stash.get(PRESWEPT, False)) if stash is not None else False


def declare(parser: Any, table=AUTOTUNE) -> None:
    for flag, env, help_text, default in table:
        options.add(parser, flag, env, help_text, default)


def switch(config: Any, flag: str) -> bool:
    """An on/off option through the one switch parser; a bad word is pytest's usage error."""
    try:
        return parse_switch(options.value(config, flag), False, name=flag)
    except SwitchError as exc:
        raise pytest.UsageError(str(exc)) from None
