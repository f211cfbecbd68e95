"""Make the shape yaml win over shapes a Benchmark subclass hardcodes, and record the
shapes each benchmark really used in `$OUT_DIR/shapes.yaml` (code: `zl.shapes`).

What it patches: `init_user_config` of every FlagGems Benchmark class that defines it
(overrides included), after collection; restored at unconfigure. After upstream's own
`set_shapes`, the yaml entry found the way upstream looks it up (`op_name`, then the
class names along the MRO) replaces `self.shapes`.

When it steps back: with `--zl-shape-mode` / ZL_SHAPE_MODE=upstream or no shape file it
changes nothing and only records; where the yaml entry's arity differs from the class's
own shapes it keeps the class's shapes and says so (feeding them would crash the input
builder or measure something else). A mode other than inline/file/upstream is a usage
error (exit 4).

Why: about 200 upstream subclasses hardcode their shapes, so a user's SHAPE_FILE would
silently do nothing for them; shapes.yaml states what was really measured (valid as a
SHAPE_FILE for a rerun; the starting yaml is kept as shapes.source.yaml).

The dtypes measured where upstream refuses `--dtypes` (code: `zl.shapes.dtype_fallback`):
`--zl-dtype-fallback` / ZL_DTYPE_FALLBACK=all (default) patches nothing, the refusal stands;
`first` wraps `set_dtypes` after collection (restored at unconfigure) so the op's first
declared dtype is measured, says so in a DTYPE_FALLBACK marker line and records identity
`dtype_fallback=first`. Another word is a usage error (exit 4).
"""

from __future__ import annotations

import pytest

from zl import options, registry
from zl.shapes.dtype_fallback import DtypeFallbackError, FirstDtype, check_policy
from zl.shapes.inject import ShapeInjector, ShapeModeError

NAME = "zl_shape_inject"
DTYPE_NAME = "zl_dtype_fallback"


def pytest_addoption(parser):
    options.add(parser, "--zl-shape-file", "ZL_SHAPE_FILE",
                "shape yaml laid over the Benchmark classes (run_pytest.sh: the --shape_file it passes)")
    options.add(parser, "--zl-shape-mode", "ZL_SHAPE_MODE",
                "inline / file / upstream; upstream = FlagGems' own shapes, only recorded")
    options.add(parser, "--zl-dtype-fallback", "ZL_DTYPE_FALLBACK",
                "all / first: where upstream refuses --dtypes, all = the refusal stands, first = "
                "measure the op's first declared dtype (a DTYPE_FALLBACK line; identity "
                "dtype_fallback=first, a caliber field)", default="all")


def pytest_configure(config):
    try:
        injector = ShapeInjector(options.value(config, "--zl-shape-file"),
                                 options.value(config, "--zl-shape-mode"),
                                 options.value(config, "--zl-out-dir"))
        policy = check_policy(options.value(config, "--zl-dtype-fallback"))
    except (ShapeModeError, DtypeFallbackError) as exc:
        raise pytest.UsageError(str(exc))
    registry.register(config, NAME, injector)
    if policy == "first":   # `all` registers nothing: upstream's refusal stands
        registry.register(config, DTYPE_NAME, FirstDtype(options.value(config, "--zl-out-dir")))


def pytest_unconfigure(config):
    """Put every wrapped init_user_config (and, under `first`, set_dtypes) back."""
    registry.release(config, DTYPE_NAME)
    registry.release(config, NAME)
