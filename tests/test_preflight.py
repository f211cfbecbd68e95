"""zl.preflight's exit-3 details say what is wrong: `check=flaggems_dir detail='FlagGems
directory exists: /nonexistent'` read like a pass."""

import importlib.util
import os
from dataclasses import replace
from types import SimpleNamespace

import pytest

from zl.config import RunConfig
from zl.preflight import PreflightFailed, preflight


@pytest.fixture
def run(tmp_path):
    fg = tmp_path / "FlagGems"
    (fg / "benchmark").mkdir(parents=True)
    bench = fg / "benchmark" / "test_relu.py"
    bench.write_text("def test_relu():\n    pass\n")
    return SimpleNamespace(cfg=RunConfig(flaggems_dir=str(fg), test_file=f"{bench}::test_relu", op="relu"),
                           backend=None, env={}, notes=[])


def _failure(run):
    with pytest.raises(PreflightFailed) as info:
        preflight(run)
    return info.value.check, info.value.detail


def test_missing_flaggems_dir_is_not_found(run, tmp_path):
    run.cfg = replace(run.cfg, flaggems_dir=str(tmp_path / "nonexistent"))
    assert _failure(run) == ("flaggems_dir", f"FlagGems directory not found: {tmp_path / 'nonexistent'}")


def test_missing_benchmark_file_is_not_found(run, tmp_path):
    missing = tmp_path / "FlagGems" / "benchmark" / "test_nope.py"
    run.cfg = replace(run.cfg, test_file=f"{missing}::test_nope")
    assert _failure(run) == ("benchmark_file", f"benchmark file not found: {missing}")


def test_missing_shape_file_is_not_found(run, tmp_path):
    run.cfg = replace(run.cfg, shape_file=str(tmp_path / "shapes.yaml"))
    assert _failure(run) == ("shape_file", f"shape file not found: {tmp_path / 'shapes.yaml'}")


@pytest.mark.parametrize("kind", ["device", "fifo", "directory"])
def test_shape_file_that_is_not_a_regular_file_says_so(run, tmp_path, kind):
    """/dev/zero reads forever and a fifo nobody writes blocks its reader: both exist, and
    "not found" would send the user looking for a typo."""
    if kind == "device":
        path = "/dev/zero"
    elif kind == "fifo":
        path = str(tmp_path / "shapes.fifo")
        os.mkfifo(path)
    else:
        path = str(tmp_path)
    run.cfg = replace(run.cfg, shape_file=path)
    check, detail = _failure(run)
    assert check == "shape_file"
    assert detail == f"shape file is not a regular file (a directory, device or fifo): {path}"


@pytest.mark.parametrize("exists", [False, True])
def test_replay_from_that_is_no_directory(run, tmp_path, exists):
    target = tmp_path / "run_a"
    if exists:
        target.write_text("a file, not a run directory\n")
    run.cfg = replace(run.cfg, replay_from=str(target))
    word = "is not a directory" if exists else "not found"
    assert _failure(run) == ("replay_from", f"replay run directory {word}: {target}")


def test_interpreter_names_what_it_cannot_find(run, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "flag_gems" else real(name, *a))
    check, detail = _failure(run)
    assert check == "interpreter"
    assert detail.endswith("cannot find flag_gems") and "triton" not in detail
