"""Tidy FlagGems' result tables: fold inputs that are identical down a table into
one legend line, keep only the varying part of each row's Size Detail, colour
SUCCESS green and FAILED red.

Column names, the `SUCCESS` / `FAILED` words and every number stay exactly
upstream's, so grep and the run.log parser keep working; the fold format has one
definition (`runlog/sizefold.py`) and the parser unfolds it back to upstream's
text. Colour follows FLAGGEMS_PERF_COLOR / NO_COLOR; run.log is stripped anyway.
Set ZL_PRETTY_FOLD=0 to keep upstream's Size Detail verbatim.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from typing import Any, List, Optional, Tuple

from zl.term import log, style
from zl.runlog.sizefold import fold, legend_line

TAG = "[pretty-report-plugin]"
_STATUS_RE = re.compile(r"^(SUCCESS|FAILED)(?= )", re.MULTILINE)
_patched: List[Tuple[type, Any]] = []


def _fold_enabled() -> bool:
    return os.environ.get("ZL_PRETTY_FOLD", "1").strip().lower() not in ("0", "false", "no", "off")


def render(result: Any, original_str) -> str:
    metrics = list(getattr(result, "result", None) or [])
    folded = None
    if _fold_enabled() and metrics:
        details = [None if m.shape_detail is None else f"{m.shape_detail}" for m in metrics]
        folded = fold(details)
    if folded is None:
        text = original_str(result)
    else:
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
        text = "\n".join(lines)
    return _STATUS_RE.sub(lambda m: style(m.group(1), "green" if m.group(1) == "SUCCESS" else "red",
                                          stream=sys.stdout), text)


def find_result_classes() -> List[type]:
    found = []
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.endswith("consts"):
            continue
        cls = getattr(mod, "BenchmarkResult", None)
        if inspect.isclass(cls) and "__str__" in cls.__dict__ and cls not in found:
            found.append(cls)
    return found


def patch() -> int:
    done = {cls for cls, _ in _patched}
    n = 0
    for cls in find_result_classes():
        if cls in done:
            continue
        original = cls.__dict__["__str__"]

        def __str__(self, _orig=original):
            return render(self, _orig)

        cls.__str__ = __str__
        _patched.append((cls, original))
        n += 1
    return n


def restore() -> None:
    while _patched:
        cls, original = _patched.pop()
        cls.__str__ = original


def pytest_collection_finish(session):
    """consts is imported with the benchmark modules, i.e. by now."""
    if patch():
        log(TAG, "result tables: folding constant inputs" if _fold_enabled() else "result tables: colour only")


def pytest_unconfigure(config):
    restore()
