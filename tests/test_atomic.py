"""atomicfile: whole-file replacement, temp cleanup on failure, JSON defaults."""

import json
import os
import stat

import pytest

from zl import atomic


def test_write_text_replaces_whole_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "a.txt"
    atomic.write_text(target, "one\n")
    atomic.write_text(target, "two\n")
    assert target.read_text() == "two\n"
    assert [p.name for p in target.parent.iterdir()] == ["a.txt"]


def test_failed_write_keeps_old_content_and_removes_temp(tmp_path):
    target = tmp_path / "a.json"
    atomic.write_json(target, {"b": 1, "a": "é"})
    assert target.read_text(encoding="utf-8") == '{\n  "a": "é",\n  "b": 1\n}\n'
    with pytest.raises(TypeError):
        atomic.write_json(target, {"x": object()})
    assert json.loads(target.read_text(encoding="utf-8")) == {"a": "é", "b": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_new_file_mode_follows_umask_like_open(tmp_path, umask):
    old = os.umask(umask)
    try:
        atomic.write_text(tmp_path / "a.txt", "x")
        with open(tmp_path / "b.txt", "w") as fh:
            fh.write("x")
        assert atomic.current_umask() == umask
    finally:
        os.umask(old)
    mode_a = stat.S_IMODE((tmp_path / "a.txt").stat().st_mode)
    assert mode_a == stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o666 & ~umask


def test_replacing_keeps_the_existing_mode(tmp_path):
    target = tmp_path / "a.txt"
    atomic.write_text(target, "one")
    os.chmod(target, 0o640)
    atomic.write_text(target, "two")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640 and target.read_text() == "two"


def test_stale_temps_finds_only_this_targets_temps(tmp_path):
    target = tmp_path / "run_identity.json"
    mine = tmp_path / ".run_identity.json.k3j2.tmp"
    other = tmp_path / ".run_identity.json.lock"
    foreign = tmp_path / ".shapes.yaml.x.tmp"
    for p in (mine, other, foreign):
        p.write_text("")
    assert atomic.stale_temps(target) == [mine]
    assert atomic.stale_temps(target, older_than=mine.stat().st_mtime - 10) == []


def test_write_problem_names_a_directory_or_a_file_in_place_of_a_parent(tmp_path):
    """write_bytes raises the OS's error (IsADirectoryError; FileExistsError or
    NotADirectoryError for a file where a parent should be); write_problem is the one line a
    CLI prints for it."""
    (tmp_path / "afile").write_text("x")
    cases = [(tmp_path, IsADirectoryError, "it is a directory"),
             (tmp_path / "afile" / "x.log", FileExistsError, f"{tmp_path / 'afile'} is not a directory"),
             (tmp_path / "afile" / "sub" / "x.log", NotADirectoryError,
              f"{tmp_path / 'afile'} is not a directory")]
    for target, error, why in cases:
        with pytest.raises(error) as caught:
            atomic.write_text(target, "y")
        assert atomic.write_problem(target, caught.value) == why
    assert atomic.write_problem(tmp_path / "new.txt", PermissionError(13, "Permission denied")) \
        == "Permission denied"
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]
