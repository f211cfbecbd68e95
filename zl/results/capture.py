"""One operator output -> a compact, comparable record; one JSON file per operator.

`<run>/results/<op>.json`:
    {"schema_version": 1, "op": ..., "status": "captured" | "n/a", "reason": ...,
     "entries": {"<dtype>|<shape label>#<n>": {"torch": [T...], "gems": [T...],
                                                "torch_upcast": [T...]}}}
where each T describes one output tensor (outputs are flattened: tuples, lists, and for a
backward benchmark the forward output followed by the input gradients):
    {"dtype", "shape", "numel", "digest", "nan", "inf",
     "min", "max", "mean", "abs_mean" (finite elements, float64),
     "values" (all, when numel <= FULL_CAP) | "sample_index" + "sample" (SAMPLE_SIZE
     evenly spaced elements), "reduce" (reduction_size: input elements behind one output
     element, for the reference tolerance)}.
The digest decides "bitwise equal"; values or the sample decide "within tolerance".

`torch_upcast` is the reference the "vs torch" check uses, made the way FlagGems' accuracy
tests make theirs (tests/accuracy_utils.py `to_reference(x, upcast=True)`, then
`ref.to(dtype)`): the torch operator on float32 copies of the float16/bfloat16 inputs, each
floating output rounded back to the plain torch output's dtype (integer outputs, such as
indices, are the plain torch call's). A float16 reduction compared with float16 torch
compares two roundings of the same sum, not an answer with the truth. Absent when no input
is float16/bfloat16 or the upcast call failed (the reason is kept in "reference_errors");
the plain torch output is the reference then.

The digest is `sha256:<hex>` of the raw bytes up to HOST_CAP elements (also kept as the
"sha256" field, as before). Above it everything is computed where the tensor lives:
copying a 2^30-element output to the host, widening it to float64 and hashing it took longer
than the 100 s case limit on the H200 (upstream's core shapes of every pointwise benchmark
include one), so the digest there is `wsum64:<hex>`: two position-weighted 64-bit sums of
the tensor's 32-bit words (odd weights, arithmetic modulo 2^64, chunked). Any single changed
word changes both sums; the statistics stay exact reductions over every element. Both
sides of an A/B get the same kind for the same shape, so equal digests still mean equal bytes.

Not comparable, reported `n/a (reason)` and never called an extra time: random operators
(their output depends on the generator state, which the timing loop advances) and in-place
operators (the timing loop has already applied them to their inputs many times). An
output found to alias an input at capture time is in-place too.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from zl import atomic

SCHEMA_VERSION = 1
RESULTS_SUBDIR = "results"
FULL_CAP = 4096
SAMPLE_SIZE = 256
HOST_CAP = 1 << 22       # elements; above it: device-side statistics and the wsum64 digest
CHUNK = 1 << 24          # elements per device-side step: bounds the temporaries (~16 M x 8 B)
_W1, _W2 = 0x9E3779B97F4A7C15 - (1 << 64), 0xC2B2AE3D27D4EB4F - (1 << 64)
# Operators whose output is drawn from a random generator (FlagGems op names; `_` bounded
# so layer_norm or normalize do not match).
RANDOM_RE = re.compile(r"(?:^|_)(dropout|randn|rand|randint|randperm|normal|multinomial|uniform|"
                       r"exponential|bernoulli|poisson|geometric|cauchy|log_normal|random)(?:_|$)")
SIDES = ("torch", "gems")
REFERENCE_SIDE = "torch_upcast"
UPCAST = {"float16": "float32", "bfloat16": "float32"}
# Operators that contract a dimension the output does not keep (matrix products,
# convolutions): FlagGems' tests pass that length (K, C x kernel) as reduce_dim.
CONTRACTION_RE = re.compile(r"^(?:addmm|addmv|addbmm|baddbmm|bmm|mm|mv|matmul|linear|dot|vdot|"
                            r"conv\w*|tensordot|einsum)(?:_backward)?$")


def not_comparable_reason(op_name: str, is_inplace: bool = False) -> Optional[str]:
    """Why an operator's outputs cannot be compared across runs, or None."""
    name = (op_name or "").lower()
    match = RANDOM_RE.search(name)
    if match:
        return f"random operator ({match.group(1)})"
    stem = name[: -len("_backward")] if name.endswith("_backward") else name
    if is_inplace or (stem.endswith("_") and not stem.endswith("__")):
        return "in-place operator"
    return None


def flatten(value: Any, depth: int = 0) -> List[Any]:
    """Tensors (and numbers) of an output, in order; None and other objects are skipped."""
    import torch
    if depth > 6:
        return []
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, (bool, int, float, complex)):
        return [torch.tensor(value)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten(v, depth + 1)]
    if isinstance(value, dict):
        return [t for k in sorted(value, key=str) for t in flatten(value[k], depth + 1)]
    return []


def aliases_input(outputs: List[Any], inputs: List[Any]) -> bool:
    """True when an output tensor shares storage with an input tensor (an in-place op)."""
    import torch
    ptrs = set()
    for t in inputs:
        if torch.is_tensor(t) and t.numel():
            ptrs.add(t.untyped_storage().data_ptr())
    return any(torch.is_tensor(o) and o.numel() and o.untyped_storage().data_ptr() in ptrs
               for o in outputs)


def reduction_size(op_name: str, inputs: List[Any], output: Any) -> int:
    """How many input elements lie behind one output element: the `reduce_dim` FlagGems'
    accuracy tests scale atol by (nll_loss: target.numel() for a reduced loss; mm: K).

    The largest input's numel over the output's (a sum, a mean, a loss over N x H x W), and
    for a contraction (CONTRACTION_RE) sqrt(numel(a) x numel(b) / numel(out)) of the two
    largest inputs, which is K for (M,K) @ (K,N) and C x k for a convolution with a square
    k x k kernel. At least 1; an elementwise output is 1.
    """
    import math

    import torch
    sizes = sorted((int(t.numel()) for t in flatten(list(inputs)) if torch.is_tensor(t)), reverse=True)
    out = max(1, int(output.numel()))
    if not sizes:
        return 1
    size = -(-sizes[0] // out)
    if len(sizes) > 1 and CONTRACTION_RE.match((op_name or "").lower()):
        size = max(size, math.ceil(math.sqrt(sizes[0] * sizes[1] / out)))
    return max(1, size)


def upcast(value: Any, depth: int = 0) -> tuple:
    """(value with every float16/bfloat16 tensor replaced by a float32 copy, how many were).
    A copy keeps requires_grad (a backward reference takes gradients of the copies)."""
    import torch
    if depth > 6:
        return value, 0
    if torch.is_tensor(value):
        name = str(value.dtype).replace("torch.", "")
        if name not in UPCAST:
            return value, 0
        copy = value.detach().to(getattr(torch, UPCAST[name]))
        return (copy.requires_grad_() if value.requires_grad else copy), 1
    if isinstance(value, (list, tuple)):
        parts = [upcast(v, depth + 1) for v in value]
        items = [p[0] for p in parts]
        return (type(value)(items) if isinstance(value, list) else tuple(items)), sum(p[1] for p in parts)
    if isinstance(value, dict):
        parts = {k: upcast(v, depth + 1) for k, v in value.items()}
        return {k: p[0] for k, p in parts.items()}, sum(p[1] for p in parts.values())
    return value, 0


def round_like(reference: List[Any], plain: List[Any]) -> List[Any]:
    """The upcast outputs rounded back to the plain outputs' dtypes; a non-floating plain
    output (indices, masks) is kept as is. ValueError when the two do not line up."""
    import torch
    if len(reference) != len(plain):
        raise ValueError(f"{len(reference)} upcast outputs vs {len(plain)} plain ones")
    out = []
    for r, p in zip(reference, plain):
        if not (torch.is_tensor(r) and torch.is_tensor(p)) or tuple(r.shape) != tuple(p.shape):
            raise ValueError("an upcast output's shape differs from the plain one's")
        floating = p.is_floating_point() or p.is_complex()
        out.append(r.detach().to(p.dtype) if floating else p)
    return out


def _float(x: float) -> Optional[float]:
    return None if not np.isfinite(x) else float(x)


def describe(tensor: Any) -> Dict[str, Any]:
    """The compact record of one tensor (see the module doc)."""
    import torch
    t = tensor.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    t = t.contiguous()
    if t.numel() > HOST_CAP:
        return _describe_large(tensor, t)
    cpu = t.to("cpu")
    raw = cpu.reshape(-1).view(torch.uint8) if cpu.numel() else torch.empty(0, dtype=torch.uint8)
    values = cpu.to(torch.float64).reshape(-1).numpy() if cpu.numel() else np.zeros(0)
    finite = values[np.isfinite(values)]
    sha = hashlib.sha256(raw.numpy().tobytes()).hexdigest()
    rec: Dict[str, Any] = {
        "dtype": str(tensor.dtype).replace("torch.", ""), "shape": list(tensor.shape),
        "numel": int(values.size), "sha256": sha, "digest": f"sha256:{sha}",
        "nan": int(np.isnan(values).sum()), "inf": int(np.isinf(values).sum()),
        "min": _float(finite.min()) if finite.size else None,
        "max": _float(finite.max()) if finite.size else None,
        "mean": _float(finite.mean()) if finite.size else None,
        "abs_mean": _float(np.abs(finite).mean()) if finite.size else None,
    }
    if values.size <= FULL_CAP:
        rec["values"] = values.tolist()
    else:
        index = _sample_index(values.size)
        rec["sample_index"] = index.tolist()
        rec["sample"] = values[index].tolist()
    return rec


def _sample_index(n: int) -> Any:
    """SAMPLE_SIZE evenly spaced element positions of n (both paths: the samples must line up)."""
    return np.unique(np.linspace(0, n - 1, SAMPLE_SIZE).astype(np.int64))


def _words(t: Any) -> Any:
    """The tensor's bytes as int32 words, zero-padded to a whole word (on its device)."""
    import torch
    raw = t.reshape(-1).view(torch.uint8)
    pad = (-raw.numel()) % 4
    if pad:
        raw = torch.cat([raw, raw.new_zeros(pad)])
    return raw.view(torch.int32)


def _describe_large(tensor: Any, t: Any) -> Dict[str, Any]:
    """describe() above HOST_CAP elements: every reduction on the tensor's device, chunked.

    A process pays for its first record, not for the arithmetic: on the H200 the first
    4096x4096 float16 record took 231-246 ms and the second 2 ms, and 72 ms with
    CUDA_MODULE_LOADING=EAGER, so most of it is CUDA loading each kernel on first use
    (docs/validation/timing.md, section 4). So this uses few distinct kernels: every chunk
    is widened to float64 once (exact for every float16/bfloat16/float32 value), finiteness
    comes from one abs and two comparisons, each chunk's results are stacked into a row on
    the device and the rows added up here, and the sample is gathered from the widened
    chunks. Nothing is read back before the end: two device-to-host copies for the whole
    tensor.
    """
    import torch
    flat = t.reshape(-1)
    n = flat.numel()
    dev, f64, inf = flat.device, torch.float64, float("inf")
    index = _sample_index(n)
    counts, stats, samples, sums = [], [], [], []    # one row (tensor) per chunk, see below
    for start in range(0, n, CHUNK):
        x = flat[start:start + CHUNK].to(f64)
        # the sample positions inside this chunk, picked on the host (a boolean index on the
        # device would synchronise)
        mine = index[(index >= start) & (index < start + x.numel())] - start
        a = x.abs()
        ok = a < inf                                  # NaN compares false: finite elements
        counts.append(torch.stack([ok.sum(), (a == inf).sum()]))          # finite, inf
        # one reduction kernel (aminmax) for both bounds; the fill keeps non-finite out
        stats.append(torch.stack([torch.where(ok, x, 0.0).sum(), torch.where(ok, a, 0.0).sum(),
                                  torch.aminmax(torch.where(ok, x, inf)).min,
                                  torch.aminmax(torch.where(ok, x, -inf)).max]))  # total, |total|, lo, hi
        samples.append(x.index_select(0, torch.from_numpy(mine).to(dev)))
    words = _words(t)
    for start in range(0, words.numel(), CHUNK):
        w = words[start:start + CHUNK].to(torch.int64)
        pos = torch.arange(start, start + w.numel(), dtype=torch.int64, device=dev)
        # odd weights: multiplying a nonzero word difference (< 2^32) by an odd number is
        # never 0 modulo 2^64, so one changed word always changes the sum
        sums.append(torch.stack([(w * (pos * _W1 + 1 | 1)).sum(), (w * (pos * _W2 + 3 | 1)).sum()]))
    k = len(counts)
    ints = torch.stack(counts + sums).cpu().tolist()
    floats = torch.cat([torch.stack(stats).reshape(-1)] + samples).cpu().numpy()
    # added up here in chunk order, as the device did before (same float64 results)
    count, inf_n = (sum(col) for col in zip(*ints[:k]))
    h1, h2 = (sum(col) for col in zip(*ints[k:]))
    rows = floats[:4 * k].reshape(k, 4)
    total, abs_total = sum(rows[:, 0].tolist()), sum(rows[:, 1].tolist())
    lo, hi = rows[:, 2].min(), rows[:, 3].max()
    digest = f"wsum64:{h1 & (2 ** 64 - 1):016x}{h2 & (2 ** 64 - 1):016x}-{words.numel()}"
    return {
        "dtype": str(tensor.dtype).replace("torch.", ""), "shape": list(tensor.shape),
        "numel": int(n), "digest": digest, "nan": int(n - count - inf_n), "inf": int(inf_n),
        "min": _float(lo) if count else None, "max": _float(hi) if count else None,
        "mean": _float(total / count) if count else None,
        "abs_mean": _float(abs_total / count) if count else None,
        "sample_index": index.tolist(), "sample": floats[4 * k:].tolist(),
    }


def shape_label(args: Any) -> str:
    """`1024x1024_64` from the tensors among the arguments (dims `x`-joined, tensors `_`-joined)."""
    import torch
    return "_".join("x".join(str(d) for d in t.shape) or "scalar"
                    for t in flatten(list(args)) if torch.is_tensor(t) and t.dim() >= 0) or "noshape"


def first_dtype(args: Any) -> str:
    import torch
    for t in flatten(list(args)):
        if torch.is_tensor(t) and t.dim() > 0:
            return str(t.dtype).replace("torch.", "")
    return "none"


class ResultsFile:
    """Records of one operator in one run, rewritten atomically after each shape."""

    def __init__(self, run_dir: Path, op: str):
        self.path = Path(run_dir) / RESULTS_SUBDIR / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', op)}.json"
        self.doc: Dict[str, Any] = {"schema_version": SCHEMA_VERSION, "op": op, "status": "captured",
                                    "reason": None, "entries": {}}
        self._occurrence: Dict[tuple, int] = {}

    def key(self, side: str, dtype: str, label: str) -> str:
        base = f"{dtype}|{label}"
        n = self._occurrence.get((side, base), 0)
        self._occurrence[(side, base)] = n + 1
        return f"{base}#{n}"

    def add(self, key: str, side: str, outputs: List[Any], reduce: Optional[List[int]] = None) -> None:
        records = [describe(t) for t in outputs]
        for rec, size in zip(records, reduce or []):
            rec["reduce"] = int(size)
        self.doc["entries"].setdefault(key, {})[side] = records
        self.write()

    def reference_failed(self, key: str, why: str) -> None:
        """The upcast reference of `key` could not be made: "vs torch" uses the plain output."""
        self.doc.setdefault("reference_errors", {})[key] = why[:300]
        self.write()

    def not_comparable(self, reason: str) -> None:
        if self.doc["status"] != "n/a":
            self.doc.update(status="n/a", reason=reason, entries={})
            self.write()

    def write(self) -> None:
        atomic.write_json(self.path, self.doc, indent=None)
