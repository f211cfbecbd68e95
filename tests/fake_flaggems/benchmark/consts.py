"""Constants and the result table of the fake benchmark suite.

`BenchmarkResult.__str__` reproduces upstream's table text byte for byte (title
line, header, dash rule, rows, N/A, optional TFLOPS / GBPS columns): zl_bench
parses that text, so it is an interface.
"""
from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import List, Optional, Tuple

import torch

FLOAT_DTYPES = [torch.float16, torch.float32, torch.bfloat16]
INT_DTYPES = [torch.int16, torch.int32]
BOOL_DTYPES = [torch.bool]
COMPLEX_DTYPES = [torch.complex64]

# THE one intended difference from upstream (1000 / 100 ms): the Triton
# interpreter is ~1e4x slower than a GPU, so full budgets would take minutes.
DEFAULT_WARMUP_TIME = 2
DEFAULT_ITER_TIME = 4

DEFAULT_SHAPES = [
    (1024,),
    (64, 64),
    (16, 256),
]


@dataclass
class BenchmarkMetrics:
    legacy_shape: Optional[int] = None
    shape_detail: Optional[Tuple[int, ...]] = None
    latency_base: Optional[float] = None
    latency: Optional[float] = None
    gbps_base: Optional[float] = None
    gbps: Optional[float] = None
    speedup: Optional[float] = None
    accuracy: Optional[float] = None
    tflops: Optional[float] = None
    utilization: Optional[float] = None
    compared_speedup: Optional[float] = None
    error_msg: Optional[str] = None


ALL_AVAILABLE_METRICS = {f.name for f in fields(BenchmarkMetrics)} - {"legacy_shape", "shape_detail"}
DEFAULT_METRICS = ["latency_base", "latency", "speedup"]

_METRIC_DEPENDENCIES = {"speedup": ["latency", "latency_base"], "utilization": ["latency", "tflops"]}


def check_metric_dependencies(requested: Optional[List[str]]) -> List[str]:
    """Metrics whose prerequisites do not appear earlier in `requested`."""
    if requested is None:
        return []
    seen, missing = set(), []
    for metric in requested:
        needs = _METRIC_DEPENDENCIES.get(metric, [])
        if all(n in seen for n in needs):
            seen.add(metric)
        else:
            missing.append(metric)
    return missing


class BenchMode(Enum):
    KERNEL = "kernel"
    OPERATOR = "operator"
    WRAPPER = "wrapper"
    CUDAGRAPH = "cudagraph"


class BenchLevel(Enum):
    COMPREHENSIVE = "comprehensive"
    CORE = "core"


@dataclass
class OperationAttribute:
    op_name: str
    recommended_core_shapes: List[Tuple[int, ...]]
    shape_desc: str

    def __str__(self) -> str:
        shapes_label = "Recommended Core Shapes[" + self.shape_desc + "]"
        return (f"{'Operator name':<40} |  {self.op_name}\n"
                f"{shapes_label:<40} |  {self.recommended_core_shapes}\n")

    def to_dict(self) -> dict:
        return self.__dict__


def _fmt(value, spec):
    return "N/A" if value is None else format(value, spec)


def _has_tflops(metrics: BenchmarkMetrics) -> bool:
    # Upstream tests truthiness: a 0.0 or None TFLOPS hides the column / cell.
    return bool(metrics.tflops)


@dataclass
class BenchmarkResult:
    op_name: str
    dtype: str
    mode: str
    level: str
    result: List[BenchmarkMetrics]

    def __str__(self) -> str:
        first = self.result[0]
        title = (f"\nOperator: {self.op_name}  Performance Test "
                 f"(dtype={self.dtype}, mode={self.mode},level={self.level})\n")
        cols = [format("Status", "<10")]
        cols += [format(c, ">20") for c in ("Torch Latency (ms)", "Gems Latency (ms)", "Gems Speedup")]
        if _has_tflops(first):
            cols.append(format("TFLOPS", ">20"))
        if first.gbps is not None:
            cols += [format("Torch GBPS ", ">20"), format("Gems GBPS ", ">20")]
        cols.append(format("Size Detail", ">20") + "\n")
        header = " ".join(cols)
        rule = "-" * len(header) + "\n"
        return title + header + rule + "".join(self._row(m) for m in self.result)

    @staticmethod
    def _row(m: BenchmarkMetrics) -> str:
        status = "SUCCESS" if m.error_msg is None else "FAILED"
        line = format(status, "<10")
        line += "".join(format(_fmt(v, s), ">20") for v, s in
                        ((m.latency_base, ".6f"), (m.latency, ".6f"), (m.speedup, ".3f")))
        if _has_tflops(m):
            line += format(_fmt(m.tflops, ".3f"), ">20")
        if m.gbps is not None:
            line += format(_fmt(m.gbps_base, ".3f"), ">20") + format(_fmt(m.gbps, ".3f"), ">20")
        detail = m.shape_detail if m.shape_detail is not None else "N/A"
        return line + " " * 10 + f"{detail}\n"

    def to_json(self) -> str:
        import json
        return json.dumps(asdict(self), default=custom_json_encoder)

    def to_dict(self) -> dict:
        return self.__dict__


def custom_json_encoder(obj):
    if isinstance(obj, torch.dtype):
        return str(obj)
    raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")
