"""benchmarks/provenance_checks.sh and benchmarks/ab_report_truth.sh on the bundled fake tree
(Triton's interpreter): each expectation line the GPU run reads is produced, and held."""
import os
import re
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


TOOLS = ("provenance_checks.sh", "ab_report_truth.sh")
# The other GPU checks that take FLAGGEMS_DIR through the same helper (their OUT has a default).
SAME_CHECK = ("ab_workflow_check.sh", "autotune_replay_check.sh", "capture_runlogs.sh",
              "ir_fingerprint_check.sh")


def test_both_tools_answer_help_and_name_missing_inputs():
    for tool in TOOLS:
        path = REPO / "benchmarks" / tool
        h = subprocess.run(["bash", str(path), "--help"], capture_output=True, text=True)
        assert h.returncode == 0 and "FLAGGEMS_DIR" in h.stdout and "Exit:" in h.stdout
        env = {k: v for k, v in os.environ.items() if k not in ("FLAGGEMS_DIR", "OUT")}
        r = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True)
        assert r.returncode == 2 and "set FLAGGEMS_DIR" in r.stderr
        r = subprocess.run(["bash", str(path)], env={**env, "FLAGGEMS_DIR": str(FAKE)},
                           capture_output=True, text=True)
        assert r.returncode == 2 and f"!!! {tool}: set OUT" in r.stderr


def test_a_folder_that_is_no_flaggems_checkout_is_refused_before_any_stage(tmp_path):
    """A FLAGGEMS_DIR without benchmark/ (a typo, or src/ given for the checkout): exit 2
    naming it, as the tools' --help says, and OUT is never created."""
    wrong = tmp_path / "FlagGems" / "src"
    wrong.mkdir(parents=True)
    for tool in TOOLS + SAME_CHECK:
        path = REPO / "benchmarks" / tool
        assert "2 FLAGGEMS_DIR unset or not a FlagGems checkout" in subprocess.run(
            ["bash", str(path), "--help"], capture_output=True, text=True).stdout.replace("\n", " ")
        out = tmp_path / f"out_{tool}"
        r = subprocess.run(["bash", str(path)], env={**os.environ, "FLAGGEMS_DIR": str(wrong), "OUT": str(out)},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (tool, r.stdout + r.stderr)
        assert f"!!! {tool}: FLAGGEMS_DIR={wrong} is not a FlagGems checkout" in r.stderr
        assert not out.exists()


def _logical_lines(text):
    """The script's command lines: continuations joined, comments and heredoc bodies dropped."""
    lines, buf, heredoc = [], "", None
    for raw in text.splitlines():
        if heredoc is not None:
            heredoc = None if raw.strip() == heredoc else heredoc
            continue
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            buf += line[:-1]
            continue
        line, buf = buf + line, ""
        lines.append(line)
        m = re.search(r"<<-?\s*'?(\w+)'?", line)
        heredoc = m.group(1) if m else None
    return lines


def test_every_timed_stage_runs_under_zl_supervise():
    """A killed tool must take its running stage along: every `timeout` stage line goes
    through `zl.supervise --parent "$$"` (a bare timeout leaves the run writing on)."""
    for tool in TOOLS:
        stages = [line for line in _logical_lines((REPO / "benchmarks" / tool).read_text())
                  if re.search(r"(?<![\w-])timeout\s", line)]
        assert stages, tool
        for line in stages:
            timed = re.findall(r"(?<![\w-])timeout\s", line)
            supervised = re.findall(r'-m zl\.supervise --parent "\$\$"[^;|&()]*?--\s+timeout\s', line)
            assert len(supervised) == len(timed), f"{tool}: a stage outside zl.supervise: {line.strip()}"


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
