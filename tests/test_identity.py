"""_run_identity.py: merge semantics, atomicity, CLI typing, no-OUT_DIR no-op."""

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zl import identity as ri

REPO = Path(__file__).resolve().parent.parent


def test_merge_keeps_earlier_fields_and_skips_none(tmp_path):
    ri.update_identity(str(tmp_path), backend="cuda", timer="direct")
    ri.update_identity(str(tmp_path), timer="cuda_graph", device=None)
    data = json.loads((tmp_path / ri.IDENTITY_NAME).read_text())
    assert data == {"backend": "cuda", "timer": "cuda_graph", "run_id": data["run_id"]}


def _without_run_id(data):
    return {k: v for k, v in data.items() if k != "run_id"}


def test_the_write_that_creates_the_file_gives_the_run_its_id(tmp_path):
    """One id per run directory: kept by every later merge, new when the run starts over
    (zl.rundir moves an earlier run aside, so its identity file is gone)."""
    ri.update_identity(str(tmp_path), op="a")
    first = ri.load_identity(str(tmp_path))["run_id"]
    assert len(first) == 32 and int(first, 16) >= 0
    ri.update_identity(str(tmp_path), timer="direct")
    assert ri.load_identity(str(tmp_path))["run_id"] == first
    (tmp_path / ri.IDENTITY_NAME).unlink()
    ri.update_identity(str(tmp_path), op="a")
    assert ri.load_identity(str(tmp_path))["run_id"] not in ("", first)


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


@pytest.mark.parametrize("where", ["a regular file", "under a file"])
def test_cli_set_on_an_out_dir_that_is_no_directory_exits_2_naming_it(tmp_path, where):
    """OUT_DIR a regular file ended in FileExistsError (path.parent.mkdir)."""
    afile = tmp_path / "afile"
    afile.write_text("keep")
    out_dir = afile if where == "a regular file" else afile / "sub"
    r = subprocess.run([sys.executable, "-m", "zl.identity", str(out_dir), "--set", "a=1"],
                       capture_output=True, text=True, cwd=str(REPO))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"zl.identity: cannot write {out_dir / ri.IDENTITY_NAME}: {afile} is not a directory" \
        in r.stderr
    assert afile.read_text() == "keep"
    # the library keeps raising the OS's error; only the CLI turns it into exit 2
    with pytest.raises(OSError):
        ri.update_identity(str(out_dir), a=1)


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", "\udcff"])
def test_corrupt_file_is_kept_aside_and_reported(tmp_path, capsys, content):
    path = tmp_path / ri.IDENTITY_NAME
    if content == "\udcff":
        path.write_bytes(b"\xff\xfe{")
    else:
        path.write_text(content)
    original = path.read_bytes()
    ri.update_identity(str(tmp_path), op="x")
    assert _without_run_id(ri.load_identity(str(tmp_path))) == {"op": "x"}
    aside = list(tmp_path.glob(ri.IDENTITY_NAME + ".corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == original
    err = capsys.readouterr().err
    assert "!!! [identity]" in err and aside[0].name in err
    # a second corruption in the same second gets its own name, nothing is overwritten
    path.write_text("{again")
    ri.update_identity(str(tmp_path), op="y")
    assert len(list(tmp_path.glob(ri.IDENTITY_NAME + ".corrupt-*"))) == 2


def test_valid_file_is_not_set_aside(tmp_path, capsys):
    ri.update_identity(str(tmp_path), op="x")
    ri.update_identity(str(tmp_path), timer="direct")
    assert not list(tmp_path.glob("*.corrupt-*")) and capsys.readouterr().err == ""


def _killed_writer(out_dir):
    """Dies by SIGKILL between the temp file and the rename, like a killed plugin."""
    import signal

    def die(*_a, **_k):
        os.kill(os.getpid(), signal.SIGKILL)
    os.replace = die
    ri.update_identity(out_dir, op="never")


def test_sigkilled_writer_temp_is_removed_by_next_write(tmp_path):
    ri.update_identity(str(tmp_path), backend="cuda")
    proc = multiprocessing.get_context("fork").Process(target=_killed_writer, args=(str(tmp_path),))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -9
    temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(temps) == 1, list(tmp_path.iterdir())
    # an unrelated file's temp is not ours to remove
    other = tmp_path / ".shapes.yaml.abc.tmp"
    other.write_text("x")
    time.sleep(0.05)
    ri.update_identity(str(tmp_path), timer="direct")
    assert not temps[0].exists() and other.exists()
    assert _without_run_id(ri.load_identity(str(tmp_path))) == {"backend": "cuda", "timer": "direct"}


# ------------------------------------------------------------- finished (device plugin)

def _pytest_run(tmp_path, body):
    """pytest with the device-setup plugin over one test file; the run's identity."""
    from zl.flaggems import VENDOR_ENV_KEYS

    out = tmp_path / "run"
    (tmp_path / "test_x.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if k not in VENDOR_ENV_KEYS}
    env.update(PYTHONPATH=str(REPO), ZL_BACKEND="cuda", OUT_DIR=str(out), NO_COLOR="1",
               TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "_device_setup_plugin", "test_x.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return proc, ri.load_identity(str(out))


def test_a_finished_session_records_how_it_ended(tmp_path):
    body = ("import json, os, pathlib\n"
            "def test_seen_while_running():\n"
            "    ident = json.loads((pathlib.Path(os.environ['OUT_DIR']) / 'run_identity.json').read_text())\n"
            "    assert ident['finished'] == {'status': 'running'}\n"
            "def test_fails():\n"
            "    assert False\n")
    proc, ident = _pytest_run(tmp_path, body)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout   # the identity said `running` during the session
    assert ident["finished"] == {"status": "complete", "exitstatus": 1}
    # the interpreter ran the kernels: never the same hardware as a device run
    assert ident["device_arch"] == "triton-interpreter" and ident["device_name"]


def test_a_killed_session_stays_running(tmp_path):
    proc, ident = _pytest_run(tmp_path, "import os, signal\n"
                                        "def test_dies():\n"
                                        "    os.kill(os.getpid(), signal.SIGKILL)\n")
    assert proc.returncode == -9
    assert ident["finished"] == {"status": "running"}


@pytest.mark.parametrize("code,status", [(0, "complete"), (1, "complete"), (5, "complete"),
                                         (2, "interrupted"), (3, "error"), (4, "error")])
def test_finished_status_of_each_pytest_exit_status(code, status):
    from zl.device import finished_status

    assert finished_status(code) == {"status": status, "exitstatus": code}
