"""conftest of the fake FlagGems benchmark suite: same options and hooks as upstream.

Before anything imports Triton kernels, install the CPU timing driver from
tests/harness when the interpreter is on and no GPU driver is active, so runs
through run_pytest.sh time on the CPU with no extra flags.
"""
import importlib.util
import json
import logging
import os
import sys
from pathlib import Path

import pytest
import torch
import yaml


def _install_cpu_driver_if_needed():
    if os.environ.get("TRITON_INTERPRET", "0") != "1":
        return
    path = Path(__file__).resolve().parents[2] / "harness" / "cpu_driver.py"
    spec = importlib.util.spec_from_file_location("zl_harness_cpu_driver", path)
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    if not module.gpu_driver_available():
        module.install()


_install_cpu_driver_if_needed()

import flag_gems  # noqa: E402
from flag_gems.runtime import torch_device_fn  # noqa: E402

from . import consts  # noqa: E402

device = flag_gems.device
vendor_name = flag_gems.vendor_name
recordLogger = logging.getLogger("flag_gems_benchmark")
recordLogger.propagate = False
Config = None

BUILTIN_MARKS = ("parametrize", "skip", "skipif", "xfail", "usefixtures",
                 "filterwarnings", "timeout", "tryfirst", "trylast")
REGISTERED_MARKS = set()
TEST_RESULTS = {}
REPORT_FILE = "benchmark_result.json"


def update_result(op, data):
    if not Config.record_json:
        return
    TEST_RESULTS.setdefault(op, {}).setdefault("details", []).append(data)


def emit_record_logger(message) -> None:
    if Config.record_log:
        recordLogger.info(message)


class BenchConfig:
    def __init__(self):
        self.mode = consts.BenchMode.KERNEL
        self.bench_level = consts.BenchLevel.COMPREHENSIVE
        self.warm_up = consts.DEFAULT_WARMUP_TIME
        self.repetition = consts.DEFAULT_ITER_TIME
        self.record_log = False
        self.record_json = False
        self.user_desired_dtypes = None
        self.user_desired_metrics = None
        self.shape_file = os.path.join(os.path.dirname(__file__), "core_shapes.yaml")
        self.query = False
        self.parallel = 0


def _dtype_choices():
    dtypes = consts.FLOAT_DTYPES + consts.INT_DTYPES + consts.BOOL_DTYPES + [torch.cfloat]
    return [str(d).split(".")[-1] for d in dtypes]


def pytest_addoption(parser):
    parser.addoption("--mode", action="store", default="kernel",
                     choices=[m.value for m in consts.BenchMode],
                     help="How to measure latency: kernel, operator, wrapper or cudagraph.")
    parser.addoption("--level", action="store", default="comprehensive",
                     choices=[lv.value for lv in consts.BenchLevel],
                     help="Benchmark level: comprehensive or core.")
    parser.addoption("--warmup", default=consts.DEFAULT_WARMUP_TIME,
                     help="Time(ms) of warmup runs before benchmark run.")
    parser.addoption("--iter", default=consts.DEFAULT_ITER_TIME,
                     help="Time(ms) of reps for each benchmark run.")
    parser.addoption("--query", action="store_true", default=False, help="Enable query mode")
    parser.addoption("--metrics", action="append", default=None,
                     choices=sorted(consts.ALL_AVAILABLE_METRICS),
                     help="Metrics to benchmark.")
    parser.addoption("--dtypes", action="append", default=None, choices=_dtype_choices(),
                     help="Data types to benchmark.")
    parser.addoption("--shape_file", action="store",
                     default=os.path.join(os.path.dirname(__file__), "core_shapes.yaml"),
                     help="Shape file for benchmarks.")
    try:
        parser.addoption("--record", action="store", default="none",
                         choices=["none", "log", "json"],
                         help="Benchmark info recorded in log/json files or not")
        parser.addoption("--output", default=REPORT_FILE, help="Path to report file for JSON output")
    except ValueError:
        pass
    parser.addoption("--parallel", action="store", type=int, default=0,
                     help="Parallel benchmark across N devices (read by parallel tests only).")
    try:
        parser.addoption("--collect-marks", default=None,
                         help="Collect the tests with marker information into this file")
    except ValueError:
        pass


def pytest_configure(config):
    global Config, REPORT_FILE, REGISTERED_MARKS
    Config = BenchConfig()
    REGISTERED_MARKS = {m.split(":")[0].strip() for m in config.getini("markers")}
    Config.mode = consts.BenchMode(config.getoption("--mode"))
    Config.query = config.getoption("--query")
    Config.bench_level = consts.BenchLevel(config.getoption("--level"))
    Config.warm_up = int(config.getoption("--warmup"))
    Config.repetition = int(config.getoption("--iter"))
    names = config.getoption("--dtypes")
    Config.user_desired_dtypes = [getattr(torch, n) for n in names] if names else names
    Config.user_desired_metrics = config.getoption("--metrics")
    Config.shape_file = config.getoption("--shape_file")
    Config.record_log = config.getoption("--record") == "log"
    Config.record_json = config.getoption("--record") == "json"
    Config.parallel = int(config.getoption("--parallel") or 0)
    if Config.record_json:
        REPORT_FILE = Config.output = config.getoption("--output")
    if Config.record_log:
        parts = [a.replace(".py", "").replace("=", "_").replace("/", "_")
                 for a in config.invocation_params.args]
        log_file = "result_{}.log".format("_".join(parts)).replace("_-", "-")
        for h in list(recordLogger.handlers):
            recordLogger.removeHandler(h)
            h.close()
        handler = logging.FileHandler(log_file, mode="w", encoding="utf-8")
        handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
        recordLogger.addHandler(handler)
        recordLogger.setLevel(logging.INFO)
        emit_record_logger("Benchmark record logger enabled")


@pytest.fixture(scope="session", autouse=True)
def setup_once(request):
    if request.config.getoption("--query"):
        print("\nThis is query mode; all benchmark functions will be skipped.")


@pytest.fixture(scope="function", autouse=True)
def clear_function_cache():
    yield
    torch_device_fn.empty_cache()


@pytest.fixture(scope="module", autouse=True)
def clear_module_cache():
    yield
    torch_device_fn.empty_cache()


def get_reason(report):
    if hasattr(report.longrepr, "reprcrash"):
        return report.longrepr.reprcrash.message
    if isinstance(report.longrepr, tuple):
        return report.longrepr[2]
    return str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    out = yield
    report = out.get_result()
    marks = [m.name for m in item.iter_markers() if m.name not in BUILTIN_MARKS]
    # The first non-builtin mark is the operator's id, as upstream assumes.
    report.opid = marks[0] if marks else item.nodeid


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    if not Config.record_json:
        return
    entry = TEST_RESULTS.setdefault(report.opid, {})
    if report.when == "setup" and report.outcome == "skipped":
        entry.update(result="skipped", reason=get_reason(report), test_case=report.nodeid)
    elif report.when == "call":
        entry.update(result=report.outcome, test_case=report.nodeid,
                     reason=get_reason(report) if report.outcome in ("skipped", "failed") else None)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not Config.record_json:
        return
    data = TEST_RESULTS
    if os.path.exists(REPORT_FILE):
        with open(REPORT_FILE) as f:
            data = {**json.load(f), **TEST_RESULTS}
    with open(REPORT_FILE, "w") as f:
        json.dump(data, f, indent=2, default=str)


def pytest_collection_modifyitems(session, config, items):
    marks_file = config.getoption("--collect-marks")
    if not marks_file:
        return
    report = []
    for item in items:
        data = {"test_case": item.name, "file": item.location[0]}
        if item.cls:
            data["class"] = item.cls.__name__
        if item.originalname:
            data["function"] = item.originalname
        data["marks"] = [m.name for m in item.iter_markers()
                         if m.name not in BUILTIN_MARKS and m.name not in REGISTERED_MARKS]
        report.append(data)
    with open(marks_file, "w") as f:
        yaml.dump(report, f, indent=2)
    items.clear()
