"""Benchmark classes of the fake suite; same API and behaviour as upstream base.py.

Behaviours zl_bench depends on and this module keeps:
- `set_shapes(path)`: look up `op_name`, then each class name along the MRO,
  then `DEFAULT_SHAPES`; the yaml replaces shapes, it never merges; at
  comprehensive level `set_more_shapes()` is appended.
- `set_dtypes`: an unsupported requested dtype raises upstream's ValueError text.
- `get_latency`: kernel mode looks `triton.testing.do_bench` up AT CALL TIME
  (so a monkeypatch reaches it) with `return_mode="median"`; cudagraph mode
  calls `triton.testing.do_bench_cudagraph`.
- `run()`: a shape whose measurement raises calls `pytest.fail` before the
  table is printed, so no FAILED row ever appears.
"""
import gc
import os
import time
from dataclasses import asdict
from typing import Generator, List, Optional

import pytest
import torch
import triton
import yaml

import flag_gems
from flag_gems.utils import shape_utils

from . import consts
from .conftest import Config, emit_record_logger, update_result
from .consts import BenchmarkMetrics, BenchmarkResult, OperationAttribute, check_metric_dependencies

torch_device_fn = flag_gems.runtime.torch_device_fn
device = flag_gems.device
vendor_name = flag_gems.vendor_name


def _host_loop_latency(fn, sync_after_loop: bool) -> float:
    """operator / wrapper modes: time a Python loop sized from a 5-call estimate."""
    def timed(n):
        torch_device_fn.synchronize()
        start = time.time()
        for _ in range(n):
            fn()
        if sync_after_loop:
            torch_device_fn.synchronize()
        end = time.time()
        torch_device_fn.synchronize()
        return (end - start) / n * 1000

    estimate = max(timed(5), 1e-6)
    n_warm = max(1, int(Config.warm_up / estimate))
    n_rep = max(1, int(Config.repetition / estimate))
    for _ in range(n_warm):
        fn()
    return timed(n_rep)


class Benchmark:
    device: str = device
    DEFAULT_METRICS = consts.DEFAULT_METRICS
    DEFAULT_DTYPES = consts.FLOAT_DTYPES
    DEFAULT_SHAPES = consts.DEFAULT_SHAPES
    DEFAULT_SHAPE_DESC = "M, N"
    DEFAULT_SHAPE_FILES = "core_shapes.yaml"

    def __init__(self, op_name, torch_op, dtypes=None, is_backward=False, is_inplace=False, **kwargs):
        self.op_name = op_name
        if is_backward and "_backward" not in self.op_name:
            self.op_name += "_backward"
        self.torch_op = torch_op
        self.gems_op = kwargs.get("gems_op")
        self.is_backward = is_backward
        self.is_inplace = is_inplace
        self._input_iter = None
        self.dtypes = dtypes if dtypes is not None else self.DEFAULT_DTYPES
        self.metrics = self.DEFAULT_METRICS
        self.shapes = self.DEFAULT_SHAPES
        self.shape_desc = self.DEFAULT_SHAPE_DESC
        self.shape_file = self.DEFAULT_SHAPE_FILES
        self.to_bench_dtypes = self.dtypes
        self.to_bench_metrics = self.metrics
        for k, v in kwargs.items():
            if hasattr(self, k):
                setattr(self, k, v)

    # -- configuration -------------------------------------------------------
    def set_metrics(self, user_desired_metrics: Optional[List[str]]):
        if user_desired_metrics:
            invalid = [m for m in user_desired_metrics if m not in self.metrics]
            if invalid:
                raise ValueError(f"Invalid metrics: {', '.join(invalid)} for operation: '{self.op_name}'")
            unsatisfied = check_metric_dependencies(user_desired_metrics)
            if unsatisfied:
                raise ValueError(f"Unsatisfied metric dependencies: {', '.join(unsatisfied)}")
        self.to_bench_metrics = user_desired_metrics or self.metrics
        if Config.bench_level == consts.BenchLevel.COMPREHENSIVE and not Config.query:
            for metric in self.set_more_metrics():
                if metric not in self.to_bench_metrics:
                    self.to_bench_metrics.append(metric)

    def set_more_metrics(self):
        return []

    def set_dtypes(self, user_desired_dtypes):
        if user_desired_dtypes:
            invalid = [d for d in user_desired_dtypes if d not in self.dtypes]
            if invalid:
                # Byte-identical to upstream, including the missing space before "can't".
                raise ValueError(
                    f"Given dtype(s) '{', '.join(str(d) for d in invalid)}'"
                    f"can't be supported by this op '{self.op_name}'"
                )
        self.to_bench_dtypes = user_desired_dtypes or self.dtypes

    def set_shapes(self, shape_file_path=None):
        if not os.path.isfile(shape_file_path):
            raise FileNotFoundError(f"Shape file '{shape_file_path}' does not exist.")
        try:
            with open(shape_file_path) as f:
                table = yaml.safe_load(f) or {}
        except yaml.YAMLError as e:
            raise ValueError(f"Shape file '{shape_file_path}' is not a valid YAML file. Error: {e}")
        candidates = [self.op_name] + [cls.__name__ for cls in type(self).__mro__]
        entry = next((table[c] for c in candidates if c in table), None)
        if entry is None:
            self.shapes = self.DEFAULT_SHAPES
        else:
            self.shapes = entry.get("shapes", self.DEFAULT_SHAPES)
            self.shape_desc = entry.get("shape_desc", self.DEFAULT_SHAPE_DESC)
        self.shapes = [tuple(s) for s in self.shapes]
        if Config.bench_level == consts.BenchLevel.COMPREHENSIVE and not Config.query:
            more = self.set_more_shapes()
            if more:
                self.shapes = list(dict.fromkeys(self.shapes + more))

    def set_more_shapes(self):
        return []

    def init_default_config(self):
        self.set_shapes(self.DEFAULT_SHAPE_FILES)

    def init_user_config(self):
        self.mode = Config.mode
        self.set_dtypes(Config.user_desired_dtypes)
        self.set_metrics(Config.user_desired_metrics)
        self.set_shapes(Config.shape_file)

    def set_gems(self, gems_op):
        self.gems_op = gems_op

    # -- measurement ---------------------------------------------------------
    def record_shapes(self, *args, **kwargs):
        def parse(item):
            if isinstance(item, torch.Tensor):
                return item.size()
            if isinstance(item, (int, float, str, torch.dtype)):
                return item
            if isinstance(item, (list, tuple)):
                return [parse(x) for x in item]
            if isinstance(item, dict):
                return {k: parse(v) for k, v in item.items()}
            return None

        parsed_args = [parse(a) for a in args]
        parsed_kwargs = {k: parse(v) for k, v in kwargs.items()}
        if parsed_args and parsed_kwargs:
            return parsed_args, parsed_kwargs
        return parsed_args if parsed_args else parsed_kwargs

    def get_latency(self, op, *args, **kwargs):
        fn = lambda: op(*args, **kwargs)  # noqa: E731
        xs = None
        if self.is_backward:
            out = fn()
            dout = torch.randn_like(out)
            xs = [a for a in args if torch.is_tensor(a) and a.requires_grad]
            fn = lambda: torch.autograd.grad((out,), xs, grad_outputs=(dout,), retain_graph=True)  # noqa: E731
        if Config.mode == consts.BenchMode.OPERATOR:
            return _host_loop_latency(fn, sync_after_loop=True)
        if Config.mode == consts.BenchMode.WRAPPER:
            return _host_loop_latency(fn, sync_after_loop=False)
        if Config.mode == consts.BenchMode.KERNEL:
            do_bench = triton.testing.do_bench  # looked up now: plugins patch it
            return do_bench(fn, warmup=Config.warm_up, rep=Config.repetition,
                            return_mode="median", grad_to_none=xs)
        if Config.mode == consts.BenchMode.CUDAGRAPH:
            do_bench_cudagraph = triton.testing.do_bench_cudagraph
            return do_bench_cudagraph(fn, rep=Config.repetition, return_mode="median", grad_to_none=xs)
        raise ValueError("Undefined Value of Benchmark Mode.")

    def get_gbps(self, args, latency=None):
        raise NotImplementedError("Each Benchmark must implement its own input iterator.")

    def get_tflops(self, op, *args, **kwargs):
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as counter:
            op(*args, **kwargs)
        return counter.get_total_flops()

    def get_input_iter(self, dtype) -> Generator:
        raise NotImplementedError("Each Benchmark must implement its own input iterator.")

    def unpack_to_args_kwargs(self, input_tuple):
        args, kwargs = [], {}
        for item in input_tuple:
            if isinstance(item, dict):
                kwargs.update(item)
            else:
                args.append(item)
        if self.is_backward:
            args = [a.clone().requires_grad_() if torch.is_tensor(a) and torch.is_floating_point(a) else a
                    for a in args]
        return args, kwargs

    def _measure(self, metric, args, kwargs):
        metric.shape_detail = self.record_shapes(*args, **kwargs)
        if "latency_base" in self.to_bench_metrics:
            metric.latency_base = self.get_latency(self.torch_op, *args, **kwargs)
        if "latency" in self.to_bench_metrics:
            if self.gems_op:
                metric.latency = self.get_latency(self.gems_op, *args, **kwargs)
            else:
                with flag_gems.use_gems(exclude=["zero_"]):
                    metric.latency = self.get_latency(self.torch_op, *args, **kwargs)
        if "speedup" in self.to_bench_metrics:
            metric.speedup = metric.latency_base / metric.latency
        if "gbps" in self.to_bench_metrics:
            metric.gbps_base = self.get_gbps(args, latency=metric.latency_base)
            metric.gbps = self.get_gbps(args, latency=metric.latency)
        if "tflops" in self.to_bench_metrics:
            metric.tflops = self.get_tflops(self.torch_op, *args, **kwargs) / metric.latency / 1e12 * 1e3

    def run(self):
        if Config.query:
            self.init_default_config()
            attri = OperationAttribute(op_name=self.op_name, recommended_core_shapes=self.shapes,
                                       shape_desc=self.shape_desc)
            print(attri)
            emit_record_logger(attri.to_dict())
            return
        self.init_user_config()
        for dtype in self.to_bench_dtypes:
            metrics = []
            input_iter = self.get_input_iter(dtype)
            while True:
                try:
                    inp = next(input_iter)
                except StopIteration:
                    break
                except Exception as e:
                    # Upstream prints this with only the first half as an f-string, so the
                    # text literally says "dtype={dtype} err=<<<{e}>>>"; kept identical.
                    print(f"\033[31mFAILED\033[0m: Operator={self.op_name} "
                          "dtype={dtype} err=<<<{e}>>>")
                    pytest.fail(str(e))
                metric = BenchmarkMetrics()
                try:
                    args, kwargs = self.unpack_to_args_kwargs(inp)
                    self._measure(metric, args, kwargs)
                except Exception as e:
                    metric.error_msg = str(e)
                    pytest.fail(str(e))  # before the table: no FAILED row is ever printed
                finally:
                    metrics.append(metric)
                    gc.collect()
            result = BenchmarkResult(level=Config.bench_level.value, op_name=self.op_name,
                                     dtype=str(dtype), mode=Config.mode.value, result=metrics)
            print(result)
            update_result(self.op_name, asdict(result))
            emit_record_logger(result.to_json())


def generate_tensor_input(shape, dtype, device):
    if dtype in consts.FLOAT_DTYPES or dtype in consts.COMPLEX_DTYPES:
        return torch.randn(shape, dtype=dtype, device=device)
    if dtype in consts.INT_DTYPES:
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max, shape, dtype=dtype, device=device)
    if dtype in consts.BOOL_DTYPES:
        return torch.randint(0, 2, size=shape, dtype=dtype, device=device)
    raise ValueError(f"unsupported dtype {dtype}")


def unary_input_fn(shape, cur_dtype, device):
    yield (generate_tensor_input(shape, cur_dtype, device),)


class GenericBenchmark(Benchmark):
    def __init__(self, *args, input_fn, **kwargs):
        super().__init__(*args, **kwargs)
        self.input_fn = input_fn

    def set_more_shapes(self):
        return [(4096,), (32, 128)]

    def get_input_iter(self, dtype) -> Generator:
        for shape in self.shapes:
            yield from self.input_fn(shape, dtype, self.device)


class UnaryReductionBenchmark(Benchmark):
    def set_more_metrics(self):
        return ["gbps"]

    def get_gbps(self, args, latency):
        inp = args[0]
        io_amount = 2 * shape_utils.size_in_bytes(inp)
        return io_amount * 1e-9 / (latency * 1e-3)

    def set_more_shapes(self):
        return [(2048,), (8, 512)]

    def get_input_iter(self, cur_dtype) -> Generator:
        for shape in self.shapes:
            inp = generate_tensor_input(shape, cur_dtype, self.device)
            yield (inp, 1) if inp.ndim > 1 else (inp,)


class UnaryPointwiseBenchmark(Benchmark):
    DEFAULT_METRICS = consts.DEFAULT_METRICS[:] + ["tflops"]

    def set_more_shapes(self):
        return [(1024, 4), (8, 8, 16)]

    def get_input_iter(self, cur_dtype) -> Generator:
        for shape in self.shapes:
            yield (generate_tensor_input(shape, cur_dtype, self.device),)

    def get_tflops(self, op, *args, **kwargs):
        return torch.tensor(list(args[0].shape)).prod().item()


class BlasBenchmark(Benchmark):
    DEFAULT_METRICS = consts.DEFAULT_METRICS[:] + ["tflops"]

    def __init__(self, *args, input_fn, **kwargs):
        super().__init__(*args, **kwargs)
        self.input_fn = input_fn

    def get_input_iter(self, dtype) -> Generator:
        for b, m, n, k in self.shapes:
            yield from self.input_fn(b, m, n, k, dtype, self.device, False)
        if Config.bench_level == consts.BenchLevel.COMPREHENSIVE:
            for b, m, n, k in self.shapes:
                yield from self.input_fn(b, m, n, k, dtype, self.device, True)

    def set_more_shapes(self):
        return [(1, 48, 40, 24)]

    def get_tflops(self, op, *args, **kwargs):
        if self.op_name == "mm":
            return args[0].shape[0] * args[0].shape[1] * args[1].shape[1] * 2
        return 0
