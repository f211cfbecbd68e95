"""atomicfile: whole-file replacement, temp cleanup on failure, JSON defaults."""

import json

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
