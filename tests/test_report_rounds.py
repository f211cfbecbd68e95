"""zl/report/rounds.py beyond what test_verdicts.py and test_batch_summary.py cover: a round
whose cell compiled other code than its side's first cell is left out of the analysis."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import batch_summary as bs
from harness import report_fixtures as rf

B_CODE = {**rf.SAME_CODE, "llir": "2d" * 32, "ptx": "8f" * 32, "binary": "c2" * 32}


def campaign(tmp_path: Path) -> Path:
    root = rf.rounds_root(tmp_path / "campaign")
    for cell in root.iterdir():
        if cell.is_dir():
            rf.write_fingerprints(cell, rf.SAME_CODE if cell.name.endswith("_A") else B_CODE)
    return root


def report(tmp_path: Path, root: Path, capsys):
    js = tmp_path / "out.json"
    capsys.readouterr()
    rc = bs.main(["--ab-rounds", str(root), "--json", str(js)])
    return rc, json.loads(js.read_text()), capsys.readouterr().out


def test_every_round_of_one_code_is_analysed(tmp_path, capsys):
    rc, d, out = report(tmp_path, campaign(tmp_path), capsys)
    assert rc == 0 and d["rounds"] == 4 and d["incomplete_rounds"] == []
    assert "compiled other code" not in out


def test_a_round_whose_side_b_compiled_other_code_is_left_out(tmp_path, capsys):
    root = campaign(tmp_path)
    rf.write_fingerprints(root / "r3_B", {**B_CODE, "ttgir": "ee" * 32})
    rc, d, out = report(tmp_path, root, capsys)
    assert rc == 0 and d["rounds"] == 3, d["incomplete_rounds"]
    assert d["incomplete_rounds"] == [
        next(m for m in d["incomplete_rounds"] if m.startswith("round 3: r3_B compiled other code than r1_B"))]
    assert "IR_CHANGED@ttgir" in d["incomplete_rounds"][0]
    assert "!!! [ab-rounds] softmax: round 3: r3_B compiled other code than r1_B (IR_CHANGED@ttgir" in out
    assert "INCOMPLETE" in out
    # the other rounds' medians are what remains: round 3's cells are not among them
    assert len(d["per_round_median_pct"]) == 3


def test_a_round_without_ir_beside_rounds_with_it_is_left_out(tmp_path, capsys):
    root = campaign(tmp_path)
    shutil.rmtree(root / "r2_A" / "ttgir")
    rc, d, out = report(tmp_path, root, capsys)
    assert rc == 0 and d["rounds"] == 3
    assert any(m.startswith("round 2: r2_A compiled other code than r1_A (NO_IR")
               for m in d["incomplete_rounds"]), d["incomplete_rounds"]


def test_rounds_that_compiled_nothing_on_every_side_stay(tmp_path, capsys):
    rc, d, _ = report(tmp_path, rf.rounds_root(tmp_path / "campaign"), capsys)
    assert rc == 0 and d["rounds"] == 4
