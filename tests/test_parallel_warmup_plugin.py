"""Parallel autotune sweep (`_parallel_warmup_plugin` over `zl.warmup`).

Step-back reasons are checked in-process against a stand-in pytest config; the
sweep itself runs for real through run_pytest.sh on the fake FlagGems tree, with
devices faked by ZL_PARALLEL_DEVICES and shards as real CPU subprocesses.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import _parallel_warmup_plugin as pw
from harness.pluginconfig import PluginConfig
from zl.backends import get_backend
from zl.warmup import DEVICES_ENV, GPUS_ENV, WORKER_ENV
from zl.warmup.plan import Plan, StepBack, make_plan, requested_gpus
from zl.warmup.shards import child_argv, merge, shard
from zl.warmup.sweep import shard_jobs
from zl.warmup.yamlkeys import read_shapes, yaml_key_candidates

FAKE = Path(__file__).resolve().parent / "fake_flaggems"
SWEEP_TEST = FAKE / "benchmark" / "test_zl_autotune_sweep.py"
SCALE = "benchmark.test_zl_autotune_sweep.zl_scale_kernel"
GLOBAL = "benchmark.test_zl_autotune_sweep.zl_global_kernel"
SHAPES = "zl_sweep:\n  shapes:\n    - [64]\n    - [128]\n    - [192]\n    - [256]\n    - [320]\n"


@pytest.fixture
def plan_env(tmp_path, monkeypatch):
    for k in ("FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR", "ZL_BENCH_LEVEL", "ZL_SHAPE_FILE",
              "CUDA_VISIBLE_DEVICES", WORKER_ENV, "OUT_DIR"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR", str(tmp_path / "rec"))
    monkeypatch.setenv("ZL_OP", "zl_sweep")
    monkeypatch.setenv("ZL_BACKEND", "cuda")
    monkeypatch.setenv(DEVICES_ENV, "0,1")
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text(SHAPES)
    return shapes


def plan(shape_file, level="core", args=None, plugins=("_autotune_record_plugin",)):
    args = args if args is not None else [f"{SWEEP_TEST}::test_zl_sweep"]
    config = PluginConfig(pw, {"level": level, "shape_file": str(shape_file)}, args, plugins, cwd=FAKE)
    p = make_plan(pw.WarmupControl(config, get_backend(), 2).facts())
    return p.op, p.doc, p.key, p.shapes, p.devices


def test_plan_accepts_a_core_run_with_two_devices(plan_env):
    op, doc, key, shapes, devices = plan(plan_env)
    assert (op, key, len(shapes), devices) == ("zl_sweep", "zl_sweep", 5, ["0", "1"])


@pytest.mark.parametrize("setup,code,wording", [
    (lambda m, p: None, "bench_level", "--level comprehensive merges shapes this plugin cannot enumerate"),
    (lambda m, p: m.setenv("FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR", "/x"), "replay", "REPLAY_FROM is set"),
    (lambda m, p: m.setenv(DEVICES_ENV, "3"), "few_devices", "only 1 device(s) visible (3)"),
    (lambda m, p: p.write_text("zl_sweep:\n  shapes:\n    - [64]\n"), "few_shapes",
     "only 1 shape(s) under yaml key 'zl_sweep'; sharding would not pay off"),
    (lambda m, p: p.write_text("softmax:\n  shapes:\n    - [4, 64]\n    - [8, 8]\n"), "no_yaml_entry",
     "no yaml entry for 'zl_sweep'"),
    (lambda m, p: m.delenv("FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR"), "no_record_dir", "nowhere to publish"),
])
def test_each_step_back_has_its_own_wording(plan_env, monkeypatch, setup, code, wording):
    setup(monkeypatch, plan_env)
    level = "comprehensive" if code == "bench_level" else "core"
    with pytest.raises(StepBack) as info:
        plan(plan_env, level=level)
    assert info.value.code == code and wording in str(info.value)


def test_no_yaml_entry_lists_the_class_chain_it_tried(plan_env):
    plan_env.write_text("softmax:\n  shapes:\n    - [4, 64]\n    - [8, 8]\n")
    with pytest.raises(StepBack) as info:
        plan(plan_env)
    assert "tried: zl_sweep, GenericBenchmark, Benchmark" in str(info.value)


def test_missing_autotune_plugin_steps_back(plan_env):
    with pytest.raises(StepBack) as info:
        plan(plan_env, plugins=())
    assert info.value.code == "no_autotune_plugin"


def test_blas_ops_reach_their_shapes_through_the_class_chain(tmp_path):
    """mm has no `mm:` key upstream; set_shapes finds `BlasBenchmark:` on the MRO."""
    test_mm = FAKE / "benchmark" / "test_mm.py"
    cands = yaml_key_candidates(test_mm, "mm")
    assert cands[:2] == ["mm", "BlasBenchmark"] and "Benchmark" in cands
    doc, key, shapes = read_shapes(str(FAKE / "benchmark" / "core_shapes.yaml"), cands)
    assert key == "BlasBenchmark" and len(shapes) == 2


def test_backward_benchmarks_use_the_backward_key(tmp_path):
    mod = tmp_path / "test_x.py"
    mod.write_text("from . import base\n"
                   "def test_softmax_backward():\n"
                   "    base.UnaryReductionBenchmark(op_name='softmax', is_backward=True).run()\n")
    assert yaml_key_candidates(mod, "softmax_backward")[0] == "softmax_backward"


def test_unset_or_below_two_is_silent(monkeypatch, capfd):
    for raw in ("", "1", "0"):
        monkeypatch.setenv(GPUS_ENV, raw)
        config = PluginConfig(pw)
        pw.pytest_configure(config)  # not active: registers nothing, says nothing
        assert config.pluginmanager.get_plugin(pw.NAME) is None
    assert capfd.readouterr().err == ""
    assert requested_gpus("two", pw._log) == 0
    assert "not an integer" in capfd.readouterr().err


def test_round_robin_shards_and_merge_counts_conflicts():
    assert shard([1, 2, 3, 4, 5], 2) == [[1, 3, 5], [2, 4]]
    a = {"k": {"1": {"w": 1}, "g": {"w": 1}}}
    b = {"k": {"2": {"w": 2}, "g": {"w": 2}}, "k2": {"x": {"w": 0}}}
    merged, total, conflicts = merge([a, b])
    assert merged["k"] == {"1": {"w": 1}, "2": {"w": 2}, "g": {"w": 1}}  # lowest shard wins
    assert (total, conflicts) == (4, 1)


def test_child_argv_replaces_the_shape_file():
    args = ["t.py::test_x", "-p", "_a", "--shape_file", "old.yaml", "--shape_file=o2", "--level", "core"]
    assert child_argv(args, "new.yaml") == ["t.py::test_x", "-p", "_a", "--level", "core",
                                                "--shape_file", "new.yaml"]
    # The shard's own record dir, OUT_DIR, device and worker flag come from its own run
    # configuration: the parent's command-line values (its --zl-config too) would send every
    # shard's records into the parent's run.
    args = ["t.py", "--zl-autotune-record-dir", "/run/a", "--zl-out-dir=/run", "--zl-op", "mm",
            "--zl-parallel-warmup-gpus", "2", "--zl-shape-file", "s.yaml", "--zl-config",
            "/run/run_config.json", "--zl-device=3", "--zl-ttgir-dump-dir", "/run/ttgir"]
    assert child_argv(args, "new.yaml") == ["t.py", "--zl-op", "mm", "--shape_file", "new.yaml"]


def test_shards_respect_an_inherited_device_selection(monkeypatch, tmp_path):
    monkeypatch.delenv(DEVICES_ENV, raising=False)
    monkeypatch.setenv("ZL_BACKEND", "cuda")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    config = PluginConfig(pw, {"level": "core", "shape_file": ""}, cwd=FAKE)
    assert pw.WarmupControl(config, get_backend(), 2).facts().devices == ["5", "6"]
    doc = {"zl_sweep": {"shapes": [[64], [128]]}}
    jobs = shard_jobs(Plan("zl_sweep", doc, "zl_sweep", [[64], [128]], ["5", "6"]), [[[64]], [[128]]],
                      tmp_path, ["t.py"], FAKE, get_backend(),
                      {"CUDA_VISIBLE_DEVICES": "5,6", "HIP_VISIBLE_DEVICES": "1"})
    env = jobs[1].env
    assert env["CUDA_VISIBLE_DEVICES"] == "6" and "HIP_VISIBLE_DEVICES" not in env
    # Each shard reads its own run configuration: its directory, device, shapes, record dir.
    from zl import config as zc
    cmd = jobs[1].cmd
    assert cmd.count(zc.OPTION) == 1
    shard_cfg = zc.load(cmd[cmd.index(zc.OPTION) + 1])
    assert (shard_cfg.out_dir, shard_cfg.device, shard_cfg.parallel_worker) == (str(tmp_path / "shard1"), "6", "1")
    assert shard_cfg.record_dir == str(tmp_path / "shard1" / "autotune_records") and shard_cfg.replay_dir == ""
    assert shard_cfg.shape_file == str(tmp_path / "shard1" / "shapes.yaml")
    # Isolated: each shard its own tuner store, in its environment and its configuration.
    iso = shard_jobs(Plan("zl_sweep", doc, "zl_sweep", [[64], [128]], ["5", "6"]), [[[64]], [[128]]],
                     tmp_path / "iso", ["t.py"], FAKE, get_backend(), {}, isolate=True)
    store = tmp_path / "iso" / "shard0" / "flaggems_cache"
    assert iso[0].env["FLAGGEMS_CACHE_DIR"] == str(store)
    assert iso[0].env["FLAGGEMS_DB_URL"] == f"sqlite:///{store}/config_cache/zl_shard.db"
    assert zc.load(iso[0].cmd[-1]).tuner_cache_dir == str(store)


# ----------------------------------------------------------------- end to end

def _records(result):
    return json.loads((result.out_dir / "autotune_records" / "zl_sweep.json").read_text())


def _trace(path):
    return [ln.split() for ln in path.read_text().splitlines()] if path.is_file() else []


def _table(result):
    return [ln.split()[0] + " " + ln.split("[", 1)[1] for ln in result.log_text.splitlines()
            if ln.startswith("SUCCESS")]


def test_sweep_on_three_fake_devices_merges_and_counts_a_planted_conflict(zl_run, tmp_path):
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text(SHAPES)
    trace = tmp_path / "trace.txt"
    common = dict(OP="zl_sweep", OP_FILE="zl_autotune_sweep", SHAPE_FILE=str(shapes),
                  ZL_ENABLE_IR="0", ZL_ISOLATE_TUNER_CACHE="1")
    par = zl_run(PARALLEL_WARMUP_GPUS="3", ZL_PARALLEL_DEVICES="0,1,2",
                 ZL_TEST_PLANT_CONFLICT="1", ZL_TEST_SWEEP_TRACE=str(trace), **common)
    assert par.returncode == 0, par.explain()
    out = par.output
    assert "sweeping 5 shapes (yaml key 'zl_sweep') on 3 devices ['0', '1', '2'] (shards: [2, 2, 1])" in out
    assert "WARNING 1 config key(s) got different winners across shards" in out
    assert "AUTOTUNE_REPLAY_FALLBACK" not in out
    # Round-robin: device i swept shapes i, i+3; the measuring process tuned nothing.
    swept = {(d, n) for d, k, n in _trace(trace) if k == "zl_scale_kernel"}
    assert swept == {("0", "64"), ("0", "256"), ("1", "128"), ("1", "320"), ("2", "192")}
    recs = _records(par)
    assert set(recs[SCALE]) == {f"{n},torch.float32,torch.float32" for n in (64, 128, 192, 256, 320)}
    assert recs[GLOBAL]["7,torch.float32,torch.float32"]["kwargs"] == {"BLOCK": 32}  # shard 0's
    ident = json.loads((par.out_dir / "run_identity.json").read_text())
    assert ident["autotune_mode"] == "record"
    assert ident["autotune_sweep"] == "parallel:3" and ident["autotune_sweep_conflicts"] == 1

    # Without the plugin: the same records for the conflict-free kernel and the same table rows.
    ser = zl_run(**common)
    assert ser.returncode == 0, ser.explain()
    assert _records(ser)[SCALE] == recs[SCALE]
    assert _table(ser) == _table(par) and len(_table(par)) == 5
    assert sorted(p.name for p in ser.out_dir.iterdir()) == sorted(p.name for p in par.out_dir.iterdir())


def test_a_failing_shard_discards_the_sweep(zl_run, tmp_path):
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text(SHAPES)
    trace = tmp_path / "trace.txt"
    res = zl_run(OP="zl_sweep", OP_FILE="zl_autotune_sweep", SHAPE_FILE=str(shapes), ZL_ENABLE_IR="0",
                 PARALLEL_WARMUP_GPUS="2", ZL_PARALLEL_DEVICES="0,1", ZL_TEST_FAIL_DEVICE="1",
                 ZL_TEST_SWEEP_TRACE=str(trace))
    assert res.returncode == 0, res.explain()
    out = res.output
    assert "shard(s) [1] exited non-zero" in out and "falling back to normal serial autotune" in out
    kept = out.split("worker logs kept in ", 1)[1].split(")", 1)[0]
    try:
        assert "planted failure on device 1" in (Path(kept) / "shard1" / "worker.log").read_text()
    finally:
        shutil.rmtree(kept, ignore_errors=True)
    # The serial measurement tuned every shape itself (device '-': nothing pinned).
    assert {n for d, k, n in _trace(trace) if d == "-" and k == "zl_scale_kernel"} == \
        {"64", "128", "192", "256", "320"}
    ident = json.loads((res.out_dir / "run_identity.json").read_text())
    assert ident["autotune_sweep"] == "serial" and ident["autotune_sweep_reason"] == "shard_failed"
    assert len(_records(res)[SCALE]) == 5


# ------------------------------------------------- structure and lifetime

REPO = Path(__file__).resolve().parents[1]


def test_help_lists_both_plugins_options_in_the_zl_bench_group(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider",
                          "-p", "_autotune_record_plugin", "-p", "_parallel_warmup_plugin"],
                         cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout.split("zl_bench", 1)[1]
    for flag, variable in [("--zl-autotune-record-dir", "FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR"),
                           ("--zl-autotune-replay-dir", "FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR"),
                           ("--zl-parallel-warmup-gpus", "PARALLEL_WARMUP_GPUS"),
                           ("--zl-parallel-devices", "ZL_PARALLEL_DEVICES"),
                           ("--zl-parallel-warmup-timeout", "ZL_PARALLEL_WARMUP_TIMEOUT"),
                           ("--zl-parallel-worker", "ZL_PARALLEL_WORKER"),
                           ("--zl-isolate-tuner-cache", "ZL_ISOLATE_TUNER_CACHE"),
                           ("--zl-op", "ZL_OP"), ("--zl-out-dir", "OUT_DIR")]:
        assert flag in text and f"env {variable};" in " ".join(text.split()), flag


def test_neither_plugin_imports_another_plugin():
    for name in ("_autotune_record_plugin.py", "_parallel_warmup_plugin.py"):
        tree = ast.parse((REPO / name).read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not [m for m in imported if m.split(".")[0].endswith("_plugin")
                    or m in ("plugin_plan", "zl.plan")], (name, imported)


def test_an_active_sweep_registers_and_leaves_no_hand_over_behind(plan_env, monkeypatch, tmp_path):
    """A bad timeout steps back by name; the object is registered only while active."""
    monkeypatch.setenv(GPUS_ENV, "2")
    monkeypatch.setenv("ZL_PARALLEL_WARMUP_TIMEOUT", "0")
    monkeypatch.setenv("OUT_DIR", str(tmp_path / "run"))
    config = PluginConfig(pw, {"level": "core", "shape_file": str(plan_env)},
                          [f"{SWEEP_TEST}::test_zl_sweep"], ["_autotune_record_plugin"], cwd=FAKE)
    pw.pytest_configure(config)
    ident = json.loads((tmp_path / "run" / "run_identity.json").read_text())
    assert ident["autotune_sweep"] == "serial" and ident["autotune_sweep_reason"] == "bad_timeout"
    plugin = config.pluginmanager.get_plugin(pw.NAME)
    assert isinstance(plugin, pw.WarmupControl)
    # A sweep that stepped back hands nothing over (the stash is the session's own).
    from zl.autotune.options import PRESWEPT, preswept
    assert PRESWEPT not in config.stash and not preswept(config)
    pw.pytest_unconfigure(config)
    assert config.pluginmanager.get_plugin(pw.NAME) is None
    assert not any(k.startswith("ZL_AUTOTUNE") for k in os.environ)


def test_a_worker_never_sweeps(plan_env, monkeypatch):
    monkeypatch.setenv(GPUS_ENV, "2")
    monkeypatch.setenv(WORKER_ENV, "1")
    config = PluginConfig(pw)
    pw.pytest_configure(config)
    assert config.pluginmanager.get_plugin(pw.NAME) is None


def test_a_hanging_shard_is_killed_at_the_sweep_timeout(zl_run, tmp_path):
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text(SHAPES)
    pidfile = tmp_path / "hung.pid"
    res = zl_run(OP="zl_sweep", OP_FILE="zl_autotune_sweep", SHAPE_FILE=str(shapes), ZL_ENABLE_IR="0",
                 PARALLEL_WARMUP_GPUS="2", ZL_PARALLEL_DEVICES="0,1", ZL_TEST_HANG_DEVICE="1",
                 ZL_TEST_HANG_PIDFILE=str(pidfile), ZL_PARALLEL_WARMUP_TIMEOUT="40")
    assert res.returncode == 0, res.explain()
    # Shard 0 sweeps for real (seconds on an idle machine); on a loaded one it may overrun the limit
    # too, and is then named beside the hanging shard: both ways the sweep falls back.
    assert re.search(r"shard\(s\) \[(0, )?1\] still running after the 40s sweep limit", res.output), \
        res.output
    assert pidfile.is_file(), "the hanging shard never reached its operator before the limit"
    pid = int(pidfile.read_text())
    assert not Path(f"/proc/{pid}").exists() or \
        Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    ident = json.loads((res.out_dir / "run_identity.json").read_text())
    assert ident["autotune_sweep"] == "serial" and ident["autotune_sweep_reason"] == "shard_timeout"
    assert len(_records(res)[SCALE]) == 5  # the serial measurement tuned every shape itself
    kept = res.output.split("worker logs kept in ", 1)[1].split(")", 1)[0]
    shutil.rmtree(kept, ignore_errors=True)
