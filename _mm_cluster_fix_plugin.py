"""Route mm around FlagGems' Hopper fp16 cluster kernel, whose out-of-bounds access crashes
the process, and say whether that path is live at all.

Patches: `cluster_remote_mm` in every loaded FlagGems module that defines
`cluster_remote_mm_scenario` and has the path live (through `zl.patching.PatchStack`), after
collection, undone at unconfigure. The replacement sends the call to the same module's
`general_mm`; each shape routed so is recorded in run_identity.json
(`mm_cluster_rerouted`, "MxNxK dtype") next to `mm_cluster_fix=routed`.

The path is live only when the module's `HAS_TLE` is true (FlagTree's TLE extension) and its
`BLOCK_CLUSTER_MESH` exists; with stock Triton `mm` never reaches the cluster kernel. Then
the plugin patches nothing and says so in one line (`mm_cluster_fix=not_live`, or `absent`
when no loaded module has the path). Every shape the scenario selects is routed: which of
them crash is not recorded anywhere, so routing a subset could leave one crashing.

Loaded by the plan only with ZL_ENABLE_MM_CLUSTER=1 on a backend declaring
supports_mm_cluster_fix (cuda); a run with it measures general_mm where upstream would run
the cluster kernel, which `mm_cluster_fix` in the identity makes visible to comparisons.
"""

from __future__ import annotations

import sys
from typing import Any, List

import pytest

from zl.flaggems import PACKAGES
from zl.identity import update_identity
from zl.patching import PatchStack
from zl.term import log

TAG = "[mm-cluster-fix-plugin]"
NAME = "zl_mm_cluster_fix"
SCENARIO, CLUSTER, GENERAL = "cluster_remote_mm_scenario", "cluster_remote_mm", "general_mm"


def cluster_modules() -> List[Any]:
    """Loaded FlagGems modules that define the cluster path."""
    return [mod for name, mod in sorted(sys.modules.items())
            if mod is not None and name.split(".")[0] in PACKAGES and callable(getattr(mod, SCENARIO, None))]


def is_live(mod: Any) -> bool:
    return bool(getattr(mod, "HAS_TLE", False)) and getattr(mod, "BLOCK_CLUSTER_MESH", None) is not None


class MmClusterFix:
    def __init__(self) -> None:
        self.patches = PatchStack()
        self.rerouted: List[str] = []
        self.state = ""

    def _route(self, mod: Any):
        def cluster_remote_mm(a, b, c, M, N, K):
            shape = f"{M}x{N}x{K} {str(a.dtype).replace('torch.', '')}"
            if shape not in self.rerouted:
                self.rerouted.append(shape)
                log(TAG, f"{mod.__name__}: {shape} routed to general_mm instead of the cluster kernel")
                update_identity(mm_cluster_rerouted=list(self.rerouted))
            return getattr(mod, GENERAL)(a, b, c, M, N, K)
        return cluster_remote_mm

    def apply(self) -> str:
        mods = cluster_modules()
        if not mods:
            self.state = "absent"
            loaded = "flag_gems is not imported" if not any(n.split(".")[0] in PACKAGES for n in sys.modules) \
                else f"no loaded FlagGems module defines {SCENARIO}"
            log(TAG, f"not live: {loaded}; nothing patched")
        elif not any(is_live(m) for m in mods):
            self.state = "not_live"
            log(TAG, f"not live: HAS_TLE is false in {', '.join(m.__name__ for m in mods)} (no FlagTree TLE): "
                     "mm never takes the cluster path; nothing patched")
        else:
            routed = []
            for mod in (m for m in mods if is_live(m)):
                if not callable(getattr(mod, GENERAL, None)) or not callable(getattr(mod, CLUSTER, None)):
                    log(TAG, f"{mod.__name__}: cluster path live but no {GENERAL}/{CLUSTER} to route; left alone")
                    continue
                self.patches.setattr(mod, CLUSTER, self._route(mod))
                routed.append(mod.__name__)
            self.state = "routed" if routed else "live_unpatched"
            log(TAG, f"cluster path live: {CLUSTER} routed to {GENERAL} in {', '.join(routed)}" if routed
                else "cluster path live but nothing could be routed: the cluster kernel may run")
        update_identity(mm_cluster_fix=self.state)
        return self.state

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        self.apply()

    def pytest_unconfigure(self, config):
        self.patches.undo_all()


def pytest_configure(config):
    config.pluginmanager.register(MmClusterFix(), NAME)
