"""benchmarks/provenance_checks.sh and benchmarks/ab_report_truth.sh on the bundled fake tree
(Triton's interpreter): each expectation line the GPU run reads is produced, and held."""
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "fake_flaggems"


def _env(tmp_path, **extra):
    return {**os.environ, "FLAGGEMS_DIR": str(FAKE), "TRITON_INTERPRET": "1",
            "PYTHONPATH": f"{REPO}:{FAKE / 'src'}", "OUT": str(tmp_path / "out"),
            "ZL_RUNS_ROOT": str(tmp_path / "runs"), "HOME": str(tmp_path / "home"), **extra}


def test_provenance_checks_hold_on_the_fake_tree(tmp_path):
    (tmp_path / "home").mkdir()
    r = subprocess.run(["bash", str(REPO / "benchmarks" / "provenance_checks.sh")],
                       env=_env(tmp_path, OP="mm"), capture_output=True, text=True, timeout=600)
    checks = (tmp_path / "out" / "checks.txt").read_text().splitlines()
    assert r.returncode == 0, r.stdout + r.stderr
    names = [line.split(":", 1)[0] for line in checks]
    assert names == ["PASS record", "PASS foreign-config marker", "PASS --ab A E refused",
                     "PASS --ab A' E refused", "PASS device memory bound", "PASS no tuner cache written",
                     "PASS batch", "PASS resume with other dtypes refused", "PASS resume as started"]
    assert "autotune record link" in checks[2] and "2 reused, 0 to run" in checks[-1]
    assert (tmp_path / "out" / "provenance_checks.tgz").stat().st_size > 0


def test_provenance_checks_fail_when_an_expectation_does_not_hold(tmp_path):
    # amax rejects float16 in the fake tree: side A fails, so nothing downstream can hold.
    (tmp_path / "home").mkdir()
    r = subprocess.run(["bash", str(REPO / "benchmarks" / "provenance_checks.sh")],
                       env=_env(tmp_path, OP="amax"), capture_output=True, text=True, timeout=600)
    checks = (tmp_path / "out" / "checks.txt").read_text()
    assert r.returncode == 1 and "FAIL record: side A rc=1" in checks


def test_both_tools_answer_help_and_name_missing_inputs():
    for tool in ("provenance_checks.sh", "ab_report_truth.sh"):
        path = REPO / "benchmarks" / tool
        h = subprocess.run(["bash", str(path), "--help"], capture_output=True, text=True)
        assert h.returncode == 0 and "FLAGGEMS_DIR" in h.stdout and "Exit:" in h.stdout
        env = {k: v for k, v in os.environ.items() if k not in ("FLAGGEMS_DIR", "OUT")}
        r = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True)
        assert r.returncode == 2 and "set FLAGGEMS_DIR" in r.stderr


def test_ab_report_truth_collects_each_pairs_report_on_the_fake_tree(tmp_path):
    r = subprocess.run(["bash", str(REPO / "benchmarks" / "ab_report_truth.sh")],
                       env=_env(tmp_path, SWITCH_OPS="softmax", AA_OPS="relu", SHAPE_FILE="upstream"),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "## switch: SWITCH=DISABLE_LLVM_OPT OPS=softmax" in summary
    assert "## aa: SWITCH=ZL_NOTHING_READS_THIS OPS=relu" in summary
    assert "report softmax rc=0" in summary and "report relu rc=0" in summary
    assert "console: [ab] relu: results B vs A: match" in summary
    assert "link: A record=" in summary and "equal=True B mode=replay" in summary
