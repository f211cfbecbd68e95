"""benchmarks/judge_equivalence.py on the batch stub: a fast screen (two cases per device, side A
linked from a baseline, the bytecode cache shared) against a plain one (one case at a time, no
bytecode cache, no heap freeze) agrees item for item; a changed fingerprint, verdict or status
in either is named, with exit 1."""

import json
import shutil
import subprocess
import sys

from harness.runner import REPO_ROOT
from test_batch import batch

TOOL = REPO_ROOT / "benchmarks" / "judge_equivalence.py"
OPS = ("softmax", "relu", "abs", "exp")
STUB = dict(ZL_STUB_SWITCH="ZL_X", ZL_STUB_BINARY="1", ZL_STUB_IR_MAP="relu=same,abs=same,exp=none")


def screen(tmp_path, name, *args, **env):
    out = tmp_path / name
    r = batch(tmp_path, "--ops", *OPS, "--switch", "ZL_X", "--judge-first", "--controls", "1",
              "--devices", "0", "--batch-dir", out, *args, **{**STUB, **env})
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def tool(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_fast_and_plain_screens_agree_on_every_status_verdict_and_level(tmp_path):
    base = tmp_path / "base"
    r = batch(tmp_path, "--ops", *OPS, "--judge", "--devices", "0", "--batch-dir", base, **STUB)
    assert r.returncode == 0, r.stdout + r.stderr
    fast = screen(tmp_path, "fast", "--judge-share", "2", "--baseline", base, "--bytecode-cache", "shared")
    plain = screen(tmp_path, "plain", "--judge-share", "1", "--bytecode-cache", "off", ZL_GC_FREEZE="off")
    out = tmp_path / "eq"
    r = tool(fast, plain, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "judge_equivalence.json").read_text())
    c = res["counts"]
    # 4 nodes x 2 sides; verdicts of all 4; the 3 nodes with TTGIR have it and the binary per side
    assert (c["nodes"], c["statuses"], c["statuses_equal"]) == (4, 8, 8)
    assert (c["verdicts"], c["verdicts_equal"]) == (4, 4)
    assert (c["fingerprint_sides"], c["levels"], c["levels_equal"]) == (8, 12, 12)
    assert res["differences"] == [] and "Every compared status, verdict and fingerprint level agrees." in r.stdout
    assert {row["node"]: row["verdict"] for row in res["rows"]} == {
        "main:softmax": "IR_CHANGED@ttgir", "main:relu": "NO_IR_DIFF", "main:abs": "NO_IR_DIFF",
        "main:exp": "NO_TRITON"}
    assert "--baseline" in res["fast"]["argv"] and "--bytecode-cache off" in res["plain"]["argv"]
    assert (out / "judge_equivalence.md").read_text() == r.stdout
    # a moved bundle reads the same: case directories are found under the batch, not at out_dir
    moved = tmp_path / "moved"
    shutil.copytree(fast, moved)
    shutil.rmtree(fast)
    assert tool(moved, plain).stdout.split("\n", 3)[3] == r.stdout.split("\n", 3)[3]


def test_a_changed_level_verdict_or_status_is_named_with_exit_1(tmp_path):
    fast = screen(tmp_path, "fast", "--judge-share", "2")
    # relu's code follows the switch on the plain path; exp fails there
    other = screen(tmp_path, "plain", "--judge-share", "1", ZL_STUB_IR_MAP="abs=same,exp=none",
                   ZL_STUB_PLAN="exp=fail")
    r = tool(fast, other)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "| main:relu | verdict | NO_IR_DIFF | IR_CHANGED@ttgir |" in r.stdout
    assert "| main:relu | ttgir after |" in r.stdout and "| main:relu | binary after |" in r.stdout
    assert "| main:exp | status before | PASS | FAIL |" in r.stdout
    assert "| main:softmax |" not in r.stdout and "| main:abs |" not in r.stdout
    # one fingerprint file altered on one side: that level of that node, nothing else
    rec = fast / "judge" / "after" / "main" / "abs" / "ttgir" / "ir_fingerprints.json"
    doc = json.loads(rec.read_text())
    doc["levels"]["binary"]["hash"] = "0" * 64
    rec.write_text(json.dumps(doc))
    r = tool(fast, screen(tmp_path, "plain2", "--judge-share", "1"))
    assert r.returncode == 1 and r.stdout.count("| main:") == 1
    assert "| main:abs | binary after | 000000000000 |" in r.stdout
    # a batch cut short: its unfinished node is listed, not compared as a difference
    rows = (fast / "judge" / "after" / "ops_status.csv").read_text().splitlines()
    (fast / "judge" / "after" / "ops_status.csv").write_text("\n".join(
        ln.replace(",PASS,", ",INTERRUPTED,") if ",abs," in ln else ln for ln in rows) + "\n")
    r = tool(fast, tmp_path / "plain2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Unfinished in either batch (not compared): main:abs" in r.stdout and "| 3 |" in r.stdout


def test_a_directory_that_is_no_batch_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    r = tool(tmp_path / "empty", tmp_path / "empty")
    assert r.returncode == 2 and "!!! " in r.stderr and "no ops_status.csv" in r.stderr
    assert "Traceback" not in r.stderr
