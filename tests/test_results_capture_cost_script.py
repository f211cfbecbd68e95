"""benchmarks/results_capture_cost.py: the results capture's cost per capture.py version,
measured in fresh processes (here on the CPU, with a small tensor above a lowered HOST_CAP)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "results_capture_cost.py"
CAPTURE = ROOT / "zl" / "results" / "capture.py"


def _variant(tmp_path: Path, name: str, replace=None) -> Path:
    text = CAPTURE.read_text().replace("HOST_CAP = 1 << 22", "HOST_CAP = 1000")
    if replace:
        assert replace[0] in text
        text = text.replace(*replace)
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=str(ROOT))


def test_times_each_implementation_and_flags_one_whose_records_differ(tmp_path):
    same = _variant(tmp_path, "same")
    # a planted digest change: the second implementation must be reported as disagreeing
    wrong = _variant(tmp_path, "wrong", ('digest = f"wsum64:', 'digest = f"wsum64:0'))
    out = tmp_path / "out"
    proc = _run("--impl", f"a={same}", "--impl", f"b={_variant(tmp_path, 'b')}", "--impl",
                f"c={wrong}", "--repeat", "2", "--numel", "5000", "--device", "cpu", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "describe_cost.json").read_text())
    assert doc["agree"] == {"a": True, "b": True, "c": False}
    assert all(len(runs) == 2 and all(r["large"] and len(r["seconds"]) == 2 and min(r["seconds"]) > 0
                                      for r in runs) for runs in doc["samples"].values())
    md = (out / "describe_cost.md").read_text()
    assert "| c |" in md and "**no**" in md and md.count("| yes |") == 2


def test_bad_arguments_and_a_failing_process_have_their_exit_codes(tmp_path):
    out = str(tmp_path / "out")
    missing = _run("--impl", f"a={tmp_path / 'nope.py'}", "--out", out, "--device", "cpu")
    assert missing.returncode == 2 and "NAME=PATH" in missing.stderr
    twice = _run("--impl", f"a={CAPTURE}", "--impl", f"a={CAPTURE}", "--out", out, "--device", "cpu")
    assert twice.returncode == 2 and "differ" in twice.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("raise ImportError('planted')\n")
    failed = _run("--impl", f"a={broken}", "--out", out, "--device", "cpu", "--numel", "10")
    assert failed.returncode == 3 and "planted" in failed.stderr
    assert not (tmp_path / "out" / "describe_cost.json").exists()


def test_a_killed_driver_takes_its_measuring_process_along(tmp_path):
    slow = tmp_path / "slow_capture.py"
    slow.write_text("import time\ntime.sleep(600)\n")         # the child is still importing it
    driver = subprocess.Popen([sys.executable, str(SCRIPT), "--impl", f"a={slow}", "--out",
                               str(tmp_path / "out"), "--device", "cpu", "--numel", "10"], cwd=str(ROOT))

    def running(pid):   # a zombie waiting for a slow reaper has exited
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    child = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and child is None:
            found = subprocess.run(["pgrep", "-f", str(slow)], capture_output=True, text=True).stdout.split()
            child = next((int(p) for p in found if int(p) != driver.pid), None)
            time.sleep(0.2)
        assert child is not None, "the measuring process never started"
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(60)
        deadline = time.monotonic() + 60   # a loaded machine's margin; the child sleeps 600 s
        while time.monotonic() < deadline and running(child):
            time.sleep(0.1)
        assert not running(child)
    finally:
        driver.kill()
        if child is not None and running(child):
            os.kill(child, signal.SIGKILL)
