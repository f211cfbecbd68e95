"""_ir_meta_plugin: registered only when on, options over variables, undone at unconfigure."""
import pytest

import _ir_meta_plugin as plugin
from harness.fake_config import FakeConfig
from zl.ir import fingerprint as fp


def test_pytest_configure_switches(monkeypatch, tmp_path):
    monkeypatch.setenv(plugin.DUMP_DIR_ENV, str(tmp_path / "ttgir"))
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    config = FakeConfig(plugin)
    plugin.pytest_configure(config)
    assert config.pluginmanager.get_plugin(plugin.NAME) is None
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.delenv(plugin.DUMP_DIR_ENV)
    plugin.pytest_configure(config)
    assert config.pluginmanager.get_plugin(plugin.NAME) is None
    monkeypatch.setenv(plugin.DUMP_DIR_ENV, str(tmp_path / "ttgir"))
    monkeypatch.setenv(plugin.LEVELS_ENV, "ttgir,cubin")
    with pytest.raises(pytest.UsageError, match="ZL_IR_LEVELS"):
        plugin.pytest_configure(config)
    monkeypatch.setenv(plugin.ENABLE_ENV, "maybe")
    with pytest.raises(pytest.UsageError, match="ZL_ENABLE_IR"):
        plugin.pytest_configure(config)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setenv(plugin.LEVELS_ENV, "llir")
    plugin.pytest_configure(config)
    active = config.pluginmanager.get_plugin(plugin.NAME)
    assert active.session.collector.levels == ["ttgir", "llir"]
    plugin.pytest_unconfigure(config)
    assert config.pluginmanager.get_plugin(plugin.NAME) is None
    assert active.session.closed and (tmp_path / "ttgir" / "index.tsv").is_file()


def test_command_line_options_win_over_variables(monkeypatch, tmp_path):
    monkeypatch.setenv(plugin.DUMP_DIR_ENV, str(tmp_path / "env"))
    monkeypatch.setenv(plugin.LEVELS_ENV, "llir")
    config = FakeConfig(plugin, zl_ttgir_dump_dir=str(tmp_path / "cli"), zl_ir_levels="ptx")
    plugin.pytest_configure(config)
    collector = config.pluginmanager.get_plugin(plugin.NAME).session.collector
    assert (collector.dump_dir, collector.levels) == (str(tmp_path / "cli"), ["ttgir", "ptx"])
    plugin.pytest_unconfigure(config)
    assert (tmp_path / "cli" / "index.tsv").is_file() and not (tmp_path / "env").exists()
    off = FakeConfig(plugin, zl_enable_ir="off")
    plugin.pytest_configure(off)
    assert off.pluginmanager.get_plugin(plugin.NAME) is None


def test_plugin_module_does_not_import_the_planner():
    text = open(plugin.__file__, encoding="utf-8").read()
    assert "plugin_plan" not in text and "zl.plan" not in text and "zl import plan" not in text


def test_plugin_loads_under_the_cpu_harness(zl_run):
    """run_pytest.sh on the fake tree with the plugin in the plan: the run is unharmed."""
    res = zl_run(OP="softmax", OP_FILE="softmax", SHAPE_MODE="upstream")
    assert res.returncode == 0, res.explain()
    assert "Traceback" not in res.stderr
    ttgir = res.out_dir / "ttgir"
    assert (ttgir / "index.tsv").is_file() and (ttgir / "naming.md").is_file(), res.explain()
    # The interpreter compiles nothing: an index with no rows, and no comparable IR.
    assert "[ir-meta-plugin] dumped 0 TTGIR file(s)" in res.output
    assert fp.read_index(ttgir) == []
