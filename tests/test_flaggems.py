"""providers/flaggems.py: node parsing, root fallback, shape-mode resolution, vendor env."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zl import flaggems as fg

REPO = Path(__file__).resolve().parent.parent


def test_parse_node_extracts_op_file_and_root():
    got = fg.parse_test_node("/w/FG/benchmark/test_sort.py::test_perf_sort")
    assert got["op"] == "perf_sort"
    assert got["op_file"] == "sort"
    assert got["flaggems_dir"] == "/w/FG"


def test_parse_node_parametrized_id_keeps_function_as_op():
    got = fg.parse_test_node("/w/FG/benchmark/test_x.py::test_y[float16]")
    assert got["op"] == "y" and got["test_file"].endswith("[float16]")


@pytest.mark.parametrize("bad", ["no_colons.py", "/a/benchmark/test_x.py::y", "/a/x.py::test_y"])
def test_parse_node_rejects_malformed(bad):
    with pytest.raises(fg.NodeError):
        fg.parse_test_node(bad)


def _tree(root: Path, op_file: str) -> Path:
    (root / "benchmark").mkdir(parents=True)
    (root / "benchmark" / f"test_{op_file}.py").write_text("")
    return root


def test_fallback_root_used_when_configured_lacks_file(tmp_path, monkeypatch):
    good = _tree(tmp_path / "good", "softmax")
    monkeypatch.setenv("ZL_FLAGGEMS_FALLBACK_ROOTS", f"{tmp_path / 'nothing'}:{good}")
    env = fg.emit_run_env(op="softmax", op_file="softmax", flaggems_dir=str(tmp_path / "empty"))
    assert env["FLAGGEMS_DIR"] == str(good)
    assert env["TEST_FILE"] == f"{good}/benchmark/test_softmax.py::test_softmax"


def test_configured_root_wins_when_it_has_the_file(tmp_path, monkeypatch):
    mine = _tree(tmp_path / "mine", "softmax")
    other = _tree(tmp_path / "other", "softmax")
    monkeypatch.setenv("ZL_FLAGGEMS_FALLBACK_ROOTS", str(other))
    assert fg.emit_run_env(op="softmax", op_file="softmax", flaggems_dir=str(mine))["FLAGGEMS_DIR"] == str(mine)


@pytest.mark.parametrize("shape_file,shape_mode,from_node,want", [
    ("", "", False, ("", "inline")),
    ("", "", True, ("", "upstream")),
    ("-", "", False, ("", "upstream")),
    ("upstream", "", False, ("", "upstream")),
    ("none", "", False, ("", "upstream")),
    ("a.yaml", "", True, ("a.yaml", "file")),
    ("", "inline", True, ("", "inline")),
])
def test_shape_mode_resolution(shape_file, shape_mode, from_node, want):
    got = fg.resolve_shape_mode(shape_file, shape_mode, from_node)
    assert (got["SHAPE_FILE"], got["SHAPE_MODE"]) == want


@pytest.mark.parametrize("shape_file,shape_mode", [("", "bogus"), ("a.yaml", "upstream"), ("", "file")])
def test_contradictory_shape_settings_are_errors(shape_file, shape_mode):
    with pytest.raises(ValueError):
        fg.resolve_shape_mode(shape_file, shape_mode, False)


def test_vendor_env_respects_user_choice(monkeypatch):
    class B:
        flaggems_vendor = "nvidia"
    for key in fg.VENDOR_ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FLAGGEMS_BACKEND", "mthreads")
    assert fg.apply_vendor_env(B()) == "mthreads"
    assert "GEMS_VENDOR" not in __import__("os").environ
    monkeypatch.delenv("FLAGGEMS_BACKEND")
    assert fg.apply_vendor_env(B()) == "nvidia"
    assert __import__("os").environ["GEMS_VENDOR"] == "nvidia"


def test_cli_bad_node_exits_2_with_message():
    proc = subprocess.run([sys.executable, "-m", "zl.flaggems", "--emit-shell",
                           "--parse-node", "not-a-node"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "TEST_NODE must look like" in proc.stderr


def test_checkout_commit_only_for_the_top_of_a_git_checkout(tmp_path):
    """An exported tree inside another repository must not report that repository's HEAD."""
    def git(*args, cwd):
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    outer = tmp_path / "outer"
    (outer / ".fg" / "src").mkdir(parents=True)
    (outer / "f").write_text("x")
    git("init", "-q", cwd=outer)
    git("add", "f", cwd=outer)
    git("commit", "-qm", "c", cwd=outer)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=outer, capture_output=True,
                          text=True).stdout.strip()
    assert fg.checkout_commit(str(outer)) == head
    assert head.startswith(fg.checkout_commit(str(outer), short=True))
    assert fg.checkout_commit(str(outer / ".fg")) == ""
    assert fg.checkout_commit(str(tmp_path / "missing")) == ""
    proc = subprocess.run([sys.executable, "-m", "zl.flaggems",
                           "--commit-of", str(outer / ".fg")], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "\n"


def test_use_gems_depth_counts_calls_on_the_outermost_and_installs_once(monkeypatch):
    import contextlib
    import types

    from zl.flaggems import UseGemsDepth, timed_side
    from zl.patching import PatchStack
    events = []

    @contextlib.contextmanager
    def use_gems(*args, **kwargs):
        events.append("on")
        yield
        events.append("off")

    gems = types.ModuleType("flag_gems")
    gems.use_gems = use_gems
    monkeypatch.setitem(sys.modules, "flag_gems", gems)
    counter = UseGemsDepth(enter=lambda use, a, k: events.append(("enter", use, a, k)),
                           leave=lambda: events.append("leave"))
    other = UseGemsDepth()
    patches = PatchStack()
    assert counter.install(patches) and other.install(patches)
    assert counter.install(patches)            # already in the chain under `other`: not wrapped twice
    with gems.use_gems(exclude=["zero_"]):
        with gems.use_gems():
            assert (counter.depth, other.depth) == (2, 2)
            assert timed_side(object(), None, counter.depth > 0) == "gems"
    assert counter.depth == 0 and other.depth == 0
    # the outermost call only: enter before FlagGems is on, leave once it is off again
    assert events == [("enter", use_gems, (), {"exclude": ["zero_"]}), "on", "on", "off", "off", "leave"]
    patches.undo_all()
    assert gems.use_gems is use_gems
    monkeypatch.delitem(sys.modules, "flag_gems")
    assert UseGemsDepth().install(PatchStack()) is False
