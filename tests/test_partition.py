"""partition.py's input checks: screen times that are no time, and device ids that are no id."""

import subprocess
import sys

import pytest

from harness.runner import REPO_ROOT
from zl.batch import partition as pt


def write_screen(path, rows):
    """rows: (op, elapsed_before, elapsed_after) as written in the table."""
    path.write_text("op\tverdict\telapsed_before\telapsed_after\n"
                    + "".join(f"{op}\tIR_CHANGED\t{b}\t{a}\n" for op, b, a in rows))
    return path


def partition(screen, *args):
    return subprocess.run([sys.executable, str(REPO_ROOT / "partition.py"), "--screen", str(screen),
                           *args], capture_output=True, text=True, cwd=str(REPO_ROOT), timeout=60)


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "-500", "1e308"])
def test_a_time_that_is_no_time_gets_the_median_fill(tmp_path, bad):
    """nan used to plan a `critical path nan min`, -500 a negative one (-41.1 min); 1e308 + 1e308
    is inf. Such a row is weighted like an unparseable one: the median, with the warning."""
    screen = write_screen(tmp_path / "s.tsv", [("a", bad, "1e308"), ("b", 5, 5), ("c", 10, 10)])
    rows, warnings = pt.read_screen(screen)
    assert [r.weight for r in rows] == [15.0, 10.0, 20.0]
    assert len(warnings) == 1 and "1 row(s) without a usable elapsed_before/elapsed_after (a)" \
        in warnings[0] and "weighted 15 s (the median)" in warnings[0]
    r = partition(screen, "--devices", "0,1")
    assert r.returncode == 0, r.stderr
    assert "critical path 2.5 min" in r.stdout and "nan" not in r.stdout and "-" not in \
        r.stdout.split("critical path")[1], r.stdout
    assert "weighted 15 s (the median)" in r.stderr
    shell = partition(screen, "--devices", "0,1", "--format", "shell")
    assert shell.returncode == 0 and all(line.split("\t")[3].isdigit()
                                         for line in shell.stdout.splitlines()), shell.stdout


def test_every_time_unusable_weighs_one_second(tmp_path):
    screen = write_screen(tmp_path / "s.tsv", [("a", "nan", 1), ("b", -1, 2)])
    rows, warnings = pt.read_screen(screen)
    assert [r.weight for r in rows] == [1.0, 1.0] and "2 row(s)" in warnings[0]


@pytest.mark.parametrize("devices", ["0 1", "a;b", "$x", "0,1 2", "0,`id`"])
def test_a_device_id_that_is_not_a_plain_token_exits_2(tmp_path, devices):
    """"0 1" used to be one device named "0 1"; "a;b" and "$x" were planned as given."""
    screen = write_screen(tmp_path / "s.tsv", [("a", 5, 5)])
    r = partition(screen, "--devices", devices)
    assert r.returncode == 2 and "--devices: not a device id" in r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.parametrize("devices", ["0, 1", "GPU-ab12:3.0_x", "npu7"])
def test_plain_device_ids_still_plan(tmp_path, devices):
    screen = write_screen(tmp_path / "s.tsv", [("a", 5, 5)])
    r = partition(screen, "--devices", devices, "--format", "shell")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("rounds", ["0", "1000000000", "1" + "0" * 400])
def test_rounds_out_of_range_exit_2(tmp_path, rounds):
    """A 400-digit --rounds used to end in an OverflowError traceback."""
    screen = write_screen(tmp_path / "s.tsv", [("a", 5, 5)])
    r = partition(screen, "--devices", "0", "--rounds", rounds)
    assert r.returncode == 2 and "--rounds must be 1..999999999" in r.stderr, r.stderr
