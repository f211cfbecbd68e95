"""zl.shapes + _shape_inject_plugin: the yaml wins over hardcoded shapes, steps back on
arity mismatch, records shapes.yaml, and puts init_user_config back at unconfigure."""


import pytest

import _shape_inject_plugin as sip
from harness.fake_config import FakeConfig
from zl.shapes.inject import ShapeInjector, ShapeModeError
from harness.fake_benchmark import install_benchmark


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


ORIGINALS = (Benchmark.__dict__["init_user_config"], BlasBenchmark.__dict__["init_user_config"])


@pytest.fixture
def fake_base(monkeypatch):
    install_benchmark(monkeypatch, Benchmark)


@pytest.fixture
def inject(fake_base, tmp_path):
    """Call as inject(yaml_text, mode) -> the patched injector (closed after the test)."""
    made = []

    def _make(text, mode="file"):
        path = tmp_path / "s.yaml"
        path.write_text(text)
        injector = ShapeInjector(str(path), mode, str(tmp_path))
        assert injector.patch.apply() == 2
        made.append(injector)
        return injector
    yield _make
    for injector in made:
        injector.close()


def test_yaml_overrides_hardcoded_subclass_shapes(inject, tmp_path):
    inject("mm:\n  shapes:\n    - [1, 8, 8, 8]\n")
    bench = BlasBenchmark("mm")
    bench.init_user_config()
    assert bench.shapes == [(1, 8, 8, 8)]
    assert "source: yaml" in (tmp_path / "shapes.yaml").read_text()


def test_class_chain_key_is_found_like_upstream(inject):
    inject("BlasBenchmark:\n  shapes:\n    - [3, 8, 8, 8]\n")
    bench = BlasBenchmark("bmm")
    bench.init_user_config()
    assert bench.shapes == [(3, 8, 8, 8)]


def test_arity_mismatch_steps_back_and_says_so(inject, capsys):
    inject("Benchmark:\n  shapes:\n    - [1024]\n")
    bench = BlasBenchmark("mm")
    bench.init_user_config()
    assert bench.shapes == [(2, 64, 64, 64), (2, 128, 128, 128)]
    assert "stepping back" in capsys.readouterr().err


def test_upstream_mode_changes_nothing_but_records(inject, tmp_path):
    inject("mm:\n  shapes:\n    - [1, 8, 8, 8]\n", mode="upstream")
    bench = BlasBenchmark("mm")
    bench.init_user_config()
    assert bench.shapes == [(2, 64, 64, 64), (2, 128, 128, 128)]
    assert "source: upstream" in (tmp_path / "shapes.yaml").read_text()


def test_starting_yaml_is_kept_as_source(inject, tmp_path):
    (tmp_path / "shapes.yaml").write_text("mm: {shapes: [[9]]}\n")
    inject("mm:\n  shapes:\n    - [1, 8, 8, 8]\n")
    BlasBenchmark("mm").init_user_config()
    assert (tmp_path / "shapes.source.yaml").read_text() == "mm: {shapes: [[9]]}\n"


def test_restore_puts_originals_back(inject):
    inject("mm:\n  shapes:\n    - [1, 8, 8, 8]\n").close()
    assert not hasattr(BlasBenchmark.init_user_config, "__wrapped__")
    assert not hasattr(Benchmark.init_user_config, "__wrapped__")
    assert (Benchmark.__dict__["init_user_config"], BlasBenchmark.__dict__["init_user_config"]) == ORIGINALS


def test_bad_shape_mode_is_a_named_error():
    with pytest.raises(ShapeModeError, match="ZL_SHAPE_MODE='bogus'"):
        ShapeInjector("", "bogus", "")


def test_plugin_registers_reads_options_and_restores(fake_base, monkeypatch, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("mm:\n  shapes:\n    - [1, 8, 8, 8]\n")
    monkeypatch.setenv("ZL_SHAPE_FILE", str(tmp_path / "not-this.yaml"))
    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    config = FakeConfig(sip, zl_shape_file=str(path), zl_shape_mode="file")
    sip.pytest_configure(config)
    injector = config.pluginmanager.get_plugin(sip.NAME)
    injector.pytest_collection_finish(None)
    bench = BlasBenchmark("mm")
    bench.init_user_config()
    assert bench.shapes == [(1, 8, 8, 8)]
    sip.pytest_unconfigure(config)
    assert config.pluginmanager.get_plugin(sip.NAME) is None
    assert (Benchmark.__dict__["init_user_config"], BlasBenchmark.__dict__["init_user_config"]) == ORIGINALS
    monkeypatch.setenv("ZL_SHAPE_MODE", "sideways")
    with pytest.raises(pytest.UsageError, match="ZL_SHAPE_MODE"):
        sip.pytest_configure(FakeConfig(sip))
