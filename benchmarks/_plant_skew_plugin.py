"""Helper, not a tool (results_check_screens.sh's plant stage): a planted wrong answer in
FlagGems' abs.

With ZL_PLANT_SKEW=1 (read at each `flag_gems.use_gems()` entry, so the screen's switch
drives it), FlagGems' own abs is excluded from use_gems and aten::abs on the device's
dispatch key runs `flag_gems.ops.abs(x) * 1.01` instead: a 1 % numeric change the results
check must call MISMATCH / WRONG_RESULTS. Load with ZL_EXTRA_PLUGINS=_plant_skew_plugin
and benchmarks/ on PYTHONPATH. Never part of a measurement.
"""

from __future__ import annotations

import contextlib
import os
import sys

_state = {"orig": None}


def _skewed_use_gems(orig):
    @contextlib.contextmanager
    def use_gems(*args, exclude=None, **kwargs):
        if os.environ.get("ZL_PLANT_SKEW", "0") != "1":
            with orig(*args, exclude=exclude, **kwargs):
                yield
            return
        import torch
        gems = sys.modules["flag_gems"]
        names = [exclude] if isinstance(exclude, str) else list(exclude or [])
        with orig(*args, exclude=names + ["abs"], **kwargs):
            lib = torch.library.Library("aten", "IMPL")
            gems_abs = gems.ops.abs
            lib.impl("abs", lambda x: gems_abs(x) * 1.01, str(gems.device).upper())
            try:
                yield
            finally:
                lib._destroy()
    return use_gems


def pytest_runtest_setup(item):
    gems = sys.modules.get("flag_gems")
    if gems is not None and _state["orig"] is None:
        _state["orig"] = gems.use_gems
        gems.use_gems = _skewed_use_gems(gems.use_gems)
        print("[plant-skew] flag_gems.use_gems wrapped (ZL_PLANT_SKEW=1 skews abs by 1 %)", file=sys.stderr)


def pytest_unconfigure(config):
    gems = sys.modules.get("flag_gems")
    if gems is not None and _state["orig"] is not None:
        gems.use_gems = _state["orig"]
        _state["orig"] = None
