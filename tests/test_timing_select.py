"""zl.timing.select: the timer settings (variables and options) and the timer choice."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from zl.backends import get_backend
from zl.switches import SwitchError
from zl.timing import select

ROOT = Path(__file__).resolve().parents[1]


# --- ZL_ENABLE_CUDAGRAPH / ZL_DIRECT_REPEAT parsing -----------------------------------------

@pytest.mark.parametrize("raw,expected", [
    (None, "auto"), ("", "auto"), ("auto", "auto"), (" AUTO ", "auto"),
    ("1", "on"), ("true", "on"), ("on", "on"), ("yes", "on"), ("always", "on"),
    ("0", "off"), ("false", "off"), ("off", "off"), ("never", "off"), ("direct", "off"),
    ("Direct", "off"), (" no ", "off"),
])
def test_parse_graph_request(raw, expected):
    assert select.parse_graph_request(raw) == expected


@pytest.mark.parametrize("raw", ["maybe", "2", "graph"])
def test_parse_graph_request_rejects_garbage(raw):
    with pytest.raises(select.TimerConfigError, match="ZL_ENABLE_CUDAGRAPH") as info:
        select.parse_graph_request(raw)
    # one family of errors with the shared on/off parser
    assert isinstance(info.value, SwitchError)


def test_parse_graph_request_names_the_option_it_was_given_as():
    with pytest.raises(select.TimerConfigError, match=r"--zl-cudagraph='maybe' is not a timer"):
        select.parse_graph_request("maybe", "--zl-cudagraph")


@pytest.mark.parametrize("raw,n,warns", [
    (None, 1, False), ("", 1, False), ("1", 1, False), ("5", 5, False), (" 3 ", 3, False),
    ("abc", 1, True), ("0", 1, True), ("-4", 1, True), ("2.5", 1, True),
])
def test_parse_direct_repeat(raw, n, warns):
    value, warning = select.parse_direct_repeat(raw)
    assert value == n and (warning is not None) == warns


@pytest.mark.parametrize("backend,request_,timer,capture,refused", [
    ("cuda", "auto", "cuda_graph", "attempted", False),
    ("cuda", "on", "cuda_graph", "attempted", False),
    ("cuda", "off", "direct", "disabled", False),
    ("musa", "auto", "cuda_graph", "attempted", False),
    ("rocm", "auto", "direct", "unsupported", False),
    ("rocm", "on", "direct", "refused", True),
    ("ascend", "on", "direct", "refused", True),
    ("rocm", "off", "direct", "disabled", False),
])
def test_choose_timer_reads_the_capability_not_the_name(backend, request_, timer, capture,
                                                        refused):
    got_timer, got_capture, refusal = select.choose_timer(get_backend(backend), request_)
    assert (got_timer, got_capture, refusal is not None) == (timer, capture, refused)


def test_choose_timer_follows_a_capability_flag_on_any_backend():
    fake = types.SimpleNamespace(name="newvendor", supports_cuda_graph=True)
    assert select.choose_timer(fake, "auto")[0] == "cuda_graph"
    fake.supports_cuda_graph = False
    assert select.choose_timer(fake, "auto")[0] == "direct"


# --- options: the command line wins, the variable is the default ------------------------------

class StubParser:
    """Records what add_options declares (flag -> dest) the way pytest's parser is called."""

    def __init__(self):
        self.dests = {}

    def getgroup(self, name, description=""):
        assert name == "zl_bench"
        return self

    def addoption(self, flag, dest, default=None, **kw):
        assert default is None  # None = not given; the variable is read after parsing
        self.dests[flag] = dest


def parsed_config(**given):
    """A config whose command line gave `given` (flag -> value) for the declared options."""
    parser = StubParser()
    select.add_options(parser)
    values = {parser.dests[flag]: value for flag, value in given.items()}
    return types.SimpleNamespace(getoption=lambda name, default=None: values.get(name, default))


def test_option_on_the_command_line_beats_the_variable(monkeypatch):
    monkeypatch.setenv("ZL_ENABLE_CUDAGRAPH", "1")
    monkeypatch.setenv("ZL_DIRECT_REPEAT", "7")
    config = parsed_config(**{"--zl-cudagraph": "off", "--zl-direct-repeat": "3"})
    assert select.read_setting(config, select.OPT_GRAPH, select.ENV_GRAPH) == (
        "off", "--zl-cudagraph")
    assert select.read_setting(config, select.OPT_REPEAT, select.ENV_REPEAT) == (
        "3", "--zl-direct-repeat")


def test_variable_then_default_when_no_option_is_given(monkeypatch):
    monkeypatch.setenv("ZL_ENABLE_CUDAGRAPH", "direct")
    monkeypatch.delenv("ZL_DIRECT_REPEAT", raising=False)
    config = parsed_config()
    assert select.read_setting(config, select.OPT_GRAPH, select.ENV_GRAPH) == (
        "direct", "ZL_ENABLE_CUDAGRAPH")
    assert select.read_setting(config, select.OPT_REPEAT, select.ENV_REPEAT) == (
        "1", "ZL_DIRECT_REPEAT")


def test_pytest_help_lists_the_zl_bench_group_and_the_timing_options(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZL_", "PYTEST_"))}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "_timing_plugin",
                           "-p", "no:cacheprovider"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = " ".join(proc.stdout.split())  # argparse wraps help text
    assert "zl_bench" in text
    for flag, env_name in ((select.OPT_GRAPH, "ZL_ENABLE_CUDAGRAPH"),
                           (select.OPT_REPEAT, "ZL_DIRECT_REPEAT")):
        assert f"{flag}=VALUE" in text
        assert f"env {env_name}" in text
