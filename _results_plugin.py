"""Keep each benchmark shape's outputs, per side, for the A/B results check.

A compiler switch or a replayed config that makes an operator fast and wrong must not
read as a speedup, and FlagGems' benchmark never compares outputs. This plugin calls
the operator once more per shape and side, after the timed loop, and writes a compact
record to `<OUT_DIR>/results/<op>.json` (zl.results.capture). `python -m
zl.results.compare RUN_A RUN_B` and the A/B reports compare them.

Switch: `--zl-results` / ZL_ENABLE_RESULTS (default on; needs OUT_DIR). A bad value is a
pytest usage error. The code lives in zl/results/; this module only wires the hooks.

`--zl-results-prewarm` / ZL_RESULTS_PREWARM (default on, torch.cuda backends only): the
capture's CUDA kernels are loaded in a background thread started before the benchmark's
conftest imports flag_gems, and joined when collection ends (zl/results/prewarm.py says why).
"""

from __future__ import annotations

import os

import pytest

from zl import options, registry
from zl.backends import UnknownBackendError, get_backend
from zl.switches import SwitchError, parse_switch
from zl.term import log

TAG = "[results-plugin]"
FLAG = "--zl-results"
ENV = "ZL_ENABLE_RESULTS"
NAME = "zl_results"
PREWARM_FLAG = "--zl-results-prewarm"
PREWARM_ENV = "ZL_RESULTS_PREWARM"
_PREWARM = pytest.StashKey[object]()   # early_config.stash: the session's Prewarm


class ResultsSession:
    """The session's recorder, registered only while output capture is on."""

    def __init__(self, recorder, prewarm=None):
        self.recorder = recorder
        self.prewarm = prewarm

    def _join_prewarm(self):
        # the wait is on the run's critical path: it counts as the results check's cost
        if self.prewarm is not None:
            self.recorder.seconds += self.prewarm.join()

    def pytest_collection_finish(self, session):
        self._join_prewarm()

    def pytest_runtest_setup(self, item):
        self._join_prewarm()   # a backstop: no test starts while the thread runs
        self.recorder.install()

    def close(self):
        self._join_prewarm()
        rec = self.recorder
        rec.uninstall()
        if rec.files:
            log(TAG, f"outputs of {', '.join(sorted(rec.files))} recorded under "
                     f"{os.path.join(rec.run_dir, 'results')} ({rec.captures} calls, "
                     f"{rec.seconds:.3f} s outside the timed loops)")


def pytest_addoption(parser):
    options.add(parser, FLAG, ENV, "record each shape's outputs (torch and gems) under "
                "<OUT_DIR>/results/ for the A/B results check (1/0)", "1")
    options.add(parser, PREWARM_FLAG, PREWARM_ENV, "load the results capture's CUDA kernels in a "
                "background thread during start-up, joined before the first test (1/0)", "1")


def _wanted(early_config) -> bool:
    """Both switches on, OUT_DIR set and a torch.cuda backend; a bad switch value is left
    for pytest_configure to name."""
    try:
        if not (parse_switch(options.early_value(early_config, FLAG), True, name=ENV)
                and parse_switch(options.early_value(early_config, PREWARM_FLAG), True, name=PREWARM_ENV)):
            return False
        backend = get_backend(options.early_value(early_config, "--zl-backend"))
    except (SwitchError, UnknownBackendError):  # named by the configure hooks
        return False
    return bool(options.early_value(early_config, "--zl-out-dir").strip()) and backend.torch_namespace == "cuda"


def pytest_load_initial_conftests(early_config, parser, args):
    """Start the prewarm before the benchmark's conftest imports flag_gems."""
    if _PREWARM in early_config.stash or not _wanted(early_config):
        return
    from zl.results.prewarm import Prewarm
    from zl.timing.exclusive import OPT_LOCK, OPT_OVERLAP, overlap_lock
    lock = overlap_lock(options.early_value(early_config, OPT_LOCK), options.early_value(early_config, OPT_OVERLAP))
    prewarm = Prewarm(lambda m: log(TAG, m), lock)
    early_config.stash[_PREWARM] = prewarm
    prewarm.start()


def pytest_configure(config):
    try:
        on = parse_switch(options.value(config, FLAG), True, name=ENV)
        parse_switch(options.value(config, PREWARM_FLAG), True, name=PREWARM_ENV)
    except SwitchError as exc:
        raise pytest.UsageError(str(exc))
    out = options.value(config, "--zl-out-dir").strip()
    if not on or not out:
        return
    from zl.results.recorder import ResultsRecorder
    stash = getattr(config, "stash", None)   # none on in-process test configs
    prewarm = stash.get(_PREWARM, None) if stash is not None else None
    registry.register(config, NAME, ResultsSession(
        ResultsRecorder(os.path.abspath(out), lambda m: log(TAG, m)), prewarm))


def pytest_unconfigure(config):
    registry.release(config, NAME)
