"""Tidy FlagGems' result tables on the console: fold inputs identical down a table into
one legend line and colour SUCCESS / FAILED (code: `zl.report.table`).

What it patches: `BenchmarkResult.__str__` of the imported `*consts` modules, after
collection; restored at unconfigure. Column names, the status words and every number
stay upstream's, so grep and the run.log parser keep working; the fold format has one
definition (`zl.runlog.sizefold`) and the parser unfolds it back to upstream's text.

When it steps back: `--zl-pretty-fold` / ZL_PRETTY_FOLD off keeps upstream's Size Detail
verbatim (colour only); a table whose details are not safely reversible is left unfolded.
Colour follows `--zl-color` / FLAGGEMS_PERF_COLOR (always / never; empty = when the
terminal is one) and NO_COLOR; run.log is stripped of it anyway. A command-line colour
is part of the session's run configuration, so every zl log line follows it. A fold word that is neither on nor off, or a
colour other than always/never/empty, is a usage error (exit 4).

Why: a 40-row table whose Size Detail repeats the same dtype and dim on every row hides
the one column that varies; the fold is exactly reversible, so nothing is lost.
"""

from __future__ import annotations

import pytest

from zl import options, registry
from zl.report.table import ResultTables
from zl.switches import SwitchError, parse_switch
from zl.term import log

TAG = "[pretty-report-plugin]"
NAME = "zl_pretty_report"
FOLD_ENV = "ZL_PRETTY_FOLD"
COLOR_ENV = "FLAGGEMS_PERF_COLOR"
COLOR_WORDS = ("", "always", "never")  # as run_pytest.sh accepts them


class PrettyReport(ResultTables):
    def pytest_collection_finish(self, session):
        """consts is imported with the benchmark modules, i.e. by now."""
        if self.patch():
            log(TAG, "result tables: folding constant inputs" if self.fold_inputs else "result tables: colour only")


def pytest_addoption(parser):
    options.add(parser, "--zl-pretty-fold", FOLD_ENV,
                "fold inputs constant down a result table into a legend line (on/off)", "1")
    options.add(parser, "--zl-color", COLOR_ENV,
                "console colour: always / never; empty = when stderr is a terminal (NO_COLOR disables)")


def pytest_configure(config):
    try:
        fold_inputs = parse_switch(options.value(config, "--zl-pretty-fold"), True, name=FOLD_ENV)
    except SwitchError as exc:
        raise pytest.UsageError(str(exc))
    color = options.value(config, "--zl-color").strip().lower()
    if color not in COLOR_WORDS:
        raise pytest.UsageError(f"{COLOR_ENV}={color!r} must be always, never or empty")
    registry.register(config, NAME, PrettyReport(fold_inputs))


def pytest_unconfigure(config):
    """Put every wrapped BenchmarkResult.__str__ back."""
    registry.release(config, NAME)
