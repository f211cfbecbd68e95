"""plugin_plan.py: the -p list follows capability flags and env switches, one definition."""

import subprocess
import sys
from pathlib import Path

import pytest

from zl import plan as pp

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for key in ("ZL_ENABLE_MM_CLUSTER", "ZL_ENABLE_AUTOTUNE", "ZL_ENABLE_IR", "ZL_EXTRA_PLUGINS", "ZL_BACKEND"):
        monkeypatch.delenv(key, raising=False)


def test_cuda_default_order():
    plan = pp.plan_plugins("cuda")
    assert plan[0] == "_device_setup_plugin"
    assert plan.index("_autotune_record_plugin") < plan.index("_timing_plugin") < plan.index("_pretty_report_plugin")
    assert "_ir_meta_plugin" in plan
    # Graph capture is loaded by the timing plugin, never listed.
    assert "_cudagraph_plugin" not in plan


@pytest.mark.parametrize("var,plugin", [("ZL_ENABLE_AUTOTUNE", "_autotune_record_plugin"),
                                        ("ZL_ENABLE_IR", "_ir_meta_plugin")])
@pytest.mark.parametrize("off", ["0", "false", "OFF", "no"])
def test_switches_drop_plugins(monkeypatch, var, plugin, off):
    monkeypatch.setenv(var, off)
    assert plugin not in pp.plan_plugins("cuda")


def test_extra_plugins_appended_once(monkeypatch):
    monkeypatch.setenv("ZL_EXTRA_PLUGINS", "my_plugin _seed_plugin my_plugin")
    plan = pp.plan_plugins("cuda")
    assert plan[-1] == "my_plugin" and plan.count("_seed_plugin") == 1 and plan.count("my_plugin") == 1


def test_backend_without_triton_hooks_gets_no_hook_plugins(monkeypatch):
    from zl import backends

    backend = backends.get_backend("rocm")
    monkeypatch.setattr(type(backend), "supports_triton_hooks", False)
    plan = pp.plan_plugins("rocm")
    assert "_autotune_record_plugin" not in plan and "_ir_meta_plugin" not in plan
    assert "_timing_plugin" in plan


def test_aliases_plan_like_canonical():
    assert pp.plan_plugins("nvidia") == pp.plan_plugins("cuda")


def test_cli_unknown_backend_exits_2():
    proc = subprocess.run([sys.executable, str(REPO / "plugin_plan.py"), "--backend", "tpu"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "tpu" in proc.stderr and "cuda" in proc.stderr


def test_cli_missing_extra_plugin_exits_2(monkeypatch):
    env = dict(__import__("os").environ, ZL_EXTRA_PLUGINS="_no_such_plugin_zz", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "plugin_plan.py"), "--backend", "cuda"],
                          capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 2 and "_no_such_plugin_zz" in proc.stderr


def test_mm_cluster_opt_in_only_where_supported(monkeypatch):
    assert "_mm_cluster_fix_plugin" not in pp.plan_plugins("cuda")
    monkeypatch.setenv("ZL_ENABLE_MM_CLUSTER", "1")
    assert "_mm_cluster_fix_plugin" in pp.plan_plugins("cuda")
    assert "_mm_cluster_fix_plugin" not in pp.plan_plugins("musa")
    env = dict(__import__("os").environ, ZL_ENABLE_MM_CLUSTER="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "plugin_plan.py"), "--backend", "cuda", "--one-per-line"],
                          capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 0 and "_mm_cluster_fix_plugin" in proc.stdout.split()


def test_shape_plugins_follow_shape_inject():
    plan = pp.plan_plugins("cuda")
    i = plan.index("_shape_inject_plugin")
    assert plan[i + 1:i + 3] == ["_shape_iter_inject_plugin", "_bespoke_shape_plugin"]
    assert not pp.missing_modules(plan)


def test_musa_loads_its_compat_plugin_first():
    assert pp.plan_plugins("musa")[0] == "_musa_benchmark_compat_plugin"
    for name in ("cuda", "rocm", "ascend"):
        assert "_musa_benchmark_compat_plugin" not in pp.plan_plugins(name)
