"""Dump the IR each benchmark shape really ran (`<run>/ttgir/`), with readable variant names.

What it patches (all chained onto what is already installed, all undone at unconfigure):
Triton's compilation listener, `kernel_load_end_hook` and `launch_enter_hook`,
`Autotuner._bench` (sweep launches are told from measured ones) and `Benchmark.run` of
the loaded FlagGems benchmark bases (launches are labelled by the benchmark's own input).
The code lives in `zl.ir`: `collect` (what is learned), `hooks` (attaching and detaching),
`dump` (the tree, index.tsv, naming.md).

When it steps back: `--zl-enable-ir` / ZL_ENABLE_IR off, or no dump directory
(`--zl-ttgir-dump-dir` / FLAGGEMS_PERF_TTGIR_DUMP_DIR; run_pytest.sh sets `<run>/ttgir`):
nothing is registered. A Triton without knobs/hooks: one log line, collection off, the
run continues (IR is evidence about a run, never a reason to lose the timing). A bad
`--zl-ir-levels` / ZL_IR_LEVELS value is a usage error (exit 4), not a guess.

Why: an A/B is only about the switch when both sides ran the code we think they ran;
the dump is what the IR fingerprint compares. Cost: one dict lookup per launch on the
host, carried by both sides of an A/B.
"""

from __future__ import annotations

import os

import pytest

from zl import options, registry
from zl.ir.collect import IRLevelsError, parse_levels
from zl.ir.hooks import IRSession
from zl.switches import SwitchError, parse_switch

NAME = "zl_ir_meta"
DUMP_DIR_ENV = "FLAGGEMS_PERF_TTGIR_DUMP_DIR"
ENABLE_ENV = "ZL_ENABLE_IR"
LEVELS_ENV = "ZL_IR_LEVELS"


class IRMetaPlugin:
    """The session's IR collection, registered while it is active."""

    def __init__(self, session: IRSession):
        self.session = session

    def pytest_runtest_setup(self, item):
        """Wrap Benchmark.run once the benchmark module is imported."""
        self.session.patch_benchmarks()

    def close(self):
        self.session.close("unconfigure")


def pytest_addoption(parser):
    options.add(parser, "--zl-enable-ir", ENABLE_ENV, "dump the IR each shape ran (on/off)", "1")
    options.add(parser, "--zl-ttgir-dump-dir", DUMP_DIR_ENV,
                "directory of the IR dump; empty = no dump (run_pytest.sh: <run>/ttgir)")
    options.add(parser, "--zl-ir-levels", LEVELS_ENV,
                "comma list of IR levels dumped beside the TTGIR, e.g. ttgir,llir,ptx", "ttgir")


def pytest_configure(config):
    """Attach the collector when IR collection is on and a dump directory is given."""
    try:
        enabled = parse_switch(options.value(config, "--zl-enable-ir"), True, name=ENABLE_ENV)
        levels = parse_levels(options.value(config, "--zl-ir-levels"))
    except (SwitchError, IRLevelsError) as exc:
        raise pytest.UsageError(str(exc))
    dump_dir = options.value(config, "--zl-ttgir-dump-dir").strip()
    if not enabled or not dump_dir:
        return
    session = IRSession.start(dump_dir=os.path.abspath(dump_dir), levels=levels)
    if session is not None:
        registry.register(config, NAME, IRMetaPlugin(session))


def pytest_unconfigure(config):
    """Dump what ran, then restore every wrapped callback and method."""
    registry.release(config, NAME)
