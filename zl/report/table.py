"""Tidy FlagGems' result tables: fold inputs that are identical down a table into one
legend line, keep only the varying part of each row's Size Detail, colour SUCCESS green
and FAILED red.

Column names, the `SUCCESS` / `FAILED` words and every number stay exactly upstream's,
so grep and the run.log parser keep working; `zl.runlog.sizefold` unfolds the legend
back to upstream's text. Colour follows FLAGGEMS_PERF_COLOR / NO_COLOR (zl.term).
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any, Callable, List

from zl.patching import PatchStack
from zl.runlog.sizefold import fold, legend_line
from zl.term import style

_STATUS_RE = re.compile(r"^(SUCCESS|FAILED)(?= )", re.MULTILINE)


def render(result: Any, original_str: Callable[[Any], str], fold_inputs: bool = True) -> str:
    """upstream's `str(result)`, folded (when `fold_inputs` and safe) and coloured."""
    metrics = list(getattr(result, "result", None) or [])
    folded = None
    if fold_inputs and metrics:
        folded = fold([None if m.shape_detail is None else f"{m.shape_detail}" for m in metrics])
    text = original_str(result) if folded is None else _render_folded(result, metrics, folded, original_str)
    return _STATUS_RE.sub(lambda m: style(m.group(1), "green" if m.group(1) == "SUCCESS" else "red",
                                          stream=sys.stdout), text)


def _render_folded(result: Any, metrics: List[Any], folded, original_str) -> str:
    legend, shown = folded
    saved = [m.shape_detail for m in metrics]
    try:
        for m, s in zip(metrics, shown):
            m.shape_detail = s
        text = original_str(result)
    finally:
        for m, s in zip(metrics, saved):
            m.shape_detail = s
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line and set(line) == {"-"}:
            lines.insert(i + 1, legend_line(legend))
            break
    return "\n".join(lines)


def find_result_classes() -> List[type]:
    """`BenchmarkResult` classes (with their own __str__) of the imported `*consts` modules."""
    found = []
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.endswith("consts"):
            continue
        cls = getattr(mod, "BenchmarkResult", None)
        if inspect.isclass(cls) and "__str__" in cls.__dict__ and cls not in found:
            found.append(cls)
    return found


class ResultTables:
    """Wraps `BenchmarkResult.__str__` once per class; `close` restores the originals."""

    def __init__(self, fold_inputs: bool):
        self.patched: List[type] = []  # classes wrapped so far (a class is wrapped once)
        self.patches = PatchStack()
        self.fold_inputs = fold_inputs

    def patch(self) -> int:
        n = 0
        for cls in find_result_classes():
            if cls in self.patched:
                continue
            original = cls.__dict__["__str__"]

            def __str__(result, _orig=original, _fold=self.fold_inputs):
                return render(result, _orig, _fold)

            self.patches.setattr(cls, "__str__", __str__)
            self.patched.append(cls)
            n += 1
        return n

    def close(self) -> None:
        self.patched.clear()
        self.patches.undo_all()
