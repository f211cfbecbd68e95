"""run_batch.py's input files and records: every one that is missing, not UTF-8, of the wrong
kind or holds a value of the wrong type is refused with exit 2 naming the file (and the row
or field), never a traceback, a silent default or a silently wrong plan.

Runs against the stub case (tests/fixtures/batch/stub_case.sh)."""

import json

import pytest

from test_batch import batch
from zl.batch import partition as pt
from zl.batch import shard
from zl.batch.select import SelectionError, read_dismiss, read_names_file
from zl.batch.status import StatusFileError, read_rows

BINARY = b"\xff\xfe"


def refused(r, *needles):
    """Exit 2, each needle on stderr, no traceback."""
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in r.stderr, r.stderr


# ---------------------------------------------------------------- --balance

@pytest.mark.parametrize("value", ["nan", "inf", "-5", "-inf", "soon"])
def test_balance_refuses_a_time_that_is_not_a_finite_number(tmp_path, value):
    # a nan compared false with every load and sent all four cases to device 0, exit 0
    w = tmp_path / "w.csv"
    w.write_text(f"repo,run_name,elapsed_ms\nmain,softmax,{value}\nmain,abs,2000\nmain,relu,3000\n"
                 "main,exp,1000\n")
    r = batch(tmp_path, "--ops", "softmax", "abs", "relu", "exp", "--devices", "0,1", "--balance", w, "--list")
    refused(r, f"--balance {w}:2: elapsed_ms={value!r} is not a time")
    tsv = tmp_path / "screen.tsv"
    tsv.write_text(f"op\telapsed_before\telapsed_after\nsoftmax\t3\t3\nabs\t1\t{value}\n")
    with pytest.raises(pt.PartitionError, match=f"{tsv}:3: elapsed_after='{value}' is not a time"):
        shard.read_weights(tsv)


def test_balance_reads_a_blank_time_as_unmeasured(tmp_path):
    # a PENDING row of ops_status.csv has no elapsed_ms: that case is weighted by the median
    w = tmp_path / "w.csv"
    w.write_text("repo,run_name,elapsed_ms\nmain,softmax,\nmain,abs,2000\nmain,relu,3000\n")
    assert shard.read_weights(w) == {"main:abs": 2.0, "abs": 2.0, "main:relu": 3.0, "relu": 3.0}
    r = batch(tmp_path, "--ops", "softmax", "abs", "relu", "--devices", "0,1", "--balance", w, "--list")
    assert r.returncode == 0 and "1 case(s) without a measured time" in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------- names files

def test_a_missing_dismiss_file_is_refused_like_a_missing_ops_file(tmp_path):
    nope = tmp_path / "nope.txt"
    with pytest.raises(SelectionError, match="cannot read dismiss file"):
        read_dismiss(nope)
    refused(batch(tmp_path, "--all", "--dismiss", nope, "--list"), f"cannot read dismiss file {nope}")
    refused(batch(tmp_path, "--ops-file", nope, "--list"), f"cannot read ops file {nope}")


@pytest.mark.parametrize("option", ["--ops-file", "--dismiss", "--balance"])
def test_a_names_or_weights_file_that_is_not_utf8_is_refused(tmp_path, option):
    bad = tmp_path / "bin.txt"
    bad.write_bytes(BINARY)
    args = {"--ops-file": ["--ops-file", bad], "--dismiss": ["--all", "--dismiss", bad],
            "--balance": ["--ops", "softmax", "--devices", "0,1", "--balance", bad]}[option]
    refused(batch(tmp_path, *args, "--list"), f"{bad}: not UTF-8 text")


def test_read_functions_name_a_non_utf8_file(tmp_path):
    bad = tmp_path / "bin.txt"
    bad.write_bytes(BINARY)
    for read in (read_names_file, read_dismiss):
        with pytest.raises(SelectionError, match="not UTF-8 text"):
            read(bad)
    with pytest.raises(pt.PartitionError, match="not UTF-8 text"):
        shard.read_weights(bad)
    with pytest.raises(StatusFileError, match=f"{bad}: not UTF-8 text"):
        read_rows(bad)
    assert read_rows(tmp_path / "absent.csv") == {}     # no table yet: no rows


# ---------------------------------------------------------------- --batch-dir

@pytest.mark.parametrize("extra", [[], ["--list"], ["--switch", "ZL_X", "--judge-first"]])
def test_a_batch_dir_that_is_a_file_is_refused(tmp_path, extra):
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--batch-dir", afile, *extra)
    refused(r, f"--batch-dir {afile.resolve()} exists and is not a directory")
    assert afile.read_text() == "x\n"


def test_a_batch_dir_under_a_file_is_refused(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--batch-dir", afile / "sub",
              "--switch", "ZL_X", "--judge-first")
    refused(r, f"--batch-dir {afile.resolve() / 'sub'}: cannot create it")


# ---------------------------------------------------------------- --resume of a damaged batch

@pytest.fixture
def done(tmp_path):
    """A finished one-case batch."""
    bd = tmp_path / "b"
    r = batch(tmp_path, "--ops", "softmax", "--devices", "0", "--batch-dir", bd)
    assert r.returncode == 0, r.stdout + r.stderr
    return bd


def test_resume_of_a_batch_whose_ops_status_is_not_utf8_is_refused(tmp_path, done):
    (done / "ops_status.csv").write_bytes(BINARY)
    refused(batch(tmp_path, "--resume", "--batch-dir", done, "--devices", "0"),
            f"{done.resolve() / 'ops_status.csv'}: not UTF-8 text")
    assert (done / "ops_status.csv").read_bytes() == BINARY


def test_judge_first_baseline_whose_ops_status_is_not_utf8_is_refused(tmp_path, done):
    (done / "ops_status.csv").write_bytes(BINARY)
    r = batch(tmp_path, "--ops", "softmax", "--switch", "ZL_X", "--judge-first", "--devices", "0",
              "--baseline", done, "--batch-dir", tmp_path / "jf")
    refused(r, f"--baseline {done}: {done.resolve() / 'ops_status.csv'}: not UTF-8 text")


def test_resume_of_a_screen_whose_screen_tsv_is_not_utf8_is_refused(tmp_path):
    bd = tmp_path / "s"
    r = batch(tmp_path, "--ops", "softmax", "--switch", "ZL_X", "--devices", "0", "--batch-dir", bd,
              ZL_STUB_SWITCH="ZL_X")
    assert r.returncode == 0, r.stdout + r.stderr
    (bd / "screen.tsv").write_bytes(BINARY)
    refused(batch(tmp_path, "--resume", "--batch-dir", bd, "--devices", "0", ZL_STUB_SWITCH="ZL_X"),
            f"{bd.resolve() / 'screen.tsv'}: not UTF-8")


@pytest.mark.parametrize("record, field, kind", [
    ({"calls": "x"}, "calls", "a list of objects"),
    ({"calls": [{"share_device": "2"}]}, "calls[0].share_device", "an integer >= 1"),
    ({"calls": [{"ray": {"device": "H100"}}]}, "calls[0].ray.device", "an object"),
    ({"overlap": "2"}, "overlap", "an integer >= 1"),
    ({"overlap": 0}, "overlap", "an integer >= 1"),
    ({"share_device": True}, "share_device", "an integer >= 1"),
    ({"judge": "false"}, "judge", "true or false"),
    ({"case_keys": [1]}, "case_keys", "a list of strings"),
    ({"conditions": {"backend": 5}}, "conditions.backend", "a string"),
    ({"conditions": {"replay_root": 5}}, "conditions.replay_root", "a string"),
    ({"conditions": {"dtypes": None}}, "conditions.dtypes", "a string"),
    ({"conditions": {"rounds": "3"}}, "conditions.rounds", "an integer >= 1"),
    ({"conditions": {"use_flagtune": "yes"}}, "conditions.use_flagtune", "true or false"),
    ({"conditions": {"device": {"models": 5}}}, "conditions.device.models", "a list of strings"),
    ({"conditions": {"flaggems": {"main": "tree"}}}, "conditions.flaggems", "an object of objects"),
    ({"conditions": {"flaggems": {"main": {"changed_total": -1}}}}, "conditions.flaggems.main.changed_total",
     "an integer >= 0"),
])
def test_resume_refuses_a_batch_json_field_of_the_wrong_type(tmp_path, record, field, kind):
    # each crashed (AttributeError, TypeError) or was read as another value (bool("false"))
    bd = tmp_path / "r"
    bd.mkdir()
    path = bd / "batch.json"
    path.write_text(json.dumps({"conditions": {}, "case_keys": [], **record}))
    r = batch(tmp_path, "--resume", "--batch-dir", bd, "--list")
    refused(r, f"--resume: {path.resolve()}: {field} is ", f"not {kind}")


def test_a_batch_json_written_by_run_batch_passes_the_type_check(tmp_path, done):
    # null reads as left out where the resume path always read it so
    record = json.loads((done / "batch.json").read_text())
    record.update(warnings=None)
    (done / "batch.json").write_text(json.dumps(record))
    r = batch(tmp_path, "--resume", "--batch-dir", done, "--devices", "0", "--list")
    assert r.returncode == 0 and "main:softmax\tdevice=0" in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------- --judge-first --resume

@pytest.mark.parametrize("text, needle", [
    ("{bad", "is unreadable"),
    ("[1]", "is not a judge-first record (a JSON object)"),
    ('{"rounds": "x"}', "rounds is 'x', not an integer >= 1"),
    ('{"judge_share": 0}', "judge_share is 0, not an integer >= 1"),
    ('{"walls": [{"stage": "judge"}]}', "walls[0].wall_s is missing"),
    ('{"walls": [{"stage": "judge", "wall_s": "1"}]}', "walls[0].wall_s is '1', not a number >= 0"),
])
def test_judge_first_resume_refuses_a_damaged_judge_first_json(tmp_path, text, needle):
    jf = tmp_path / "jf"
    jf.mkdir()
    (jf / "judge_first.json").write_text(text)
    r = batch(tmp_path, "--ops", "softmax", "--switch", "ZL_X", "--judge-first", "--resume", "--devices", "0",
              "--batch-dir", jf)
    refused(r, f"--resume --judge-first: {jf.resolve() / 'judge_first.json'}", needle)
    assert (jf / "judge_first.json").read_text() == text
