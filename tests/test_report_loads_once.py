"""Every report reads each input run's files once (zl/report/run.py LoadedRun).

A view that reads a run on its own can judge it from other bytes than the rest of the report
did (the page's IR line once came from another IR reader than the screen's verdict), so a
full report, --json and --html included, must open run.log, run_identity.json,
ttgir/ir_fingerprints.json and every results/*.json of each run at most once. Files are
counted through Python's audit hook for `open`, which every reader goes through.
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Counter, Optional

import pytest

import batch_summary as bs
from harness import report_fixtures as rf


class _Opens:
    """Counts files opened under `root` while `root` is set (the hook cannot be removed)."""

    def __init__(self) -> None:
        self.root: Optional[str] = None
        self.counts: Counter[str] = collections.Counter()

    def __call__(self, event: str, args) -> None:
        if event != "open" or self.root is None or not args:
            return
        path = args[0]
        if isinstance(path, (str, Path)) and str(path).startswith(self.root):
            self.counts[str(Path(path).relative_to(self.root))] += 1


_OPENS = _Opens()
sys.addaudithook(_OPENS)


@pytest.fixture
def opens(tmp_path):
    """Counter of files under tmp_path/'in' opened during the test (outputs go elsewhere)."""
    _OPENS.root, _OPENS.counts = str(tmp_path / "in") + "/", collections.Counter()
    try:
        yield _OPENS.counts
    finally:
        _OPENS.root = None


def _report(tmp_path, *argv) -> int:
    out = tmp_path / "out"
    return bs.main([str(a) for a in argv]
                   + ["--json", str(out / "r.json"), "--html", str(out / "r.html")])


def _read_twice(counts: Counter[str]):
    """Files of a run directory (one holding run.log) opened more than once; a root's own
    table (ops_status.csv, screen.tsv) is not a run's file."""
    root = Path(_OPENS.root or "/")
    return {path: n for path, n in counts.items() if n > 1
            and any((d / "run.log").is_file() for d in (root / path).parents if root in d.parents)}


def _assert_each_read_once(counts: Counter[str], expect) -> None:
    assert not _read_twice(counts), f"files opened more than once: {_read_twice(counts)}"
    missing = [e for e in expect if not counts.get(e)]
    assert not missing, f"the report did not read {missing} at all (the count proves nothing)"


def test_ab_report_reads_each_sides_files_once(tmp_path, opens, capsys):
    runs = rf.ab_pair(tmp_path / "in" / "ab")
    for side in ("before", "after"):
        rf.write_fingerprints(runs[side], rf.SAME_CODE)
        rf.write_results(runs[side], "softmax")
    opens.clear()
    assert _report(tmp_path, "--ab", runs["before"], runs["after"]) == 0
    _assert_each_read_once(opens, [f"ab/{side}/{name}" for side in ("before", "after")
                                   for name in ("run.log", "run_identity.json",
                                                "ttgir/ir_fingerprints.json", "results/softmax.json")])


def test_ab_inside_a_screen_root_reads_the_pair_once_for_its_band(tmp_path, opens, capsys):
    """The band comes from the screen's A/A cells; the pair itself is one of the screen's
    cells and is not read a second time for it."""
    root = rf.screen_root(tmp_path / "in" / "screen")
    opens.clear()
    assert _report(tmp_path, "--ab", root / "relu@float16_before", root / "relu@float16_after") == 0
    _assert_each_read_once(opens, [f"screen/{cell}/{name}" for cell in
                                   ("relu@float16_before", "relu@float16_after",
                                    "softmax@float16_before", "softmax@float16_after")
                                   for name in ("run.log", "run_identity.json",
                                                "ttgir/ir_fingerprints.json")])


def test_rounds_report_reads_each_cell_once(tmp_path, opens, capsys):
    root = rf.rounds_root(tmp_path / "in" / "campaign")
    for cell in ("r1_A", "r1_B", "r2_A", "r2_B"):
        rf.write_fingerprints(root / cell, rf.SAME_CODE)
        rf.write_results(root / cell, "softmax")
    opens.clear()
    assert _report(tmp_path, "--ab-rounds", root) == 0
    cells = [f"r{k}_{s}" for k in range(1, 5) for s in "AB"]
    _assert_each_read_once(opens, [f"campaign/softmax/{c}/{name}" for c in cells
                                   for name in ("run.log", "run_identity.json")]
                           + [f"campaign/softmax/{c}/results/softmax.json"
                              for c in ("r1_A", "r1_B", "r2_A", "r2_B")]
                           + ["campaign/softmax/r1_A/ttgir/ir_fingerprints.json"])


def test_screen_and_batch_reports_read_each_run_once(tmp_path, opens, capsys):
    root = rf.screen_root(tmp_path / "in" / "screen")
    batch = rf.batch_dir(tmp_path / "in" / "batch")
    rf.write_results(batch / "FlagGems" / "mm_kernel", "mm")
    opens.clear()
    assert _report(tmp_path, "--screen", root) == 0
    _assert_each_read_once(opens, [f"screen/relu@float16_after/{name}" for name in
                                   ("run.log", "run_identity.json", "ttgir/ir_fingerprints.json")])
    opens.clear()
    assert _report(tmp_path, "--batch", batch) == 0
    _assert_each_read_once(opens, ["batch/FlagGems/mm_kernel/run.log",
                                   "batch/FlagGems/mm_kernel/results/mm.json"])


def test_batch_summary_csv_reads_each_run_once(tmp_path, opens, capsys):
    batch = rf.batch_dir(tmp_path / "in" / "batch")
    opens.clear()
    assert bs.main([str(batch), "-o", str(tmp_path / "out" / "summary.csv")]) == 0
    _assert_each_read_once(opens, ["batch/FlagGems/mm_kernel/run.log",
                                   "batch/FlagGems/mm_kernel/run_identity.json"])


def test_ab_of_changed_code_reads_each_dumped_ir_file_once(tmp_path, opens, capsys):
    """The change summary (zl/report/changes.py) reads index.tsv and each dumped IR file
    through the same LoadedRun, once."""
    from test_report_changes import BASE, kernel, make_run
    runs = rf.ab_pair(tmp_path / "in" / "ab")
    make_run(runs["before"], [kernel(**BASE), kernel("other", **BASE)], ("ttgir", "llir"))
    make_run(runs["after"], [kernel(converts=1, **BASE), kernel("other", **BASE)], ("ttgir", "llir"))
    opens.clear()
    assert _report(tmp_path, "--ab", runs["before"], runs["after"]) == 0
    assert "what changed: +1 convert_layout" in capsys.readouterr().out
    _assert_each_read_once(opens, [f"ab/{side}/ttgir/{name}" for side in ("before", "after")
                                   for name in ("index.tsv", "1024/k/w4s3.ttgir")])
