"""demo.sh: with neither a GPU nor FlagGems, a record run, its replay, --ab and the HTML
page, in Triton's interpreter against the bundled fake tree, well under 2 minutes."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from harness.runner import FAKE_FLAGGEMS_DIR, REPO_ROOT, base_env
from test_report_html import assert_page
from zl.report.views import shape_label

DEMO = REPO_ROOT / "demo.sh"


def run_demo(tmp_path: Path, *args: str, timeout: float = 150, **env) -> subprocess.CompletedProcess:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    # base_env points FLAGGEMS_DIR at the fake tree; the demo must find nothing there.
    e = base_env(home, **{"FLAGGEMS_DIR": None, "TRITON_INTERPRET": None,
                          "ZL_RUNS_ROOT": tmp_path / "runs", **env})
    if "PYTHONPATH" not in env:
        e["PYTHONPATH"] = ""   # the demo must set up its own import path
    return subprocess.run(["bash", str(DEMO), *args], cwd=str(tmp_path), env=e,
                          capture_output=True, text=True, timeout=timeout)


def test_demo_end_to_end_on_cpu(tmp_path):
    root = tmp_path / "demo"
    t0 = time.monotonic()
    proc = run_demo(tmp_path, DEMO_ROOT=root, timeout=400)
    elapsed = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    # README promises < 2 min on an idle machine; a loaded 2-core CI runner gets twice that
    assert elapsed < 240, f"demo took {elapsed:.0f}s"
    first = proc.stdout.splitlines()[:4]
    assert any("CPU DEMO" in line for line in first) and "MEAN" in proc.stdout.split("[1/3]")[0]
    for side in ("before", "after"):
        ident = json.loads((root / side / "run_identity.json").read_text())
        assert ident["demo"] == "cpu-interpreter" and ident["op"] == "softmax"
        assert ident["tuner_cache"] == "isolated"
    assert "shared tuner cache" not in out   # the demo does not warn about its own defaults
    assert json.loads((root / "after" / "run_identity.json").read_text())["autotune_mode"] == "replay"
    d = json.loads((root / "report.json").read_text())
    assert d["demo"] == "cpu-interpreter" and d["summary"]["paired"] >= 2 and d["caliber_problems"] == []
    p, text = assert_page(root / "report.html", root / "report.json", [shape_label(x) for x in d["paired"]])
    assert "CPU DEMO" in text and "numbers mean nothing" in text


def test_help_starts_nothing(tmp_path):
    proc = run_demo(tmp_path, "--help", timeout=30)
    assert proc.returncode == 0 and "CPU demo" in proc.stdout and "FLAGGEMS_DIR" in proc.stdout
    assert not (tmp_path / "runs").exists()


def test_bad_argument_exit_2(tmp_path):
    proc = run_demo(tmp_path, "softmax", timeout=30)
    assert proc.returncode == 2 and "no arguments besides --help" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_flaggems_dir_without_a_device_exit_3(tmp_path):
    probe = subprocess.run(["python3", "-c", "from zl.backends import get_backend; "
                            "print(get_backend('cuda').probe_device_count())"],
                           cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=120)
    if probe.stdout.strip() not in ("", "0"):
        pytest.skip("this machine has a device: demo.sh would do the real job")
    proc = run_demo(tmp_path, timeout=120, FLAGGEMS_DIR=tmp_path / "FlagGems")
    assert proc.returncode == 3 and "sees no device" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_real_mode_with_a_device_and_flaggems_dir(tmp_path):
    """FLAGGEMS_DIR set and a device visible: the real job, no demo marking. The device is
    a stub nvidia-smi and the checkout the fake tree, run in the interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Stub H200 (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    root = tmp_path / "real"
    proc = run_demo(tmp_path, FLAGGEMS_DIR=FAKE_FLAGGEMS_DIR, TRITON_INTERPRET=1, DEMO_ROOT=root,
                    SHAPE_FILE="upstream", AFTER_ENV="MY_SWITCH=1",
                    PYTHONPATH=f"{REPO_ROOT}{os.pathsep}{FAKE_FLAGGEMS_DIR / 'src'}",
                    PATH=f"{bin_dir}:{os.environ['PATH']}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "CPU DEMO" not in out and "real run of softmax" in out
    assert "demo" not in json.loads((root / "before" / "run_identity.json").read_text())
    # the real job isolates the tuner cache by default too: its report does not warn that
    # side A recorded on the shared cache (before: it did, about demo.sh's own default)
    for side in ("before", "after"):
        assert json.loads((root / side / "run_identity.json").read_text())["tuner_cache"] == "isolated"
    assert "shared tuner cache" not in out
    assert not (tmp_path / "home" / ".flaggems").exists()
    d = json.loads((root / "report.json").read_text())
    assert d["demo"] is None and d["summary"]["paired"] >= 2
    assert 'id="demo-banner"' not in (root / "report.html").read_text()


def test_after_env_must_be_assignments(tmp_path):
    proc = run_demo(tmp_path, timeout=30, AFTER_ENV="rm")
    assert proc.returncode == 2 and "NAME=VALUE" in proc.stderr


def test_killed_demo_leaves_nothing_running(tmp_path):
    """SIGKILL of demo.sh mid-run takes the running run_pytest.sh and its pytest along."""
    import os
    import signal
    import time
    from harness.runner import procs_with_env
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "demo_root"
    e = base_env(home, **{"FLAGGEMS_DIR": None, "TRITON_INTERPRET": None, "DEMO_ROOT": root})
    e["PYTHONPATH"] = ""
    proc = subprocess.Popen(["bash", str(DEMO)], cwd=str(tmp_path), env=e,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not procs_with_env(str(root / "before")):
        time.sleep(0.2)
    assert procs_with_env(str(root / "before")), "side A never started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # every process of the demo is gone (60 s: a loaded machine's margin) ...
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and procs_with_env(str(root)):
        time.sleep(0.3)
    assert procs_with_env(str(root)) == []
    # ... and side A was cut, not left to finish: its pytest never printed its closing summary
    log = root / "before" / "run.log"
    text = log.read_text() if log.is_file() else ""
    assert not re.search(r"^=+ .* in [\d.]+s\b.*=+$", text, re.M), text[-3000:]
