"""Make the shape yaml win for benchmarks whose `get_input_iter` loops over a class-level list,
and record where every measured shape came from.

Patches: `get_input_iter` of every FlagGems Benchmark class that defines one (through
`zl.flaggems.BenchmarkMethodPatch`), after collection, undone at unconfigure.
- A class that loops over a class-level list (conv2d_padding's `self.DEFAULT_SHAPES`): the
  yaml entry (op_name, then class names along the MRO) replaces the list on that instance
  when its shapes have the list's own arity.
- Every class: run_identity.json `shape_sources`/`shape_source` and shapes.yaml record, per
  measured shape, yaml / upstream / hardcoded (`zl.shapes.sources`).

Steps back, in one line naming the class, where the yaml cannot apply: no key, another arity,
an unreadable yaml, or a class with no list to replace (a list inside the method, inputs built
otherwise) that `_bespoke_shape_plugin` does not handle. Upstream's shapes are then measured,
never a mix. With SHAPE_MODE=upstream it changes nothing and only records.
Logic: zl/shapes/iter_inject.py; the mechanism reading: zl/shapes/mechanism.py.
"""

from __future__ import annotations

import pytest

from zl.flaggems import BenchmarkMethodPatch
from zl.shapes.iter_inject import TAG, IterInjector
from zl.term import log

NAME = "zl_shape_iter_inject"


class ShapeIterInjectPlugin:
    def __init__(self) -> None:
        self.injector = IterInjector(lambda message: log(TAG, message))
        self.patch = BenchmarkMethodPatch("get_input_iter", self._wrap)

    def _wrap(self, original):
        injector = self.injector

        def get_input_iter(bench, dtype):
            return injector.get_input_iter(bench, original, dtype)
        return get_input_iter

    # tryfirst: wrap before the bespoke plugin replaces its classes, so its replacement is
    # outermost and the undo order below puts the originals back.
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session):
        n = self.patch.apply()
        log(TAG, f"hooked get_input_iter on {n} Benchmark class(es)" if n
            else "no FlagGems Benchmark class found (nothing to inject)")

    def pytest_sessionfinish(self, session):
        # _shape_inject_plugin rewrites shapes.yaml whole at each benchmark; ours go on top again.
        self.injector.recorder.flush()

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config):
        self.patch.restore()


def pytest_configure(config):
    config.pluginmanager.register(ShapeIterInjectPlugin(), NAME)
