"""Drop stale `torch.cuda.is_available()` skip gates from FlagGems benchmarks on MThreads.

Several upstream benchmarks skip on `not torch.cuda.is_available()` although what they
measure dispatches through `flag_gems.device` and their torch baseline is a plain torch op.
On an MThreads GPU (torch_musa) that gate is always true, so a working operator reads as
"not measured". Each override below is pinned to one benchmark file and one exact skip
reason, and was read against FlagGems ed2508bcb; a gate in another file, with another
reason, or whose condition is false is left untouched, and so is every gate on any vendor
other than `flag_gems.vendor_name == "mthreads"`.

Patches: the `skipif` marks matched below are removed from the collected items' nodes in
`pytest_collection_modifyitems` (through `zl.patching.PatchStack`, put back at unconfigure).
Each dropped gate is one log line and one entry of run_identity.json `musa_compat_dropped`.
Steps back (one line) when FlagGems is not imported or the vendor is not mthreads;
`--zl-musa-compat=0` (ZL_MUSA_COMPAT=0) keeps upstream's gates to see its own verdict.
Loaded first, through the MUSA backend's compat_plugins. Not run on MThreads hardware here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Iterable, List

import pytest

from zl import options
from zl.identity import update_identity
from zl.patching import PatchStack
from zl.switches import SwitchError, parse_switch
from zl.term import log

TAG = "[musa-benchmark-compat-plugin]"
NAME = "zl_musa_benchmark_compat"
VENDOR = "mthreads"


@dataclass(frozen=True)
class Gate:
    file: str      # path relative to the FlagGems root
    reason: str    # the skipif reason, exactly
    why: str       # why the gate is stale there


GATES = (
    Gate("benchmark/test_fft.py", "CUDA is not available",
         "inputs on self.device (flag_gems.device), baseline torch.fft.fft, gems op flag_gems.fft"),
    Gate("benchmark/test_scaled_dot_product_attention_math.py", "CUDA is not available",
         "inputs on flag_gems.device, baseline aten._scaled_dot_product_attention_math; its CPU gate stays"),
    Gate("benchmark/test_top_k_per_row_prefill.py", "CUDA device required",
         "module-level gate; inputs on flag_gems.device, baseline falls back to FlagGems' non-TLE kernel "
         "when vLLM is absent"),
)


def _matches(path: Any, gate: Gate) -> bool:
    parts = PurePosixPath(str(path).replace("\\", "/")).parts
    want = PurePosixPath(gate.file).parts
    return tuple(parts[-len(want):]) == want


class MusaCompat:
    def __init__(self, gates: Iterable[Gate] = GATES):
        self.gates = tuple(gates)
        self.patches = PatchStack()
        self.dropped: List[str] = []

    def drop_gates(self, items: Iterable[Any]) -> List[str]:
        """Remove matching, firing skipif marks from each item's node chain; returns the ids of the
        nodes that carried them."""
        dropped: List[str] = []
        for item in items:
            gates = [g for g in self.gates if _matches(getattr(item, "path", ""), g)]
            for node in item.listchain() if gates else ():
                for mark in list(node.own_markers):
                    gate = next((g for g in gates if mark.name == "skipif"
                                 and mark.kwargs.get("reason") == g.reason and mark.args == (True,)), None)
                    if gate is None:
                        continue
                    node.own_markers.remove(mark)
                    self.patches.push(lambda n=node, m=mark: n.own_markers.append(m))
                    # A module-level gate sits on the module node: one drop covers its items.
                    where = getattr(node, "nodeid", "") or item.nodeid
                    log(TAG, f"dropped skipif(reason={gate.reason!r}) on {where}: {gate.why}")
                    dropped.append(where)
        self.dropped.extend(d for d in dropped if d not in self.dropped)
        return dropped

    def pytest_collection_modifyitems(self, session, config, items):
        flag_gems = sys.modules.get("flag_gems")
        vendor = getattr(flag_gems, "vendor_name", None) if flag_gems is not None else None
        if vendor != VENDOR:
            log(TAG, "flag_gems is not imported; upstream's skip gates kept" if flag_gems is None
                else f"vendor_name={vendor!r} is not {VENDOR!r}; upstream's skip gates kept")
            return
        if self.drop_gates(items):
            update_identity(musa_compat_dropped=list(self.dropped))

    def pytest_unconfigure(self, config):
        self.patches.undo_all()


def pytest_addoption(parser):
    options.add(parser, "--zl-musa-compat", "ZL_MUSA_COMPAT",
                "1 = drop the stale CUDA-only skip gates listed in _musa_benchmark_compat_plugin "
                "(mthreads only); 0 = keep upstream's gates", "1")


def pytest_configure(config):
    try:
        on = parse_switch(options.value(config, "--zl-musa-compat"), True, name="ZL_MUSA_COMPAT")
    except SwitchError as exc:
        raise pytest.UsageError(str(exc)) from None
    if on:
        config.pluginmanager.register(MusaCompat(), NAME)
    else:
        log(TAG, "ZL_MUSA_COMPAT=0: upstream's skip gates kept")
