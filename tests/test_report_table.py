"""zl.report.table + _pretty_report_plugin: exact fold/unfold, colour, the switch, restore."""

import os
import sys

import pytest

import _pretty_report_plugin as prp
from harness.fake_config import FakeConfig, FakeSession
from zl.report.table import render
from zl.runlog.sizefold import parse_legend_line, unfold


class _Metric:
    def __init__(self, detail):
        self.shape_detail = detail


class _Result:
    def __init__(self, details):
        self.result = [_Metric(d) for d in details]


def _upstream_str(result):
    lines = ["", "Operator: x  Performance Test (dtype=torch.float16, mode=kernel,level=core)",
             "Status       Size Detail", "-" * 24]
    lines += [f"SUCCESS             {m.shape_detail}" for m in result.result]
    return "\n".join(lines) + "\n"


def test_render_folds_and_unfolds_exactly(monkeypatch):
    monkeypatch.setenv("FLAGGEMS_PERF_COLOR", "never")
    details = [["A", 1, "fp16"], ["B", 1, "fp16"]]
    result = _Result(details)
    text = render(result, _upstream_str)
    lines = text.splitlines()
    legend = parse_legend_line(lines[4])
    assert legend == {"n": 3, "fixed": {"1": "1", "2": "'fp16'"}}
    shown = [ln.split(None, 1)[1].strip() for ln in lines[5:7]]
    assert [unfold(s, legend) for s in shown] == [str(d) for d in details]
    # the metrics themselves are untouched after rendering
    assert [m.shape_detail for m in result.result] == details


def test_render_colours_status_words_only_when_asked(monkeypatch):
    monkeypatch.setenv("FLAGGEMS_PERF_COLOR", "always")
    text = render(_Result([["A"]]), _upstream_str)
    assert "\x1b[32mSUCCESS\x1b[0m" in text and "Status" in text


def test_fold_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("FLAGGEMS_PERF_COLOR", "never")
    result = _Result([["A", 1], ["B", 1]])
    assert render(result, _upstream_str, fold_inputs=False) == _upstream_str(result)
    monkeypatch.setenv("ZL_PRETTY_FOLD", "0")
    config = FakeConfig(prp)
    prp.pytest_configure(config)
    assert config.pluginmanager.get_plugin(prp.NAME).fold_inputs is False
    prp.pytest_unconfigure(config)
    monkeypatch.setenv("ZL_PRETTY_FOLD", "sometimes")
    with pytest.raises(pytest.UsageError, match="ZL_PRETTY_FOLD"):
        prp.pytest_configure(FakeConfig(prp))


class BenchmarkResult:
    def __init__(self, details):
        self.result = [_Metric(d) for d in details]

    def __str__(self):
        return _upstream_str(self)


def test_plugin_patches_result_str_and_restores(monkeypatch):
    monkeypatch.setenv("FLAGGEMS_PERF_COLOR", "never")
    mod = type(sys)("fakebench.consts")
    mod.BenchmarkResult = BenchmarkResult
    monkeypatch.setitem(sys.modules, "fakebench.consts", mod)
    original = BenchmarkResult.__dict__["__str__"]
    config = FakeConfig(prp, zl_pretty_fold="on")
    prp.pytest_configure(config)
    config.pluginmanager.get_plugin(prp.NAME).pytest_collection_finish(None)
    folded = str(BenchmarkResult([["A", 1], ["B", 1]]))
    assert parse_legend_line(folded.splitlines()[4]) == {"n": 2, "fixed": {"1": "1"}}
    prp.pytest_unconfigure(config)
    assert BenchmarkResult.__dict__["__str__"] is original


def test_command_line_colour_holds_for_the_session_and_ends_with_it(monkeypatch):
    monkeypatch.setenv("FLAGGEMS_PERF_COLOR", "never")
    config = FakeSession(prp, zl_color="always")
    try:
        prp.pytest_configure(config)
        assert render(_Result([["A"]]), _upstream_str).count("\x1b[32mSUCCESS") == 1
        prp.pytest_unconfigure(config)
    finally:
        config.end()
    assert os.environ["FLAGGEMS_PERF_COLOR"] == "never"   # the variable itself is never written
    assert "\x1b[" not in render(_Result([["A"]]), _upstream_str)
    monkeypatch.setenv("FLAGGEMS_PERF_COLOR", "sometimes")
    with pytest.raises(pytest.UsageError, match="FLAGGEMS_PERF_COLOR='sometimes'"):
        prp.pytest_configure(FakeConfig(prp))
