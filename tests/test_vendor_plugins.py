"""Vendor plugins: the MUSA skip-gate override (synthetic items and one real pytest session)
and the Hopper mm cluster workaround (fake FlagGems with and without a live cluster path)."""

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import _mm_cluster_fix_plugin as mmfix
import _musa_benchmark_compat_plugin as musa

REPO = Path(__file__).resolve().parent.parent


class Node:
    def __init__(self, nodeid, marks=(), parent=None, path=""):
        self.nodeid, self.own_markers, self.parent, self.path = nodeid, list(marks), parent, path

    def listchain(self):
        chain, node = [], self
        while node is not None:
            chain.insert(0, node)
            node = node.parent
        return chain


def _gate(cond, reason):
    return pytest.mark.skipif(cond, reason=reason).mark


def _item(file, marks=(), module_marks=()):
    module = Node(file, module_marks, path=f"/x/FlagGems/{file}")
    return Node(f"{file}::test_x", marks, parent=module, path=f"/x/FlagGems/{file}")


def test_pinned_gate_is_dropped_and_put_back():
    compat = musa.MusaCompat()
    gate = _gate(True, "CUDA is not available")
    other = _gate(True, "Unsupported in CPU mode")
    item = _item("benchmark/test_scaled_dot_product_attention_math.py", [gate, other])
    assert compat.drop_gates([item]) == [item.nodeid]
    assert item.own_markers == [other]            # the other gate of the same test stays
    compat.patches.undo_all()
    assert gate in item.own_markers


@pytest.mark.parametrize("file,cond,reason", [
    ("benchmark/test_flash_attention_forward.py", True, "CUDA is not available"),   # wrong file
    ("benchmark/test_fft.py", True, "CUDA required"),                               # wrong reason
    ("benchmark/test_fft.py", True, "CUDA is not available."),                      # not exact
    ("benchmark/test_fft.py", False, "CUDA is not available"),                      # does not fire
    ("other/benchmark_test_fft.py", True, "CUDA is not available"),                 # suffix only
])
def test_other_gates_are_untouched(file, cond, reason):
    item = _item(file, [_gate(cond, reason)])
    assert musa.MusaCompat().drop_gates([item]) == []
    assert len(item.own_markers) == 1


def test_module_level_gate_dropped_once_for_the_module():
    module_gate = _gate(True, "CUDA device required")
    a = _item("benchmark/test_top_k_per_row_prefill.py", module_marks=[module_gate])
    b = Node("benchmark/test_top_k_per_row_prefill.py::test_y", parent=a.parent, path=a.path)
    assert musa.MusaCompat().drop_gates([a, b]) == ["benchmark/test_top_k_per_row_prefill.py"]
    assert a.parent.own_markers == []


@pytest.mark.parametrize("vendor", ["nvidia", None])
def test_other_vendor_keeps_every_gate(monkeypatch, capsys, vendor):
    if vendor is None:
        monkeypatch.delitem(sys.modules, "flag_gems", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "flag_gems", types.SimpleNamespace(vendor_name=vendor))
    item = _item("benchmark/test_fft.py", [_gate(True, "CUDA is not available")])
    musa.MusaCompat().pytest_collection_modifyitems(None, None, [item])
    assert len(item.own_markers) == 1
    assert "upstream's skip gates kept" in capsys.readouterr().err


def _session(tmp_path, vendor, *extra):
    (tmp_path / "benchmark").mkdir()
    (tmp_path / "flag_gems.py").write_text(f"vendor_name = {vendor!r}\n")
    (tmp_path / "benchmark" / "test_fft.py").write_text(textwrap.dedent("""
        import pytest
        import flag_gems  # noqa: F401

        @pytest.mark.skipif(True, reason="CUDA is not available")
        def test_perf_fft():
            pass
    """))
    env = {"PYTHONPATH": f"{REPO}:{tmp_path}", "PATH": "/usr/bin:/bin", "NO_COLOR": "1",
           "OUT_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "_musa_benchmark_compat_plugin", "-q",
                           "-p", "no:cacheprovider", "benchmark/test_fft.py", *extra],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_real_session_runs_the_gated_test_on_mthreads_only(tmp_path):
    (tmp_path / "m").mkdir()
    run = _session(tmp_path / "m", "mthreads")
    assert "1 passed" in run.stdout, run.stdout + run.stderr
    assert json.loads((tmp_path / "m" / "run_identity.json").read_text())["musa_compat_dropped"] == \
        ["benchmark/test_fft.py::test_perf_fft"]
    (tmp_path / "n").mkdir()
    assert "1 skipped" in _session(tmp_path / "n", "nvidia").stdout
    (tmp_path / "o").mkdir()
    off = _session(tmp_path / "o", "mthreads", "--zl-musa-compat=0")
    assert "1 skipped" in off.stdout
    (tmp_path / "b").mkdir()
    bad = _session(tmp_path / "b", "mthreads", "--zl-musa-compat=maybe")
    assert bad.returncode == 4 and "ZL_MUSA_COMPAT='maybe'" in bad.stderr


# ------------------------------------------------------------------ mm cluster

def test_not_live_patches_nothing(monkeypatch, capsys):
    monkeypatch.delenv("OUT_DIR", raising=False)
    mod = types.ModuleType("flag_gems.zl_test_mm")
    mod.HAS_TLE, mod.BLOCK_CLUSTER_MESH = False, None
    mod.cluster_remote_mm_scenario = lambda *a: False
    mod.cluster_remote_mm = original = lambda *a: "cluster"
    mod.general_mm = lambda *a: "general"
    monkeypatch.setitem(sys.modules, "flag_gems.zl_test_mm", mod)
    fix = mmfix.MmClusterFix()
    assert fix.apply() == "not_live"
    assert mod.cluster_remote_mm is original and len(fix.patches) == 0
    assert "not live: HAS_TLE is false in flag_gems.zl_test_mm" in capsys.readouterr().err
    mod.HAS_TLE, mod.BLOCK_CLUSTER_MESH = True, object()
    assert fix.apply() == "routed"
    a = types.SimpleNamespace(dtype="torch.float16")
    assert mod.cluster_remote_mm(a, a, a, 64, 256, 64) == "general"
    assert fix.rerouted == ["64x256x64 float16"]
    fix.patches.undo_all()
    assert mod.cluster_remote_mm is original


def test_live_path_crashes_without_the_plugin_and_is_routed_with_it(zl_run):
    common = dict(OP="mm", OP_FILE="mm", DTYPES="float16", SHAPE_FILE="upstream", ZL_ENABLE_IR="0",
                  ZL_ENABLE_AUTOTUNE="0", FAKE_FLAGGEMS_HAS_TLE="1")
    crash = zl_run(**common)
    assert crash.returncode != 0 and "illegal memory access" in crash.output, crash.explain()
    fixed = zl_run(ZL_ENABLE_MM_CLUSTER="1", **common)
    assert fixed.returncode == 0, fixed.explain()
    ident = json.loads((fixed.out_dir / "run_identity.json").read_text())
    assert ident["mm_cluster_fix"] == "routed"
    assert "32x32x32 float16" in ident["mm_cluster_rerouted"]
    assert "routed to general_mm" in fixed.log_text


def test_stock_triton_says_not_live(zl_run):
    res = zl_run(OP="mm", OP_FILE="mm", DTYPES="float16", SHAPE_FILE="upstream", ZL_ENABLE_IR="0",
                 ZL_ENABLE_AUTOTUNE="0", ZL_ENABLE_MM_CLUSTER="1")
    assert res.returncode == 0, res.explain()
    assert "[mm-cluster-fix-plugin] not live: HAS_TLE is false in flag_gems.ops.mm" in res.log_text
    assert json.loads((res.out_dir / "run_identity.json").read_text())["mm_cluster_fix"] == "not_live"
