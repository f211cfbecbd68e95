"""Every command's --help in one style (zl/cli_help.py): it exits 0 at once, starts nothing,
has the sections Examples:, Options: (shell: Variables:), Outputs: and Exit codes:, and
its exit codes are the codes of the command's row in README's exit-code table."""

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.runner import REPO_ROOT, base_env

README = REPO_ROOT / "README.md"
SHELL = ("run_pytest.sh", "demo.sh", "ab_rlc_test.sh", "ab_repeat.sh", "ab_fold_test.sh", "campaign.sh")
SCRIPTS = ("run_batch.py", "batch_summary.py", "partition.py", "telemetry.py", "plugin_plan.py")
# The `python -m zl.<module>` commands README tells users to run.
MODULES = tuple(sorted(set(re.findall(r"python -m (zl(?:\.\w+)+)", README.read_text(encoding="utf-8")))))
COMMANDS = SHELL + SCRIPTS + tuple(f"python -m {m}" for m in MODULES)
CODE = r"\d+(?:\+N)?"          # 0, 2, 130, 128+N


def _argv(command: str) -> list:
    if command.endswith(".sh"):
        return ["bash", str(REPO_ROOT / command), "--help"]
    if command.endswith(".py"):
        return [sys.executable, str(REPO_ROOT / command), "--help"]
    return [sys.executable, "-m", command.split()[-1], "--help"]


def _headings(command: str) -> tuple:
    return ("Examples:", "Variables:" if command.endswith(".sh") else "Options:", "Outputs:", "Exit codes:")


def _section(text: str, heading: str) -> list:
    """The lines under `heading` (alone on its line) up to the next unindented line."""
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines))
    return lines[start:end]


def help_codes(text: str) -> set:
    """Exit codes listed one per line as `  <code>  <meaning>` under `Exit codes:`."""
    return {m.group(1) for line in _section(text, "Exit codes:") if (m := re.match(rf"  ({CODE})\s", line))}


def _clauses(cell: str) -> list:
    """`cell` split at the semicolons outside parentheses and backticks."""
    out, depth, code, current = [], 0, False, ""
    for ch in cell:
        if ch == "`":
            code = not code
        elif not code and ch == "(":
            depth += 1
        elif not code and ch == ")":
            depth -= 1
        if ch == ";" and depth == 0 and not code:
            out.append(current)
            current = ""
        else:
            current += ch
    return out + [current]


def readme_codes() -> dict:
    """{command: codes} from README's exit-code table: each code opens a `;` clause of its row."""
    text = README.read_text(encoding="utf-8")
    table = text.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in table.splitlines()[2:]:
        m = re.match(r"^\| (.+?) \| (.*) \|$", line)
        assert m, f"README exit-code table row not understood: {line}"
        codes = {c.group(1) for clause in _clauses(m.group(2)) if (c := re.match(rf"\s*({CODE})\b", clause))}
        for command in re.findall(r"`([^`]+)`", m.group(1)):
            rows[command] = codes
    return rows


@pytest.fixture(scope="module")
def readme_rows():
    return readme_codes()


def test_every_command_has_a_readme_row_and_every_row_a_command(readme_rows):
    assert MODULES, "README names no `python -m zl.<module>` command"
    assert sorted(readme_rows) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_fast_starts_nothing_and_has_every_section(tmp_path, readme_rows, command):
    work, runs, tmp = tmp_path / "work", tmp_path / "runs", tmp_path / "tmp"
    for d in (work, tmp, tmp_path / "home"):
        d.mkdir()
    env = base_env(tmp_path / "home", ZL_RUNS_ROOT=runs, TMPDIR=tmp, OUT_DIR=tmp_path / "out",
                   ZL_RUN_PYTEST="/bin/false")
    t0 = time.monotonic()
    r = subprocess.run(_argv(command), cwd=work, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert took < 30, f"{command} --help took {took:.1f} s"
    assert list(work.iterdir()) == [] and list(tmp.iterdir()) == []
    assert not runs.exists() and not (tmp_path / "out").exists()
    lines = r.stdout.splitlines()
    positions = [lines.index(h) if h in lines else -1 for h in _headings(command)]
    assert -1 not in positions, f"{command} --help lacks {_headings(command)[positions.index(-1)]}"
    assert positions == sorted(positions), f"{command} --help has its sections out of order"
    assert help_codes(r.stdout) == readme_rows[command], \
        f"{command}: --help lists exit codes {sorted(help_codes(r.stdout))}, README's table " \
        f"{sorted(readme_rows[command])}"


def test_the_parsers_read_what_they_claim():
    """The two readers this test relies on, on text whose codes are known."""
    assert help_codes("Exit codes:\n  0  ok\n  2  usage (see\n     3 lines below)\n  128+N  signal\n"
                      "Notes:\n  5  not a code of this section\n") == {"0", "2", "128+N"}
    assert [c.strip() for c in _clauses("0 ok (a; b); 2 `x;y` usage; 4 no")] == \
        ["0 ok (a; b)", "2 `x;y` usage", "4 no"]
