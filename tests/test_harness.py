"""Self-tests of the CPU harness: the fake FlagGems tree, the CPU driver, the runner."""
import importlib.util
import re
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from harness import cpu_driver as cpu_driver_mod
from harness import runner

TITLE_RE = re.compile(r"^Operator: (\S+)  Performance Test \(dtype=(\S+), mode=(\w+),level=(\w+)\)$", re.M)
ROW_RE = re.compile(r"^SUCCESS {3}(?: *\d+\.\d{6}){2} *\d+\.\d{3}.* {10}(\[.*)$", re.M)


def _load_consts(fake_dir):
    spec = importlib.util.spec_from_file_location("fake_bench_consts", fake_dir / "benchmark" / "consts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(text, op, dtype):
    """Size Detail strings of the table for (op, dtype)."""
    for block in re.split(r"\n(?=Operator: )", text):
        m = TITLE_RE.search(block)
        if m and m.group(1) == op and m.group(2) == dtype:
            return ROW_RE.findall(block)
    return None


# --------------------------------------------------------------- CPU driver
def test_cpu_driver_do_bench_measures_wall_time(cpu_driver):
    import triton.testing
    ms = triton.testing.do_bench(lambda: time.sleep(0.003), warmup=1, rep=10, return_mode="median")
    assert 2.9 <= ms < 30, ms


def test_cpu_driver_has_no_graph_type_and_uninstall_restores(monkeypatch):
    from triton.runtime import driver
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    before = driver._active
    drv = cpu_driver_mod.install()
    try:
        assert driver.active is drv and cpu_driver_mod.is_installed()
        assert cpu_driver_mod.install() is drv  # idempotent: no second save
        di = drv.get_device_interface()
        assert not hasattr(di, "CUDAGraph") and not hasattr(di, "graph")
        ev0, ev1 = di.Event(enable_timing=True), di.Event(enable_timing=True)
        with pytest.raises(RuntimeError, match="recorded"):
            ev0.elapsed_time(ev1)
        s = di.Stream()
        with di.stream(s):
            assert di.current_stream() is s
        assert di.current_stream() is not s
        assert str(drv.get_active_torch_device()) == "cpu"
    finally:
        cpu_driver_mod.uninstall()
    assert driver._active is before


def test_cpu_driver_runs_triton_autotuner_in_process(cpu_driver):
    import torch
    import triton
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"B": 32}), triton.Config({"B": 64})], key=["n"])
    @triton.jit
    def add_one(x_ptr, n, B: tl.constexpr):
        offs = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    x = torch.zeros(100)
    add_one[lambda m: (triton.cdiv(100, m["B"]),)](x, 100)
    assert add_one.best_config.kwargs["B"] in (32, 64)
    assert len(add_one.configs_timings) == 2
    # Autotuning runs the kernel once per benchmark call, so x was bumped many times.
    assert float(x[0]) >= 1 and bool((x == x[0]).all())


# ------------------------------------------------------------ result table
def test_result_table_text_is_upstream_byte_for_byte(fake_flaggems_dir):
    c = _load_consts(fake_flaggems_dir)
    m1 = c.BenchmarkMetrics(shape_detail=[[4, 8], 1], latency_base=0.5, latency=0.25, speedup=2.0,
                            tflops=1.5, gbps_base=3.0, gbps=None)
    m1.gbps = 6.0
    m2 = c.BenchmarkMetrics(shape_detail=None, latency_base=None, latency=0.1, speedup=None,
                            gbps_base=None, gbps=2.0)
    text = str(c.BenchmarkResult(op_name="softmax", dtype="torch.float16", mode="kernel",
                                 level="core", result=[m1, m2]))
    # Upstream joins the header cells with one space; the rows have no separator.
    header = " ".join(["Status    ", "  Torch Latency (ms)", "   Gems Latency (ms)", "        Gems Speedup",
                       "              TFLOPS", "         Torch GBPS ", "          Gems GBPS ",
                       "         Size Detail\n"])
    expected = (
        "\nOperator: softmax  Performance Test (dtype=torch.float16, mode=kernel,level=core)\n"
        + header + "-" * len(header) + "\n"
        + "SUCCESS   " + "            0.500000" + "            0.250000" + "               2.000"
        + "               1.500" + "               3.000" + "               6.000" + " " * 10 + "[[4, 8], 1]\n"
        + "SUCCESS   " + "                 N/A" + "            0.100000" + "                 N/A"
        + "                 N/A" + "               2.000" + " " * 10 + "N/A\n"
    )
    assert text == expected
    # No TFLOPS / GBPS columns when the first row has neither; error rows say FAILED.
    m3 = c.BenchmarkMetrics(latency_base=1.0, latency=1.0, speedup=1.0, error_msg="boom")
    plain = str(c.BenchmarkResult("abs", "torch.float32", "kernel", "core", [m3]))
    assert "TFLOPS" not in plain and "GBPS" not in plain
    assert plain.splitlines()[-1].startswith("FAILED    ")


# ----------------------------------------------- fake tree through pytest
def test_softmax_core_kernel_prints_upstream_tables(fake_pytest):
    p = fake_pytest("benchmark/test_softmax.py::test_softmax", "--level", "core", "--mode", "kernel")
    assert p.returncode == 0, p.stdout + p.stderr
    for dtype in ("torch.float16", "torch.float32"):
        assert f"\nOperator: softmax  Performance Test (dtype={dtype}, mode=kernel,level=core)\n" in p.stdout
        assert _rows(p.stdout, "softmax", dtype) == [
            "[torch.Size([4, 64]), 1]", "[torch.Size([8, 128]), 1]", "[torch.Size([4, 200]), 1]"]
    assert "GBPS" not in p.stdout  # gbps is a comprehensive-level metric
    assert "[fake-flag_gems] import GEMS_VENDOR=<unset> vendor=nvidia" in p.stderr


def test_kernel_mode_looks_up_do_bench_at_call_time(fake_pytest, tmp_path):
    plug = tmp_path / "plug"
    plug.mkdir()
    (plug / "_const_bench_plugin.py").write_text(textwrap.dedent("""
        import triton.testing
        _orig = triton.testing.do_bench
        def pytest_configure(config):
            def fixed(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
                assert return_mode == "median", return_mode
                fn()
                return 1.25
            triton.testing.do_bench = fixed
        def pytest_unconfigure(config):
            triton.testing.do_bench = _orig
    """))
    pythonpath = f"{runner.REPO_ROOT}:{runner.FAKE_FLAGGEMS_DIR / 'src'}:{plug}"
    p = fake_pytest("benchmark/test_abs.py::test_abs", "--level", "core", "-p", "_const_bench_plugin",
                    PYTHONPATH=pythonpath)
    assert p.returncode == 0, p.stdout + p.stderr
    body = p.stdout.split("Operator: abs", 1)[1]
    rows = [ln for ln in body.splitlines() if ln.startswith("SUCCESS")]
    assert len(rows) == 2
    assert all(ln.split()[1:4] == ["1.250000", "1.250000", "1.000"] for ln in rows), rows


def test_mm_shapes_come_from_class_chain_and_tflops_column(fake_pytest):
    p = fake_pytest("benchmark/test_mm.py::test_mm", "--level", "core", "--dtypes", "float32")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "TFLOPS" in p.stdout
    assert _rows(p.stdout, "mm", "torch.float32") == [
        "[torch.Size([32, 32]), torch.Size([32, 32])]", "[torch.Size([48, 32]), torch.Size([32, 32])]"]
    assert "dtype=torch.float16" not in p.stdout  # --dtypes narrowed the run


def test_shape_file_lookup_order_and_replacement(fake_pytest, tmp_path):
    # op_name beats class names; a class nearer in the MRO beats `Benchmark`;
    # the file replaces the default shapes (no merge with core_shapes.yaml).
    f1 = tmp_path / "s1.yaml"
    f1.write_text("UnaryReductionBenchmark:\n  shapes:\n    - [2, 16]\nBenchmark:\n  shapes:\n    - [3, 8]\n")
    f2 = tmp_path / "s2.yaml"
    f2.write_text("amax:\n  shapes:\n    - [5, 8]\nUnaryReductionBenchmark:\n  shapes:\n    - [2, 16]\n")
    p1 = fake_pytest("benchmark/test_softmax.py::test_softmax", "--level", "core", "--dtypes", "float32",
                     "--shape_file", str(f1))
    p2 = fake_pytest("benchmark/test_amax.py::test_amax", "--level", "core", "--shape_file", str(f2))
    assert p1.returncode == 0, p1.stdout + p1.stderr
    assert p2.returncode == 0, p2.stdout + p2.stderr
    assert _rows(p1.stdout, "softmax", "torch.float32") == ["[torch.Size([2, 16]), 1]"]
    assert _rows(p2.stdout, "amax", "torch.float32") == ["[torch.Size([5, 8]), 1]"]


def test_comprehensive_level_adds_shapes_and_gbps(fake_pytest):
    p = fake_pytest("benchmark/test_softmax.py::test_softmax", "--level", "comprehensive",
                    "--dtypes", "float32")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Torch GBPS " in p.stdout and "Gems GBPS " in p.stdout
    rows = _rows(p.stdout, "softmax", "torch.float32")
    assert rows[-2:] == ["[torch.Size([2048])]", "[torch.Size([8, 512]), 1]"]


def test_unsupported_dtype_raises_upstream_value_error(fake_pytest):
    p = fake_pytest("benchmark/test_abs.py::test_abs", "--level", "core", "--dtypes", "float16")
    assert p.returncode == 1
    assert ("ValueError: Given dtype(s) 'torch.float16'can't be supported by this op 'abs'"
            in p.stdout)
    assert "Operator: abs" not in p.stdout


def test_failing_shape_fails_test_before_any_table(fake_pytest):
    p = fake_pytest("benchmark/test_amax.py::test_amax", "--level", "core")
    assert p.returncode == 1
    assert "Failed: amax: row length 2048 exceeds the single-block limit 1024" in p.stdout
    assert "FAILED benchmark/test_amax.py::test_amax" in p.stdout
    assert "Operator: amax" not in p.stdout
    assert not re.search(r"^FAILED {4}", p.stdout, re.M)  # never a FAILED table row


def test_cudagraph_mode_on_cpu_fails_like_upstream_without_gpu(fake_pytest):
    p = fake_pytest("benchmark/test_softmax.py::test_softmax", "--level", "core", "--mode", "cudagraph")
    assert p.returncode == 1
    assert "FAILED benchmark/test_softmax.py::test_softmax" in p.stdout
    assert re.search(r"Failed: .*(CUDA|cuda)", p.stdout), p.stdout[-3000:]
    assert "Operator: softmax" not in p.stdout


# ----------------------------------------------------- flag_gems internals
def _py(code, tmp_path, **env):
    e = runner.base_env(tmp_path / "home", **env)
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True,
                          text=True, timeout=120, cwd=str(tmp_path))


_TUNER_PROBE = """
    import sys
    sys.path.insert(0, {harness!r})
    from harness import cpu_driver; cpu_driver.install()
    import torch, flag_gems
    from flag_gems.ops import gelu
    from flag_gems.utils.libentry import LibTuner
    calls = {{"run": 0, "bench": 0}}
    orig_run, orig_bench = LibTuner.run, LibTuner._bench
    def run(self, *a, **k):
        calls["run"] += 1; return orig_run(self, *a, **k)
    def bench(self, *a, **k):
        calls["bench"] += 1; return orig_bench(self, *a, **k)
    LibTuner.run, LibTuner._bench = run, bench
    x = torch.randn(700); dy = torch.randn(700)
    for _ in range(3):
        flag_gems.gelu_backward(dy, x)
    tuner = gelu.gelu_backward_kernel.fn
    key = tuner.get_key({{"n_elements": 700, "dy_ptr": dy, "x_ptr": x, "dx_ptr": x}})
    print("CALLS", calls["run"], calls["bench"], key in tuner.cache, tuner.cache[key].kwargs["BLOCK_SIZE"])
    print("DB", flag_gems.utils.libentry.libcache.path)
"""


def test_libtuner_sqlite_cache_and_libentry_skip(tmp_path):
    cache_dir = tmp_path / "fgcache"
    code = _TUNER_PROBE.format(harness=str(runner.REPO_ROOT / "tests"))
    first = _py(code, tmp_path, FLAGGEMS_CACHE_DIR=cache_dir)
    assert first.returncode == 0, first.stderr
    calls = first.stdout.split("CALLS ")[1].split()
    # One tuner run (miss: both configs benchmarked), then LibEntry skips the tuner.
    assert calls[:3] == ["1", "2", "True"], first.stdout
    import triton
    major, minor = triton.__version__.split(".")[:2]
    db = cache_dir / "config_cache" / f"TunedConfig_nvidia_triton_{major}_{minor}.db"
    assert f"DB {db}" in first.stdout
    rows = sqlite3.connect(db).execute("SELECT table_name, key FROM tuned_config").fetchall()
    assert len(rows) == 1 and rows[0][0].startswith("gelu_backward_kernel_")
    # A new process on the same store hits: the tuner runs but benchmarks nothing.
    second = _py(code, tmp_path, FLAGGEMS_CACHE_DIR=cache_dir)
    assert second.stdout.split("CALLS ")[1].split()[:3] == ["1", "0", "True"], second.stdout
    # FLAGGEMS_DB_URL wins over FLAGGEMS_CACHE_DIR; as upstream, its folder must exist (FlagGems
    # creates config_cache only for its default database; sqlite cannot open a file elsewhere).
    url_db = tmp_path / "elsewhere" / "t.db"
    missing = _py(code, tmp_path, FLAGGEMS_CACHE_DIR=cache_dir, FLAGGEMS_DB_URL=f"sqlite:///{url_db}")
    assert missing.returncode != 0 and "unable to open database file" in missing.stderr
    url_db.parent.mkdir()
    third = _py(code, tmp_path, FLAGGEMS_CACHE_DIR=cache_dir, FLAGGEMS_DB_URL=f"sqlite:///{url_db}")
    assert third.returncode == 0, third.stderr
    assert url_db.is_file() and f"DB {url_db}" in third.stdout


def test_vendor_detection_order_and_unknown_name(fake_flaggems_dir):
    path = fake_flaggems_dir / "src" / "flag_gems" / "runtime" / "backend" / "device_finder.py"
    spec = importlib.util.spec_from_file_location("fake_device_finder", path)
    df = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(df)
    assert df.detect_vendor({}) == "nvidia"
    assert df.detect_vendor({"FLAGGEMS_BACKEND": "NVIDIA"}) == "nvidia"
    # Upstream precedence: GEMS_VENDOR, FLAGGEMS_VENDOR, GEMS_BACKEND, FLAGGEMS_BACKEND.
    assert df.detect_vendor({"FLAGGEMS_VENDOR": "nvidia", "GEMS_VENDOR": "mthreads"}) == "mthreads"
    with pytest.raises(df.UnknownVendorError, match="GEMS_VENDOR='nosuch' is not a known vendor"):
        df.detect_vendor({"GEMS_VENDOR": "nosuch"})


def test_vendor_seen_at_import_and_foreign_module(tmp_path):
    code = """
        import sys
        import flag_gems
        print("VENDOR", flag_gems.vendor_name, flag_gems.import_env["GEMS_VENDOR"])
        print("LOADED", sorted(m for m in sys.modules if m.startswith("flag_gems.runtime.backend._")))
    """
    p = _py(code, tmp_path, GEMS_VENDOR="mthreads")
    assert p.returncode == 0, p.stderr
    assert "VENDOR mthreads mthreads" in p.stdout
    assert "LOADED ['flag_gems.runtime.backend._mthreads']" in p.stdout
    assert "[fake-flag_gems] import GEMS_VENDOR=mthreads vendor=mthreads" in p.stderr
    # test_exp.py imports another vendor's package on purpose (FOREIGN_VENDOR_MODULE fodder).
    probe = f"""
        import sys
        sys.path.insert(0, {str(runner.FAKE_FLAGGEMS_DIR)!r})
        import benchmark.test_exp, benchmark.performance_utils, benchmark.base, flag_gems
        assert benchmark.performance_utils.BlasBenchmark is benchmark.base.BlasBenchmark
        print("FOREIGN", flag_gems.vendor_name,
              sorted(m for m in sys.modules if m.startswith("flag_gems.runtime.backend._")))
    """
    q = _py(probe, tmp_path, TRITON_INTERPRET="1")
    assert q.returncode == 0, q.stderr
    assert ("FOREIGN nvidia ['flag_gems.runtime.backend._mthreads', 'flag_gems.runtime.backend._nvidia']"
            in q.stdout), q.stdout
    assert "[fake-flag_gems] import GEMS_VENDOR=<unset> vendor=nvidia" in q.stderr


def test_switch_env_changes_relu_kernel_path(tmp_path):
    code = f"""
        import sys
        sys.path.insert(0, {str(runner.REPO_ROOT / 'tests')!r})
        from harness import cpu_driver; cpu_driver.install()
        import importlib, torch, flag_gems
        relu = importlib.import_module("flag_gems.ops.relu")  # the package re-exports a function of that name
        seen = []
        orig = relu.relu_kernel.run
        def spy(*a, **k):
            seen.append(k["USE_SELECT"]); return orig(*a, **k)
        relu.relu_kernel.run = spy
        x = torch.randn(300)
        import os
        for value in ("0", "1"):  # read at every call, so one process sees both
            os.environ["ZL_TEST_SWITCH"] = value
            assert torch.equal(flag_gems.relu(x), torch.relu(x))
        print("SEEN", seen)
    """
    p = _py(code, tmp_path)
    assert "SEEN [False, True]" in p.stdout, p.stderr


# ------------------------------------------------------------- run_pytest.sh
def test_zl_run_softmax_through_run_pytest_sh(zl_run):
    r = zl_run(OP="softmax", OP_FILE="softmax", SHAPE_MODE="upstream")
    assert r.returncode == 0, r.explain()   # a plugin of the plan that is not importable is exit 2
    assert (r.out_dir / "run.log").is_file()
    assert "\nOperator: softmax  Performance Test (dtype=torch.float16, mode=kernel,level=core)\n" in r.log_text
    # _pretty_report_plugin may fold the constant `dim` argument out of Size Detail.
    rows = _rows(r.log_text, "softmax", "torch.float32")
    assert [re.match(r"\[torch\.Size\(\[[\d, ]*\]\)", row).group(0) for row in rows] == [
        "[torch.Size([4, 64])", "[torch.Size([8, 128])", "[torch.Size([4, 200])"], rows
