"""Make the shape yaml reach FlagGems benchmarks that build special inputs (pool, conv,
upsample, flash_mla ...), registered by class name in zl/shapes/bespoke.py.

Patches: `get_input_iter` of each registered class present in the collected suite (through
`zl.patching.PatchStack`), after collection, undone at unconfigure. Each registry entry names
the yaml shape's fields and how they become the class's inputs; the class's own input code
builds them.

Steps back, in one line naming the class, when the yaml has no key for it, another arity,
or the class no longer has what its entry drives (upstream changed it): upstream's shapes are
measured, never a mix. With SHAPE_MODE=upstream it changes nothing and only records the
shapes' provenance (run_identity.json `shape_sources`, shapes.yaml).
Can be left out when no registered class is measured.
"""

from __future__ import annotations

import pytest

from zl.flaggems import find_benchmark_bases
from zl.patching import PatchStack
from zl.shapes.bespoke import REGISTRY, BespokeInjector
from zl.term import log

TAG = "[bespoke-shape-plugin]"
NAME = "zl_bespoke_shape"


class BespokeShapePlugin:
    def __init__(self) -> None:
        self.injector = BespokeInjector(lambda message: log(TAG, message))
        self.patches = PatchStack()

    def registered_classes(self):
        seen, todo, found = set(), list(find_benchmark_bases("get_input_iter")), []
        while todo:
            cls = todo.pop()
            if cls in seen:
                continue
            seen.add(cls)
            todo.extend(cls.__subclasses__())
            if cls.__name__ in REGISTRY:
                found.append(cls)
        return found

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        classes = self.registered_classes()
        for cls in classes:
            previous = cls.get_input_iter  # own or inherited, possibly the iter plugin's wrapper
            self.patches.setattr(cls, "get_input_iter", self.injector.replacement(REGISTRY[cls.__name__], previous))
        if classes:
            log(TAG, f"handling {', '.join(sorted(c.__name__ for c in classes))}")

    def pytest_sessionfinish(self, session):
        self.injector.recorder.flush()

    @pytest.hookimpl(tryfirst=True)
    def pytest_unconfigure(self, config):
        self.patches.undo_all()


def pytest_configure(config):
    config.pluginmanager.register(BespokeShapePlugin(), NAME)
