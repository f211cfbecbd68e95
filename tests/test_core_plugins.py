"""Unit tests of the core plugins: shape injection, pretty report, seeds, device setup."""

import os
import random
import sys

import pytest

import _device_setup_plugin as dsp
import _pretty_report_plugin as prp
import _seed_plugin as sp
import _shape_inject_plugin as sip
from zl.runlog.sizefold import parse_legend_line, unfold


# ---------------------------------------------------------------- shape injection
class Benchmark:
    DEFAULT_SHAPES = [(1024,)]

    def __init__(self, op_name):
        self.op_name, self.shapes, self.shape_desc = op_name, list(self.DEFAULT_SHAPES), "M"

    def set_shapes(self, path=None):
        pass

    def init_user_config(self):
        self.set_shapes()


class BlasBenchmark(Benchmark):
    def init_user_config(self):  # hardcoded, like ~200 upstream subclasses
        super().init_user_config()
        self.shapes = [(2, 64, 64, 64), (2, 128, 128, 128)]


@pytest.fixture
def patched(monkeypatch, tmp_path):
    mod = type(sys)("fakebench.base")
    mod.Benchmark = Benchmark
    monkeypatch.setitem(sys.modules, "fakebench.base", mod)
    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    sip._effective.clear()
    sip._yaml_cache.clear()
    assert sip.patch_benchmarks() == 2
    yield tmp_path
    sip.restore()


def _yaml(tmp_path, text, monkeypatch, mode="file"):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    monkeypatch.setenv("ZL_SHAPE_FILE", str(path))
    monkeypatch.setenv("ZL_SHAPE_MODE", mode)


def test_yaml_overrides_hardcoded_subclass_shapes(patched, monkeypatch):
    _yaml(patched, "mm:\n  shapes:\n    - [1, 8, 8, 8]\n", monkeypatch)
    bench = BlasBenchmark("mm")
    bench.init_user_config()
    assert bench.shapes == [(1, 8, 8, 8)]
    assert "source: yaml" in (patched / "shapes.yaml").read_text()


def test_class_chain_key_is_found_like_upstream(patched, monkeypatch):
    _yaml(patched, "BlasBenchmark:\n  shapes:\n    - [3, 8, 8, 8]\n", monkeypatch)
    bench = BlasBenchmark("bmm")
    bench.init_user_config()
    assert bench.shapes == [(3, 8, 8, 8)]


def test_arity_mismatch_steps_back_and_says_so(patched, monkeypatch, capsys):
    _yaml(patched, "Benchmark:\n  shapes:\n    - [1024]\n", monkeypatch)
    bench = BlasBenchmark("mm")
    bench.init_user_config()
    assert bench.shapes == [(2, 64, 64, 64), (2, 128, 128, 128)]
    assert "stepping back" in capsys.readouterr().err


def test_upstream_mode_changes_nothing_but_records(patched, monkeypatch):
    _yaml(patched, "mm:\n  shapes:\n    - [1, 8, 8, 8]\n", monkeypatch, mode="upstream")
    bench = BlasBenchmark("mm")
    bench.init_user_config()
    assert bench.shapes == [(2, 64, 64, 64), (2, 128, 128, 128)]
    assert "source: upstream" in (patched / "shapes.yaml").read_text()


def test_restore_puts_originals_back(patched):
    sip.restore()
    assert not hasattr(BlasBenchmark.init_user_config, "__wrapped__")
    assert not hasattr(Benchmark.init_user_config, "__wrapped__")


# ---------------------------------------------------------------- pretty report
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
    text = prp.render(result, _upstream_str)
    lines = text.splitlines()
    legend = parse_legend_line(lines[4])
    assert legend == {"n": 3, "fixed": {"1": "1", "2": "'fp16'"}}
    shown = [ln.split(None, 1)[1].strip() for ln in lines[5:7]]
    assert [unfold(s, legend) for s in shown] == [str(d) for d in details]
    # the metrics themselves are untouched after rendering
    assert [m.shape_detail for m in result.result] == details


def test_render_colours_status_words_only_when_asked(monkeypatch):
    monkeypatch.setenv("FLAGGEMS_PERF_COLOR", "always")
    text = prp.render(_Result([["A"]]), _upstream_str)
    assert "\x1b[32mSUCCESS\x1b[0m" in text and "Status" in text


def test_fold_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("FLAGGEMS_PERF_COLOR", "never")
    monkeypatch.setenv("ZL_PRETTY_FOLD", "0")
    result = _Result([["A", 1], ["B", 1]])
    assert prp.render(result, _upstream_str) == _upstream_str(result)


# ---------------------------------------------------------------- seeds
def test_seeds_make_draws_repeatable(monkeypatch):
    import numpy as np
    import torch

    monkeypatch.setenv("ZL_SEED", "7")
    sp.apply_seeds(sp.seed_value())
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    sp.apply_seeds(sp.seed_value())
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_bad_seed_falls_back_with_message(monkeypatch, capsys):
    monkeypatch.setenv("ZL_SEED", "abc")
    assert sp.seed_value() == sp.DEFAULT_SEED
    assert "not an integer" in capsys.readouterr().err


# ---------------------------------------------------------------- device setup
def test_foreign_vendor_modules_by_segment_not_prefix():
    mods = ["flag_gems.runtime.backend._nvidia.ops.mm", "flag_gems.runtime.backend._nvidia_x",
            "flaggems_vllm.runtime.backend._mthreads.ops", "flag_gems.ops.mm", "numpy"]
    assert dsp.foreign_vendor_modules("nvidia", mods) == ["mthreads", "nvidia_x"]
    assert dsp.foreign_vendor_modules("mthreads", mods) == ["nvidia", "nvidia_x"]


def test_device_recorded_from_inherited_visibility(monkeypatch, tmp_path):
    from zl import identity as ri

    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    monkeypatch.setenv("ZL_BACKEND", "cuda")
    monkeypatch.delenv("ZL_DEVICE", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    monkeypatch.setenv("GEMS_VENDOR", "nvidia")
    dsp._setup_at_import()
    assert ri.load_identity(str(tmp_path))["device"] == "5"
    monkeypatch.setenv("ZL_DEVICE", "3")
    dsp._setup_at_import()
    assert ri.load_identity(str(tmp_path))["device"] == "3"
