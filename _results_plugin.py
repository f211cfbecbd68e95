"""Keep each benchmark shape's outputs, per side, for the A/B results check (issue 16).

A compiler switch or a replayed config that makes an operator fast and wrong must not
read as a speedup, and FlagGems' benchmark never compares outputs. This plugin calls
the operator once more per shape and side, after the timed loop, and writes a compact
record to `<OUT_DIR>/results/<op>.json` (zl.results.capture). `python -m
zl.results.compare RUN_A RUN_B` and the A/B reports compare them.

Switch: `--zl-results` / ZL_ENABLE_RESULTS (default on; needs OUT_DIR). A bad value is a
pytest usage error. The code lives in zl/results/; this module only wires the hooks.
"""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.abspath(__file__))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from zl import options, registry  # noqa: E402
from zl.switches import SwitchError, parse_switch  # noqa: E402
from zl.term import log  # noqa: E402

TAG = "[results-plugin]"
FLAG = "--zl-results"
ENV = "ZL_ENABLE_RESULTS"
NAME = "zl_results"


class ResultsSession:
    """The session's recorder, registered only while output capture is on."""

    def __init__(self, recorder):
        self.recorder = recorder

    def pytest_runtest_setup(self, item):
        self.recorder.install()

    def close(self):
        rec = self.recorder
        rec.uninstall()
        if rec.files:
            log(TAG, f"outputs of {', '.join(sorted(rec.files))} recorded under "
                     f"{os.path.join(rec.run_dir, 'results')} ({rec.captures} calls, "
                     f"{rec.seconds:.3f} s outside the timed loops)")


def pytest_addoption(parser):
    options.add(parser, FLAG, ENV, "record each shape's outputs (torch and gems) under "
                "<OUT_DIR>/results/ for the A/B results check (1/0)", "1")


def pytest_configure(config):
    import pytest
    try:
        on = parse_switch(options.value(config, FLAG), True, name=ENV)
    except SwitchError as exc:
        raise pytest.UsageError(str(exc))
    out = os.environ.get("OUT_DIR", "").strip()
    if not on or not out:
        return
    from zl.results.recorder import ResultsRecorder
    registry.register(config, NAME, ResultsSession(
        ResultsRecorder(os.path.abspath(out), lambda m: log(TAG, m))))


def pytest_unconfigure(config):
    registry.release(config, NAME)
