"""_run_identity.py: merge semantics, atomicity, CLI typing, no-OUT_DIR no-op."""

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

from zl import identity as ri

REPO = Path(__file__).resolve().parent.parent


def test_merge_keeps_earlier_fields_and_skips_none(tmp_path):
    ri.update_identity(str(tmp_path), backend="cuda", timer="direct")
    ri.update_identity(str(tmp_path), timer="cuda_graph", device=None)
    data = json.loads((tmp_path / ri.IDENTITY_NAME).read_text())
    assert data == {"backend": "cuda", "timer": "cuda_graph"}


def test_no_out_dir_is_a_silent_noop(monkeypatch, tmp_path):
    monkeypatch.delenv("OUT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert ri.update_identity(timer="direct") == {"timer": "direct"}
    assert list(tmp_path.iterdir()) == []


def test_env_out_dir_is_used(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    ri.update_identity(op="softmax")
    assert ri.load_identity()["op"] == "softmax"


def _writer(args):
    out_dir, i = args
    ri.update_identity(out_dir, **{f"k{i}": i})


def test_concurrent_writers_lose_nothing(tmp_path):
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_writer, [(str(tmp_path), i) for i in range(40)])
    data = ri.load_identity(str(tmp_path))
    assert {f"k{i}" for i in range(40)} <= set(data)


def test_cli_types_integers_and_get(tmp_path):
    subprocess.run([sys.executable, "-m", "zl.identity", str(tmp_path),
                    "--set", "direct_repeat=5", "--set", "tuner_cache=shared(/x)"], check=True)
    data = ri.load_identity(str(tmp_path))
    assert data["direct_repeat"] == 5 and data["tuner_cache"] == "shared(/x)"
    got = subprocess.run([sys.executable, "-m", "zl.identity", str(tmp_path), "--get", "direct_repeat"],
                         capture_output=True, text=True)
    assert got.stdout.strip() == "5"
    missing = subprocess.run([sys.executable, "-m", "zl.identity", str(tmp_path), "--get", "nope"])
    assert missing.returncode == 1


def test_corrupt_file_is_replaced_not_crashing(tmp_path):
    (tmp_path / ri.IDENTITY_NAME).write_text("{not json")
    ri.update_identity(str(tmp_path), op="x")
    assert ri.load_identity(str(tmp_path)) == {"op": "x"}
