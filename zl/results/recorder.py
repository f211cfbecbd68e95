"""What `_results_plugin` installs: per shape and side, one extra call outside the timer.

`Benchmark.get_latency(op, *args)` is wrapped on every FlagGems Benchmark class that
defines it. The original runs first and returns the latency untouched; then, on the same
inputs, the operator is called once more and its output recorded (zl.results.capture).
Timing is not affected: the extra call comes after the timed loop has returned, and it is
the only thing added (both A/B sides carry it).

The side: `gems` when the op is the benchmark's `gems_op` or the call is inside
`flag_gems.use_gems()` (wrapped here to count its depth), else `torch`; that is how
upstream's run() measures latency_base and latency. A backward benchmark records the
forward output and the input gradients for a fixed-seed upstream gradient (upstream's own
`randn_like` would differ between the extra call and any later one).

On the torch side a second extra call makes the reference "vs torch" compares with, as
FlagGems' accuracy tests do: the operator on float32 copies of float16/bfloat16 inputs,
rounded back to the output dtype (capture.REFERENCE_SIDE; a failure there is noted in the
file and the plain torch output stays the reference). Each record also carries its
`reduce` size (capture.reduction_size), which scales atol for that comparison.

Inside `use_gems()` every aten op dispatches to FlagGems, the statistics too: on the H200
the capture of a 4096x4096 abs compiled and ran FlagGems' isnan, sum and nonzero kernels,
which the IR dump filed under abs's shape, and whose numerics a compiler switch can move.
So only the operator's own call happens inside; the statistics (and a backward's upstream
gradient) wait until the outermost `use_gems()` has exited. The gradient itself is taken
inside a fresh `use_gems()` with the caller's arguments, so it runs FlagGems' backward.
"""

from __future__ import annotations

import contextlib
import functools
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from zl.flaggems import BenchmarkMethodPatch, UseGemsDepth, timed_side
from zl.patching import PatchStack
from zl.results import capture


class ResultsRecorder:
    def __init__(self, run_dir: Path, log: Callable[[str], None]):
        self.run_dir = Path(run_dir)
        self.log = log
        self.files: Dict[str, capture.ResultsFile] = {}
        # flag_gems.use_gems() depth; captures made inside are described once it has ended
        self.gems = UseGemsDepth(enter=self._entered_gems, leave=self.flush)
        self.patch = BenchmarkMethodPatch("get_latency", self._wrap, "run")
        self.stack = PatchStack()
        self.errors = 0
        self.reference_failures = 0
        self.active = True
        self.captures = 0
        self.seconds = 0.0  # host time spent in record() and flush(): what the results check costs a run
        self.pending: List[tuple] = []   # captured inside use_gems(), described after it exits
        self.gems_ctx = None             # (use_gems, args, kwargs) of the outermost use_gems()

    # --- installation ----------------------------------------------------------------
    def install(self) -> None:
        """Wrap get_latency and flag_gems.use_gems once the benchmark modules are imported."""
        self.patch.apply()
        self.gems.install(self.stack)

    def uninstall(self) -> None:
        """Put originals back where our wrapper is still the class attribute. Where another
        plugin wrapped over ours (the graph timer wraps get_latency too), restoring would drop
        its wrapper; ours stays there, inactive (a plain pass-through)."""
        self.flush()
        self.active = False
        for cls, original in self.patch.patched:
            if getattr(cls.__dict__.get("get_latency"), "_zl_results", False):
                setattr(cls, "get_latency", original)
        self.patch.patched.clear()
        self.stack.undo_all()

    @property
    def gems_depth(self) -> int:
        """How deep the benchmark is inside flag_gems.use_gems() (0: outside)."""
        return self.gems.depth

    @gems_depth.setter
    def gems_depth(self, value: int) -> None:
        self.gems.depth = value

    def _entered_gems(self, use_gems: Callable, args: tuple, kwargs: dict) -> None:
        self.gems_ctx = (use_gems, args, kwargs)

    def _wrap(self, original: Callable) -> Callable:
        recorder = self

        @functools.wraps(original)
        def get_latency(bench, op, *args, **kwargs):
            latency = original(bench, op, *args, **kwargs)
            if not recorder.active:
                return latency
            t0 = time.perf_counter()
            recorder.record(bench, op, args, kwargs)
            recorder.seconds += time.perf_counter() - t0
            recorder.captures += 1
            return latency
        get_latency._zl_results = True
        return get_latency

    # --- recording --------------------------------------------------------------------
    def file_for(self, op_name: str) -> capture.ResultsFile:
        if op_name not in self.files:
            self.files[op_name] = capture.ResultsFile(self.run_dir, op_name)
        return self.files[op_name]

    def record(self, bench: Any, op: Callable, args: tuple, kwargs: dict) -> None:
        """Record one output; never raises into the benchmark (a failure is logged and noted)."""
        op_name = str(getattr(bench, "op_name", "") or "unknown")
        results = self.file_for(op_name)
        reason = capture.not_comparable_reason(op_name, bool(getattr(bench, "is_inplace", False)))
        if reason:
            results.not_comparable(reason)
            return
        if results.doc["status"] == "n/a":
            return
        side = timed_side(bench, op, self.gems_depth > 0)
        try:
            outputs, grad_of = self._call(bench, op, args, kwargs)
            if capture.aliases_input(outputs, list(args) + list(kwargs.values())):
                results.not_comparable("in-place operator (output aliases an input)")
                return
            key = results.key(side, capture.first_dtype(args), capture.shape_label(args))
        except Exception as exc:
            self._failed(op_name, side, results, exc)
            return
        job = (op_name, results, key, side, outputs, grad_of, (bench, op, args, kwargs))
        if self.gems_depth > 0:
            self.pending.append(job)
        else:
            self._describe(job, in_gems=False)

    def flush(self) -> None:
        """Describe what was captured inside use_gems(), now that FlagGems is off again."""
        t0 = time.perf_counter()
        while self.pending:
            self._describe(self.pending.pop(0), in_gems=True)
        self.seconds += time.perf_counter() - t0

    def _describe(self, job: tuple, in_gems: bool) -> None:
        """`in_gems`: the job was captured inside use_gems() (so its gradient is FlagGems')."""
        op_name, results, key, side, outputs, grad_of, call = job
        try:
            inputs = list(call[2]) + list(call[3].values())
            forward = len(outputs)
            if grad_of is not None:
                outputs = outputs + self._gradients(*grad_of, in_gems=in_gems)
            reduce = [capture.reduction_size(op_name, inputs if i < forward else inputs + outputs[:forward], t)
                      for i, t in enumerate(outputs)]
            results.add(key, side, outputs, reduce)
        except Exception as exc:
            self._failed(op_name, side, results, exc)
            return
        if side == "torch":
            self._reference(op_name, results, key, call, outputs, reduce)

    def _reference(self, op_name: str, results: capture.ResultsFile, key: str, call: tuple,
                   plain: List[Any], reduce: List[int]) -> None:
        """The upcast reference of one torch-side capture (module doc); never raises."""
        import torch
        bench, op, args, kwargs = call
        try:
            up_args, n_args = capture.upcast(args)
            up_kwargs, n_kwargs = capture.upcast(kwargs)
            if not n_args + n_kwargs:
                return
            if getattr(bench, "is_backward", False):
                out = op(*up_args, **up_kwargs)
                xs = [a for a in up_args if torch.is_tensor(a) and a.requires_grad]
                ref = [out] + self._gradients(out, xs, in_gems=False, round_to=plain[0].dtype)
            else:
                with torch.no_grad():
                    ref = capture.flatten(op(*up_args, **up_kwargs))
            results.add(key, capture.REFERENCE_SIDE, capture.round_like(ref, plain), reduce)
        except Exception as exc:
            self.reference_failures += 1
            if self.reference_failures <= 3:
                self.log(f"upcast reference of {op_name} not made ({exc!r}); vs torch uses the plain torch output")
            results.reference_failed(key, f"{type(exc).__name__}: {exc}")

    def _failed(self, op_name: str, side: str, results: capture.ResultsFile, exc: Exception) -> None:
        self.errors += 1
        if self.errors <= 3:
            self.log(f"output of {op_name} ({side}) not recorded: {exc!r}")
        results.doc.setdefault("capture_errors", []).append(f"{side}: {exc!r}"[:300])
        results.write()

    @staticmethod
    def _call(bench: Any, op: Callable, args: tuple, kwargs: dict):
        """The operator's extra call: (outputs, None), or for a backward benchmark
        ([forward output], (output, inputs needing a gradient))."""
        import torch
        if not getattr(bench, "is_backward", False):
            with torch.no_grad():
                return capture.flatten(op(*args, **kwargs)), None
        out = op(*args, **kwargs)
        return [out], (out, [a for a in args if torch.is_tensor(a) and a.requires_grad])

    def _gradients(self, out: Any, xs: List[Any], in_gems: bool, round_to: Any = None) -> List[Any]:
        """Input gradients for the fixed-seed upstream gradient; `round_to`: the dtype that
        gradient is first rounded to (the plain output's, for an upcast reference)."""
        import torch
        # Drawn where the output lives once it is large: a host randn of a 2^30-element
        # gradient plus its copy took seconds per shape on the H200 (capture.HOST_CAP).
        where = out.device if out.numel() > capture.HOST_CAP else torch.device("cpu")
        gen = torch.Generator(device=where).manual_seed(0)
        dout = torch.randn(out.shape, generator=gen, dtype=torch.float32, device=where)
        dout = dout.to(round_to or out.dtype).to(out.dtype).to(out.device)
        ctx = contextlib.nullcontext()
        if in_gems and self.gems_ctx is not None:
            use_gems, args, kwargs = self.gems_ctx
            ctx = use_gems(*args, **kwargs)
        with ctx:
            grads = torch.autograd.grad((out,), xs, grad_outputs=(dout,), allow_unused=True)
        return capture.flatten(list(grads))
