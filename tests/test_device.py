"""zl.device + _device_setup_plugin: vendor env (restored), identity, foreign vendor report."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import _device_guard_plugin as dgp
import _device_setup_plugin as dsp
from harness.fake_config import FakeConfig
from zl import identity as ri
from zl.device import DeviceSetup, foreign_vendor_modules
from zl.flaggems import VENDOR_ENV_KEYS

REPO = Path(__file__).resolve().parent.parent


def test_foreign_vendor_modules_by_segment_not_prefix():
    mods = ["flag_gems.runtime.backend._nvidia.ops.mm", "flag_gems.runtime.backend._nvidia_x",
            "flaggems_vllm.runtime.backend._mthreads.ops", "flag_gems.ops.mm", "numpy"]
    assert foreign_vendor_modules("nvidia", mods) == ["mthreads", "nvidia_x"]
    assert foreign_vendor_modules("mthreads", mods) == ["nvidia", "nvidia_x"]
    assert dsp.foreign_vendor_modules is foreign_vendor_modules is dgp.foreign_vendor_modules


def test_device_recorded_from_inherited_visibility(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    monkeypatch.setenv("ZL_BACKEND", "cuda")
    monkeypatch.delenv("ZL_DEVICE", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    monkeypatch.setenv("GEMS_VENDOR", "nvidia")
    DeviceSetup().prepare()
    assert ri.load_identity(str(tmp_path))["device"] == "5"
    monkeypatch.setenv("ZL_DEVICE", "3")
    DeviceSetup().prepare()
    assert ri.load_identity(str(tmp_path))["device"] == "3"


@pytest.fixture
def no_vendor(monkeypatch, tmp_path):
    for key in VENDOR_ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    monkeypatch.setenv("ZL_BACKEND", "cuda")
    return tmp_path


def test_gems_vendor_set_then_restored(no_vendor, monkeypatch):
    setup = DeviceSetup()
    setup.prepare("musa")
    assert os.environ["GEMS_VENDOR"] == "mthreads"
    setup.close()
    assert "GEMS_VENDOR" not in os.environ
    monkeypatch.setenv("FLAGGEMS_VENDOR", "mine")  # the user's choice is never touched
    setup = DeviceSetup()
    setup.prepare("musa")
    assert setup.vendor == "mine" and "GEMS_VENDOR" not in os.environ
    setup.close()


def test_plugin_command_line_backend_replaces_import_time_and_restores(no_vendor):
    config = FakeConfig(dsp, zl_backend="musa", zl_device="2")
    dsp.pytest_configure(config)
    setup = config.pluginmanager.get_plugin(dsp.NAME)
    assert setup.backend.name == "musa" and os.environ["GEMS_VENDOR"] == "mthreads"
    ident = ri.load_identity(str(no_vendor))
    assert (ident["backend"], ident["device"], ident["flaggems_vendor"]) == ("musa", "2", "mthreads")
    dgp.pytest_configure(config)  # the alias under the same session: registered once
    assert list(config.pluginmanager.plugins) == [dsp.NAME]
    dsp.pytest_unconfigure(config)
    dgp.pytest_unconfigure(config)
    assert config.pluginmanager.get_plugin(dsp.NAME) is None and "GEMS_VENDOR" not in os.environ


def test_unknown_backend_at_configure_is_a_usage_error(no_vendor):
    with pytest.raises(pytest.UsageError, match="unknown backend 'pdp11'"):
        dsp.pytest_configure(FakeConfig(dsp, zl_backend="pdp11"))


def test_foreign_vendor_marker_is_reported(no_vendor, capsys):
    setup = DeviceSetup()
    setup.prepare("cuda")
    found = setup.report_packages(["flag_gems.runtime.backend._mthreads.ops"])
    setup.close()
    assert found == ["mthreads"]
    assert "FOREIGN_VENDOR_MODULE active=nvidia loaded=mthreads" in capsys.readouterr().err


def _pytest_in(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if k not in VENDOR_ENV_KEYS and k != "OUT_DIR"}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path)]), ZL_BACKEND="cuda", NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_command_line_backend_reaches_flag_gems_before_the_conftest_imports_it(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path('seen').write_text(os.environ.get('GEMS_VENDOR', '(unset)'))\n")
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    proc = _pytest_in(tmp_path, "-p", "_device_setup_plugin", "--zl-backend", "musa")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "seen").read_text() == "mthreads"


def test_command_line_backend_after_flag_gems_was_imported_is_a_usage_error(tmp_path):
    (tmp_path / "flag_gems.py").write_text("vendor_name = 'nvidia'\n")
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    proc = _pytest_in(tmp_path, "-p", "flag_gems", "-p", "_device_setup_plugin", "--zl-backend", "musa")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "after FlagGems was imported" in proc.stderr
    assert _pytest_in(tmp_path, "-p", "flag_gems", "-p", "_device_setup_plugin").returncode == 0


def test_the_run_configuration_names_the_backend_before_the_conftest_imports_flag_gems(tmp_path):
    """--zl-config is read before the benchmark's conftest imports flag_gems: the file's backend
    and device, not the environment's, reach GEMS_VENDOR and the identity in its OUT_DIR."""
    from dataclasses import replace
    from zl import config as zc
    (tmp_path / "conftest.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path('seen').write_text(os.environ.get('GEMS_VENDOR', '(unset)'))\n")
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    run = tmp_path / "run"
    run.mkdir()
    path = zc.write(replace(zc.RunConfig(), backend="musa", device="2", out_dir=str(run)), str(run))
    proc = _pytest_in(tmp_path, "-p", "_device_setup_plugin", zc.OPTION, str(path))   # env: cuda
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "seen").read_text() == "mthreads"
    ident = ri.load_identity(str(run))
    assert (ident["backend"], ident["device"], ident["flaggems_vendor"]) == ("musa", "2", "mthreads")
    assert ident["finished"]["status"] == "complete"


def test_a_run_configuration_that_cannot_be_read_is_a_usage_error(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    bad = tmp_path / "run_config.json"
    bad.write_text('{"schema_version": 1, "l2": "cold"}')
    for path, needle in ((tmp_path / "absent.json", "cannot read it"), (bad, "missing field(s)")):
        proc = _pytest_in(tmp_path, "-p", "_device_setup_plugin", "--zl-config", str(path))
        assert proc.returncode == 4, proc.stdout + proc.stderr
        assert needle in proc.stderr and str(path) in proc.stderr and "Traceback" not in proc.stderr
