"""A test's own Benchmark class, found where zl_bench looks for FlagGems' (zl.flaggems
find_benchmark_bases: a loaded module named like FlagGems' benchmark/base.py)."""

import sys
import types


def install_benchmark(monkeypatch, cls: type, module: str = "fakebench.base") -> types.ModuleType:
    """Put `cls` in sys.modules as `<module>.Benchmark` for the test's duration."""
    mod = types.ModuleType(module)
    mod.Benchmark = cls
    monkeypatch.setitem(sys.modules, module, mod)
    return mod
