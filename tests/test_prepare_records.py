"""zl.prepare's records reach the shell as data: zl/sh/records.sh reads them into variables,
arrays and exports, never runs them, and returns the producer's exit status."""
import subprocess
from pathlib import Path

import pytest

from zl.config import ConfigError
from zl.prepare import records

REPO = Path(__file__).resolve().parent.parent
NASTY = "a b $(touch {marker}) `touch {marker}` 'q' \"d\" ;\nline2 \\ * ~"


def _read(data: bytes, rc: int = 0, show: str = 'printf "%s|" "$S" "${#A[@]}" "${A[@]}" "$E"') -> subprocess.CompletedProcess:
    script = (f'source "{REPO}/zl/sh/records.sh"; A=(); '
              f'zl_read_records < <(cat; printf "ZL_RC=%s\\0" {rc}); rc=$?; {show}; '
              f'bash -c \'printf "child:%s" "$E"\'; exit $rc')
    return subprocess.run(["bash", "-c", script], input=data, capture_output=True, timeout=30)


def test_values_are_data_never_code(tmp_path):
    marker = tmp_path / "ran"
    value = NASTY.format(marker=marker)
    proc = _read(records([("S", value), ("A[]", value), ("A[]", ""), ("env.E", value)]))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert out == f"{value}|2|{value}||{value}|child:{value}"
    assert not marker.exists()


def test_the_producers_status_is_returned():
    assert _read(records([("S", "x")]), rc=3, show=":").returncode == 3


@pytest.mark.parametrize("name", ["1X", "A-B", "env.$(x)", "a b[]", "PATH;x"])
def test_a_record_naming_no_variable_is_refused(name):
    proc = _read(records([(name, "v")]), show=":")
    assert proc.returncode == 2 and b"bad record name" in proc.stderr


def test_a_value_holding_nul_is_refused():
    with pytest.raises(ConfigError, match="NUL byte"):
        records([("S", "a\0b")])


def test_no_shell_command_runs_generated_code():
    """`grep -n eval run_pytest.sh` prints nothing, nor for any command or shell library."""
    scripts = sorted(REPO.glob("*.sh")) + sorted((REPO / "zl" / "sh").glob("*.sh"))
    assert REPO / "run_pytest.sh" in scripts
    assert [p.name for p in scripts if "eval" in p.read_text()] == []
