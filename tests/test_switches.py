"""zl.switches: one reading of on/off values, strict about anything else."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zl.switches import SwitchError, env_switch, parse_switch

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("word", ["0", " 0", "0 ", "off", "OFF", "False", "no", "never", "\t0\n"])
def test_off_words_with_stray_whitespace_and_case(word):
    assert parse_switch(word, True) is False


@pytest.mark.parametrize("word", ["1", " 1 ", "on", "TRUE", "yes", "always"])
def test_on_words(word):
    assert parse_switch(word, False) is True


@pytest.mark.parametrize("empty", [None, "", "   "])
def test_empty_means_default(empty):
    assert parse_switch(empty, True) is True
    assert parse_switch(empty, False) is False


def test_unknown_word_is_a_named_error():
    with pytest.raises(SwitchError, match="ZL_ENABLE_IR='maybe'"):
        parse_switch("maybe", True, name="ZL_ENABLE_IR")


def test_extra_off_words():
    assert parse_switch("direct", True, extra_off=("direct",)) is False
    with pytest.raises(SwitchError):
        parse_switch("direct", True)


def test_env_switch_reads_the_mapping():
    assert env_switch("X", True, environ={"X": " 0"}) is False
    assert env_switch("X", False, environ={}) is False


def _cli(*args, **env):
    full = dict(os.environ, PYTHONPATH=str(REPO), **env)
    return subprocess.run([sys.executable, "-m", "zl.switches", *args], env=full,
                          capture_output=True, text=True)


def test_cli_prints_the_same_reading_as_python():
    assert _cli("ZL_T", "1", ZL_T=" 0").stdout.strip() == "0"
    assert _cli("ZL_T", "1", ZL_T="").stdout.strip() == "1"
    bad = _cli("ZL_T", ZL_T="sometimes")
    assert bad.returncode == 2 and "ZL_T='sometimes'" in bad.stderr


def test_cli_help_starts_nothing():
    proc = _cli("--help")
    assert proc.returncode == 0 and "usage" in proc.stdout
