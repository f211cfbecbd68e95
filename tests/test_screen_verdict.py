"""zl.screen_verdict: the one precedence of the screen verdict (ab_rlc_test.sh and run_batch.py)."""
import subprocess
import sys
from pathlib import Path

from zl import screen_verdict as sv

REPO = Path(__file__).resolve().parent.parent


def _run(d: Path, ttgir: str) -> Path:
    (d / "ttgir" / "s0" / "k").mkdir(parents=True)
    (d / "ttgir" / "s0" / "k" / "v0.ttgir").write_text(ttgir)
    return d


def test_failed_side_is_no_rows_whatever_the_code(tmp_path):
    a, b = _run(tmp_path / "a", "module A"), _run(tmp_path / "b", "module B")
    assert sv.judge(3, 3, "0", "1", a, b)["verdict"] == "NO_ROWS"
    assert sv.judge(3, 0, "0", "0", a, b)["verdict"] == "NO_ROWS"


def test_code_verdicts_and_cells(tmp_path):
    a, b = _run(tmp_path / "a", "module A"), _run(tmp_path / "b", "module B")
    same = _run(tmp_path / "c", "module A")
    changed = sv.judge(3, 3, "0", "0", a, b)
    assert changed["verdict"] == "IR_CHANGED@ttgir" and changed["ir_levels"] == "ttgir"
    assert "/" in changed["fp_ttgir"]
    assert sv.judge(3, 3, "0", "0", a, same)["verdict"] == "NO_IR_DIFF"
    assert sv.judge(3, 3, "0", "0", a, tmp_path / "missing")["verdict"] == "NO_TRITON"
    assert set(changed) == {"verdict", *sv.COLUMNS}


def test_cli_header_row_and_bad_input(tmp_path):
    a, b = _run(tmp_path / "a", "x"), _run(tmp_path / "b", "y")
    run = lambda *args: subprocess.run([sys.executable, "-m", "zl.screen_verdict", *map(str, args)],
                                       cwd=REPO, capture_output=True, text=True)
    head = run("--header")
    assert head.returncode == 0 and head.stdout.split() == list(sv.COLUMNS)
    row = run(2, 2, 0, 0, a, b)
    assert row.returncode == 0 and row.stdout.split("\t")[0] == "IR_CHANGED@ttgir"
    assert len(row.stdout.rstrip("\n").split("\t")) == 1 + len(sv.COLUMNS)
    assert run("x", 2, 0, 0, a, b).returncode == 2
    assert run(1, 2).returncode == 2
