"""benchmarks/judge_equivalence.py on the batch stub: a fast screen (two cases per device, side A
linked from a baseline, the bytecode cache shared) against a plain one (one case at a time, no
bytecode cache, no heap freeze) agrees item for item; a changed fingerprint, verdict or status
in either is named, with exit 1."""

import json
import shutil
import subprocess
import sys

import pytest

from harness.runner import REPO_ROOT
from test_batch import batch
from zl.autotune import records as store

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


# ---------------------------------------------------------------- autotune picks
# With ZL_STUB_PICKS every op records two keys of stub.<op>_kernel on side A (<op>.json) and
# replays them on side B (<op>.used.json); both screens pick alike until a test edits a pick.

@pytest.fixture(scope="module")
def picked(tmp_path_factory):
    """(fast, plain): two screens of the same nodes whose every side recorded or replayed
    the same autotune picks."""
    tmp = tmp_path_factory.mktemp("picked")
    return (screen(tmp, "fast", "--judge-share", "2", ZL_STUB_PICKS="abs=same"),
            screen(tmp, "plain", "--judge-share", "1", ZL_STUB_PICKS="abs=same"))


def copies(picked, tmp_path):
    out = []
    for src in picked:
        shutil.copytree(src, tmp_path / src.name)
        out.append(tmp_path / src.name)
    return out


def case(batch_dir, side, op="abs"):
    return batch_dir / "judge" / side / "main" / op


def picks_file(run):
    return next(p for p in (run / "autotune_records").glob("*.json") if p.name != "meta.json")


def set_pick(run, block):
    """The run's pick of stub.abs_kernel key 128,128: side A's record or side B's replay."""
    path = picks_file(run)
    doc = json.loads(path.read_text())
    doc["stub.abs_kernel"]["128,128"]["kwargs"]["BLOCK"] = block
    path.write_text(json.dumps(doc))


def edit_ir(run, **levels):
    path = run / "ttgir" / "ir_fingerprints.json"
    doc = json.loads(path.read_text())
    doc.update(levels.pop("doc", {}))
    for level, h in levels.items():
        doc["levels"][level]["hash"] = h
    path.write_text(json.dumps(doc))


def result(out):
    return json.loads((out / "judge_equivalence.json").read_text())


def test_picks_read_are_what_each_run_ran_with(tmp_path):
    """side A: its record; side B: its <op>.used.json (a key it tuned live after a fallback
    included: not side A's record); neither file: {}."""
    a, b = tmp_path / "a" / "autotune_records", tmp_path / "b" / "autotune_records"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    cfg = {"kwargs": {"BLOCK": 64}, "num_warps": 4}
    store.write_records(str(a), "op", {"k": {"64": cfg}}, "cuda")
    (b / "op.used.json").write_text(json.dumps({"k": {"64": cfg, "128": {**cfg, "num_warps": 8}}}))
    assert store.ran_with(str(a.parent)) == {"k": {"64": cfg}}
    assert store.ran_with(str(b.parent)) == {"k": {"64": cfg, "128": {**cfg, "num_warps": 8}}}
    assert store.ran_with(str(tmp_path / "none")) == {}
    assert store.other_picks(store.ran_with(str(a.parent)), store.ran_with(str(b.parent))) == []
    assert store.other_picks({"k": {"64": cfg}}, {"k": {"64": {**cfg, "num_warps": 8}}}) == [("k", "64")]
    (b / "op.used.json").write_text("{")
    with pytest.raises(store.RecordUnusable):
        store.ran_with(str(b.parent))


def test_equal_picks_and_a_changed_level_is_a_difference(picked, tmp_path):
    fast, plain = copies(picked, tmp_path)
    r = tool(fast, plain, "--out", tmp_path / "eq")
    assert r.returncode == 0, r.stdout + r.stderr
    c = result(tmp_path / "eq")["counts"]
    assert (c["fingerprint_sides"], c["levels"], c["levels_equal"], c["picks_differ_sides"]) == (8, 12, 12, 0)
    assert "## autotune picks differ" not in r.stdout and "| 4 | 8 of 8 | 4 of 4 | 8 | 12 of 12 | 0 |" in r.stdout
    edit_ir(case(plain, "before"), binary="1" * 64)
    r = tool(fast, plain)
    assert r.returncode == 1 and "| main:abs | binary before | " in r.stdout
    assert "## autotune picks differ" not in r.stdout


def test_other_picks_explain_a_changed_level_on_their_side_only(picked, tmp_path):
    fast, plain = copies(picked, tmp_path)
    # the plain batch's autotuning picked BLOCK=512 for abs's key 128,128 (side A recorded it,
    # side B replayed it) and each side's code followed the pick
    set_pick(case(plain, "before"), 512)
    set_pick(case(plain, "after"), 512)
    edit_ir(case(plain, "before"), binary="1" * 64)
    edit_ir(case(plain, "after"), binary="2" * 64)
    r = tool(fast, plain, "--out", tmp_path / "eq")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Every compared status, verdict and fingerprint level agrees." in r.stdout
    assert "## autotune picks differ (the code follows the pick; not compared" in r.stdout
    for side in ("before", "after"):
        assert (f"| main:abs | {side} | stub.abs_kernel | 128,128 | BLOCK=128 num_stages=2 num_warps=4 "
                "| BLOCK=512 num_stages=2 num_warps=4 | 1 of 2 | binary | no per-variant digests | - |") in r.stdout
    res = result(tmp_path / "eq")
    c = res["counts"]
    assert (c["fingerprint_sides"], c["levels"], c["levels_equal"]) == (6, 8, 8)
    assert (c["picks_differ_sides"], c["picks_differ_levels"], c["picks_differ_levels_equal"],
            c["picks_differ_uncompared"]) == (2, 4, 2, 2)
    assert "| 2 (levels differing 2 of 4, not compared; variants compiled in both equal 0 of 0; " \
           "2 without per-variant digests) |" in r.stdout
    assert [(p["node"], p["side"], p["levels_differ"]) for p in res["picks_differ"]] == [
        ("main:abs", "before", ["binary"]), ("main:abs", "after", ["binary"])]
    # side B replayed fast's pick after all: its changed binary is no longer explained
    set_pick(case(plain, "after"), 128)
    r = tool(fast, plain)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "| main:abs | binary after | " in r.stdout and "| main:abs | binary before |" not in r.stdout
    assert "| main:abs | before | stub.abs_kernel | 128,128 |" in r.stdout
    assert "| main:abs | after | stub.abs_kernel |" not in r.stdout


VARIANT = {"shape": "64x64", "kernel": "abs_kernel", "num_warps": "4", "num_stages": "2",
           "dtypes": {"x": "*fp16"}, "specialization": {}}


def variant(block, h, **ident):
    return {"identity": {**VARIANT, "constexprs": {"BLOCK": block}, **ident},
            "levels": {"ttgir": h, "binary": h}, "path": f"64x64/abs_kernel/{block}"}


def test_other_picks_still_compare_the_variants_both_runs_compiled(picked, tmp_path):
    fast, plain = copies(picked, tmp_path)
    set_pick(case(plain, "before"), 512)
    edit_ir(case(fast, "before"), doc={"schema_version": 5, "per_variant": [variant(64, "a"), variant(128, "b")]})
    edit_ir(case(plain, "before"), binary="1" * 64,
            doc={"schema_version": 5, "per_variant": [variant(64, "a"), variant(512, "c")]})
    r = tool(fast, plain, "--out", tmp_path / "eq")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| 128,128 | BLOCK=128 num_stages=2 num_warps=4 | BLOCK=512 num_stages=2 num_warps=4 | 1 of 2 " \
           "| binary | 1 of 1 | 2 |" in r.stdout
    c = result(tmp_path / "eq")["counts"]
    assert (c["picks_differ_sides"], c["picks_differ_variants"], c["picks_differ_variants_equal"],
            c["picks_differ_uncompared"]) == (1, 1, 1, 0)
    # a variant both runs compiled with one config differs: a cache or a neighbour changed it
    edit_ir(case(plain, "before"), doc={"per_variant": [variant(64, "d"), variant(512, "c")]})
    r = tool(fast, plain)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "| main:abs | ttgir before, 64x64/abs_kernel (compiled in both runs) | a | d |" in r.stdout
    assert "| main:abs | binary before, 64x64/abs_kernel (compiled in both runs) | a | d |" in r.stdout
    assert "| binary | 0 of 1 | 2 |" in r.stdout
    # a variant one run compiled of a kernel whose picks are equal: no pick explains it
    edit_ir(case(plain, "before"), doc={"per_variant": [variant(64, "a"), variant(512, "c"),
                                                       variant(64, "e", kernel="neg_kernel")]})
    r = tool(fast, plain)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "| main:abs | variant before in one run only, no other pick of its kernel | - | 64x64/neg_kernel |" \
        in r.stdout
    assert r.stdout.count("| main:abs | variant before") == 1     # abs_kernel's are the picks'


def test_unreadable_or_one_sided_picks_excuse_nothing(picked, tmp_path):
    fast, plain = copies(picked, tmp_path)
    edit_ir(case(plain, "before"), binary="1" * 64)
    edit_ir(case(plain, "after"), binary="2" * 64)
    set_pick(case(plain, "after"), 512)
    picks_file(case(plain, "before")).write_text("{")       # truncated: picks unknown
    r = tool(fast, plain)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "| main:abs | binary before | " in r.stdout and "| main:abs | binary after | " not in r.stdout
    assert "- main:abs before: plain: unreadable autotune record, picks unknown: " in r.stdout
    # side B's replay record on one side only: keys one run tuned, not a pick that differs
    picks_file(case(plain, "after")).unlink()
    r = tool(fast, plain)
    assert r.returncode == 1 and "| main:abs | binary after | " in r.stdout
    assert "- main:abs after: autotune keys tuned in one run only" in r.stdout
    # on neither side: no autotuned kernel on either, so the levels are compared as ever
    picks_file(case(fast, "after")).unlink()
    r = tool(fast, plain)
    assert r.returncode == 1 and "| main:abs | binary after | " in r.stdout
    assert "main:abs after:" not in r.stdout
    assert "## autotune picks differ" not in r.stdout
