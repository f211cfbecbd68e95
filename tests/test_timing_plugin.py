"""Tests for _timing_plugin: the timer choice, ZL_DIRECT_REPEAT, identity fields, restore.

Unit tests call the plugin's functions and hooks in-process with a stub pytest config;
the subprocess tests run a real `python -m pytest -p _timing_plugin` on a throwaway
benchmark file with the CPU Triton driver (tests/harness/cpu_driver.py), whose device
interface has no graph type, so every graph-timed shape must fall back with the marker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import triton.testing

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _cudagraph_plugin as cg  # noqa: E402
import _timing_plugin as tp  # noqa: E402
from zl.backends import get_backend  # noqa: E402


# --- ZL_ENABLE_CUDAGRAPH / ZL_DIRECT_REPEAT parsing -----------------------------------------

@pytest.mark.parametrize("raw,expected", [
    (None, "auto"), ("", "auto"), ("auto", "auto"), (" AUTO ", "auto"),
    ("1", "on"), ("true", "on"), ("on", "on"), ("yes", "on"),
    ("0", "off"), ("false", "off"), ("off", "off"), ("direct", "off"), ("Direct", "off"),
])
def test_parse_graph_request(raw, expected):
    assert tp.parse_graph_request(raw) == expected


@pytest.mark.parametrize("raw", ["maybe", "2", "graph"])
def test_parse_graph_request_rejects_garbage(raw):
    with pytest.raises(tp.TimerConfigError, match="ZL_ENABLE_CUDAGRAPH"):
        tp.parse_graph_request(raw)


@pytest.mark.parametrize("raw,n,warns", [
    (None, 1, False), ("", 1, False), ("1", 1, False), ("5", 5, False), (" 3 ", 3, False),
    ("abc", 1, True), ("0", 1, True), ("-4", 1, True), ("2.5", 1, True),
])
def test_parse_direct_repeat(raw, n, warns):
    value, warning = tp.parse_direct_repeat(raw)
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
    got_timer, got_capture, refusal = tp.choose_timer(get_backend(backend), request_)
    assert (got_timer, got_capture, refusal is not None) == (timer, capture, refused)


def test_choose_timer_follows_a_capability_flag_on_any_backend():
    fake = types.SimpleNamespace(name="newvendor", supports_cuda_graph=True)
    assert tp.choose_timer(fake, "auto")[0] == "cuda_graph"
    fake.supports_cuda_graph = False
    assert tp.choose_timer(fake, "auto")[0] == "direct"


# --- direct repeat arithmetic ---------------------------------------------------------------

def sequence_bench(values):
    calls = []

    def bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
        calls.append(dict(quantiles=quantiles, return_mode=return_mode, warmup=warmup, rep=rep))
        if quantiles is not None:
            return [9.0, 8.0, 7.0]
        if return_mode == "all":
            return [1.0, 2.0, 3.0]
        return values[(len(calls) - 1) % len(values)]

    return bench, calls


@pytest.mark.parametrize("repeat,expected,n_calls", [
    (1, 3.0, 1), (3, 2.0, 3), (5, 3.0, 5), (4, 2.5, 4),
])
def test_run_direct_takes_the_median_of_n_calls(repeat, expected, n_calls):
    bench, calls = sequence_bench([3.0, 1.0, 2.0, 9.0, 5.0])
    out = tp.run_direct(bench, lambda: None, warmup=7, rep=11, return_mode="median",
                        repeat=repeat)
    assert out == expected and len(calls) == n_calls
    assert all(c["warmup"] == 7 and c["rep"] == 11 and c["return_mode"] == "median"
               for c in calls)


@pytest.mark.parametrize("kw,expected", [
    ({"quantiles": (0.5, 0.2, 0.8)}, [9.0, 8.0, 7.0]),
    ({"return_mode": "all"}, [1.0, 2.0, 3.0]),
])
def test_run_direct_does_not_repeat_sequence_results(kw, expected):
    bench, calls = sequence_bench([3.0])
    assert tp.run_direct(bench, lambda: None, repeat=5, **kw) == expected
    assert len(calls) == 1


def test_repeated_do_bench_keeps_upstream_signature():
    bench, calls = sequence_bench([4.0, 6.0, 5.0])
    wrapped = tp.make_repeated_do_bench(bench, 3)
    assert wrapped(lambda: None, 1, 2, None, None, "median") == 5.0
    assert wrapped.zl_direct_repeat == 3 and len(calls) == 3


# --- configure / unconfigure in-process -----------------------------------------------------

class StubPluginManager:
    def __init__(self):
        self.imported = []

    def import_plugin(self, name):
        self.imported.append(name)

    def has_plugin(self, name):
        return name == "_timing_plugin"


@pytest.fixture
def configured(monkeypatch, tmp_path):
    """Run pytest_configure under an env; yields (config, identity reader); unconfigures."""
    bench, calls = sequence_bench([1.0, 3.0, 2.0])
    monkeypatch.setattr(triton.testing, "do_bench", bench)
    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    for key in ("ZL_ENABLE_CUDAGRAPH", "ZL_DIRECT_REPEAT", "ZL_BACKEND"):
        monkeypatch.delenv(key, raising=False)
    config = types.SimpleNamespace(pluginmanager=StubPluginManager())
    state = types.SimpleNamespace(config=config, bench=bench, calls=calls,
                                  identity=lambda: json.loads(
                                      (tmp_path / "run_identity.json").read_text()))

    def configure(**env):
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        tp.pytest_configure(config)

    state.configure = configure
    yield state
    tp.pytest_unconfigure(config)
    assert triton.testing.do_bench is bench
    assert not cg.is_installed()


def test_graph_timer_installs_and_records_identity(configured, capsys):
    configured.configure(ZL_BACKEND="cuda", ZL_DIRECT_REPEAT="4")
    assert configured.config.pluginmanager.imported == ["_cudagraph_plugin"]
    assert triton.testing.do_bench is cg.graph_do_bench
    ident = configured.identity()
    assert ident["timer"] == "cuda_graph" and ident["graph_capture"] == "attempted"
    assert ident["direct_repeat"] == 4
    err = capsys.readouterr().err
    assert "[timing-plugin] timer=cuda_graph backend=cuda via" in err


def test_direct_timer_with_repeat_wraps_do_bench(configured, capsys):
    configured.configure(ZL_BACKEND="cuda", ZL_ENABLE_CUDAGRAPH="0", ZL_DIRECT_REPEAT="3")
    assert configured.config.pluginmanager.imported == []
    assert triton.testing.do_bench(lambda: None, return_mode="median") == 2.0
    assert len(configured.calls) == 3
    assert configured.identity() == {"timer": "direct", "graph_capture": "disabled",
                                     "direct_repeat": 3}
    assert "median of 3 calls" in capsys.readouterr().err


def test_direct_timer_without_repeat_leaves_upstream_untouched(configured):
    configured.configure(ZL_BACKEND="rocm")
    assert triton.testing.do_bench is configured.bench
    assert configured.identity()["graph_capture"] == "unsupported"


def test_forcing_graphs_on_a_backend_without_them_is_refused(configured, capsys):
    configured.configure(ZL_BACKEND="rocm", ZL_ENABLE_CUDAGRAPH="1")
    assert configured.config.pluginmanager.imported == []
    assert configured.identity()["timer"] == "direct"
    assert configured.identity()["graph_capture"] == "refused"
    assert "ZL_ENABLE_CUDAGRAPH=1 refused: backend rocm" in capsys.readouterr().err


def test_garbage_repeat_is_logged_and_recorded_as_one(configured, capsys):
    configured.configure(ZL_BACKEND="musa", ZL_DIRECT_REPEAT="lots")
    assert configured.identity()["direct_repeat"] == 1
    assert "ZL_DIRECT_REPEAT='lots' is not an integer" in capsys.readouterr().err


@pytest.mark.parametrize("env", [{"ZL_ENABLE_CUDAGRAPH": "maybe"}, {"ZL_BACKEND": "tpu"}])
def test_bad_values_are_usage_errors(configured, env):
    with pytest.raises(pytest.UsageError):
        configured.configure(**env)
    assert triton.testing.do_bench is configured.bench


# --- real pytest subprocesses on the CPU driver ---------------------------------------------

BENCH_FILE = textwrap.dedent('''
    import triton.testing

    def work():
        return sum(range(2000))

    def test_softmax():
        for i in range(3):
            ms = triton.testing.do_bench(work, warmup=1, rep=2, return_mode="median")
            print(f"ROW softmax shape{i} {ms:.6f}")

    def test_unique2():
        ms = triton.testing.do_bench(work, warmup=1, rep=2, return_mode="median")
        print(f"ROW unique2 shape0 {ms:.6f}")

    def test_repeat_attribute():
        print("REPEAT", getattr(triton.testing.do_bench, "zl_direct_repeat", None))
''')

CONFTEST = textwrap.dedent(f'''
    import sys
    sys.path.insert(0, {str(ROOT / "tests" / "harness")!r})
    import cpu_driver
    cpu_driver.install()
''')


def run_pytest(tmp_path, **env):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "conftest.py").write_text(CONFTEST)
    (work / "test_unique.py").write_text(BENCH_FILE)
    out_dir = tmp_path / "out"
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("ZL_", "FLAGGEMS_", "PYTEST_"))}
    full_env.update(PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", OUT_DIR=str(out_dir),
                    FLAGGEMS_PERF_COLOR="never", PYTHONUNBUFFERED="1")
    full_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "_timing_plugin", "-s", "-q",
         "-p", "no:cacheprovider", "test_unique.py"],
        cwd=work, env=full_env, capture_output=True, text=True, timeout=240)
    ident_path = out_dir / "run_identity.json"
    ident = json.loads(ident_path.read_text()) if ident_path.exists() else {}
    return proc, ident


def test_subprocess_graph_timer_falls_back_per_shape_and_keeps_rows(tmp_path):
    proc, ident = run_pytest(tmp_path, ZL_BACKEND="musa", ZL_DIRECT_REPEAT="2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # pytest's progress dot can precede the first line a test prints: match inside lines.
    lines = proc.stdout.splitlines()
    rows = [line for line in lines if "ROW softmax" in line]
    softmax_markers = [line for line in lines if
                       "BENCHMARK_DIRECT_NO_CUDAGRAPH op=softmax phase=capture "
                       "reason=NoGraphSupport" in line]
    assert len(rows) == 3 and len(softmax_markers) == 3
    assert all(line.endswith(" repeat=2") for line in softmax_markers)
    assert all(float(r.split()[-1]) > 0 for r in rows)
    # The deny list is keyed by the function (unique2), not by the file (test_unique.py).
    assert any("BENCHMARK_DIRECT_NO_CUDAGRAPH op=unique2 phase=denylist" in line
               for line in lines)
    assert [line for line in lines if "ROW unique2" in line]
    assert ident == {"timer": "cuda_graph", "graph_capture": "attempted", "direct_repeat": 2}
    assert "timer=cuda_graph backend=musa via CpuDeviceInterface" in proc.stderr


def test_subprocess_direct_timer_repeats_and_records(tmp_path):
    proc, ident = run_pytest(tmp_path, ZL_BACKEND="cuda", ZL_ENABLE_CUDAGRAPH="off",
                             ZL_DIRECT_REPEAT="3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BENCHMARK_DIRECT_NO_CUDAGRAPH" not in proc.stdout
    assert "REPEAT 3" in proc.stdout
    assert len([line for line in proc.stdout.splitlines() if "ROW " in line]) == 4
    assert ident == {"timer": "direct", "graph_capture": "disabled", "direct_repeat": 3}


def test_subprocess_bad_value_is_a_usage_error_without_traceback(tmp_path):
    proc, ident = run_pytest(tmp_path, ZL_BACKEND="cuda", ZL_ENABLE_CUDAGRAPH="sometimes")
    assert proc.returncode == 4  # pytest's usage-error status
    assert "ZL_ENABLE_CUDAGRAPH='sometimes' is not a timer choice" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "timer" not in ident
