"""The pytest options behind the autotune and parallel-warmup plugins.

Both plugins read the record/replay directories and a few run facts, so both call
`declare`; `zl.options.add` declares each once, whichever plugin loads first.
Every default is the environment variable run_pytest.sh exports, unchanged.
"""

from __future__ import annotations

from typing import Any

import pytest

from zl import options
from zl.autotune import PRESWEPT_ENV, RECORD_DIR_ENV, REPLAY_DIR_ENV
from zl.switches import SwitchError, parse_switch

AUTOTUNE = (
    ("--zl-autotune-record-dir", RECORD_DIR_ENV, "record mode: write <op>.json + meta.json here", ""),
    ("--zl-autotune-replay-dir", REPLAY_DIR_ENV, "replay mode: replay <op>.json from here (REPLAY_FROM/autotune_records)", ""),
    ("--zl-autotune-preswept", PRESWEPT_ENV, "internal: 1 = the record dir holds a parallel sweep's merge to seed from", ""),
    ("--zl-op", "ZL_OP", "operator name (test function minus test_)", ""),
    ("--zl-current-op", "FLAGGEMS_PERF_CURRENT_OP", "operator name read when --zl-op is empty", ""),
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


def declare(parser: Any, table=AUTOTUNE) -> None:
    for flag, env, help_text, default in table:
        options.add(parser, flag, env, help_text, default)


def switch(config: Any, flag: str) -> bool:
    """An on/off option through the one switch parser; a bad word is pytest's usage error."""
    try:
        return parse_switch(options.value(config, flag), False, name=flag)
    except SwitchError as exc:
        raise pytest.UsageError(str(exc)) from None
