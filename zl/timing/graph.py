"""The graph timer: a drop-in `triton.testing.do_bench` that captures per shape and falls
back honestly.

For each call it
1. asks the backend's deny list whether this operator may be captured at all;
2. synchronises the device, so the capture stream cannot start before the inputs the
   benchmark just wrote on the current stream exist (an unsynchronised side stream gave an
   intermittent illegal instruction);
3. warms fn until event-timed calls settle, within min(caller's warmup, ZL_GRAPH_WARMUP_MS)
   (`capture.warmup_before_capture`);
4. captures and replays under a scratch RNG state (`capture.scratch_rng`); with ZL_L2=cold
   every call in the graph follows an L2 flush whose own time is subtracted
   (`capture.graph_bench_cold`), read by events or, with ZL_COLD_CLOCK=kernels, by CUPTI's
   per-kernel timestamps (`kernel_clock`);
5. on failure asks the backend, by its vendor wording, how bad it was: recoverable -> plain
   do_bench (ZL_DIRECT_REPEAT times, median) plus a BENCHMARK_DIRECT_NO_CUDAGRAPH marker
   that carries the measured host-dispatch share of the row (`direct.measure_host_share`);
   poisoned -> BENCHMARK_CAPTURE_POISONED and re-raise; fatal -> re-raise, because a
   fallback latency would report a broken kernel as a measurement.

On torch.cuda upstream `triton.testing.do_bench_cudagraph` is called verbatim so CUDA numbers
do not move, except for a backward benchmark, which is captured on its forward stream
(`backward`), and under ZL_L2=cold, which upstream cannot do. Elsewhere
`capture.graph_bench_port` does the same steps through the device interface; an interface
without a graph type falls back on every shape, with the marker.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Optional

from zl import markers
from zl.patching import PatchStack
from zl.term import log, style

from . import GRAPH_LOG_TAG, capture, device
from .kernel_clock import KernelClockError
from .callers import caller_of_caller, tuner_module
from .backward import BackwardStreams
from .direct import measure_host_share, run_direct
from .l2 import FlushBuffer

DETAIL_CHARS = 160
VERDICTS = ("fatal", "poisoned", "recoverable")


def _log(message: str) -> None:
    log(GRAPH_LOG_TAG, message)


def _marker(text: str, colour: str) -> None:
    """Markers go to stdout, interleaved with the result tables they annotate in run.log."""
    print(style(text, colour, stream=sys.stdout), flush=True)


def _detail(exc: BaseException) -> str:
    # One line, no single quotes, so `detail='...'` stays one parseable token group.
    return " ".join(str(exc).split())[:DETAIL_CHARS].replace("'", '"')


def op_from_item(item) -> str:
    """pytest function name minus `test_` (parameters stripped): the deny-list key."""
    name = getattr(item, "originalname", None) or str(getattr(item, "name", "")).split("[", 1)[0]
    return name[len("test_"):] if name.startswith("test_") else name


def classify(backend, exc: BaseException) -> str:
    """The backend's verdict on a capture error; an unknown verdict fails closed (fatal)."""
    if isinstance(exc, (device.NoGraphSupport, KernelClockError)):
        # our own probe, or a trace that could not be read: the device is not at fault
        return "recoverable"
    verdict = backend.classify_capture_error(exc)
    if verdict not in VERDICTS:
        _log(f"backend {backend.name} returned verdict {verdict!r}; treating it as fatal")
        return "fatal"
    return verdict


class GraphTimer:
    """Graph timing for one session: the backend, the direct repeat for fallback rows, the
    do_bench it replaced, the running operator and the backward side streams."""

    def __init__(self, backend, repeat: int = 1, warmup_cap_ms: Optional[float] = 25.0,
                 l2: str = "warm", flush: Optional[FlushBuffer] = None,
                 cold_clock: str = "events") -> None:
        self.backend = backend
        self.repeat = max(1, int(repeat))
        self.warmup_cap_ms = warmup_cap_ms  # None: the caller's whole warmup budget
        self.l2 = l2
        self.cold_clock = cold_clock  # `events` or `kernels`; read only when l2 is cold
        self.flush = flush or FlushBuffer()
        self.op: Optional[str] = None  # set per pytest item by the session's hooks
        self.upstream = None  # the do_bench replaced; None while not installed
        self.backward = BackwardStreams()
        # One bound method, so `triton.testing.do_bench is timer.do_bench` holds.
        self.do_bench = self.graph_do_bench
        self._patches = PatchStack()
        # Where the timer's host seconds went, per phase: logged at the end.
        self.ledger = {"calls": 0, "warmup_s": 0.0, "warmup_calls": 0, "graph_s": 0.0,
                       "fallbacks": 0, "fallback_s": 0.0, "tuner_calls": 0}

    @property
    def installed(self) -> bool:
        return self.upstream is not None

    def install(self) -> None:
        """Replace triton.testing.do_bench with this timer (idempotent)."""
        import triton.testing as tt
        if self.upstream is None:
            self._patches.push(self.backward.restore)
            self.upstream = self._patches.setattr(tt, "do_bench", self.do_bench)

    def uninstall(self) -> None:
        """Put do_bench and the Benchmark classes back."""
        self._patches.undo_all()
        self.upstream = None
        self.op = None
        self.flush.release()

    def current_op(self) -> str:
        """The running item's operator; else the run configuration's (ZL_OP / --zl-op); else
        '<unknown>'.

        The item wins because a whole-file node runs several test functions under one
        ZL_OP, and the deny list is keyed by function name.
        """
        from zl.config import current
        return self.op or current().op.strip() or "<unknown>"

    def graph_do_bench(self, fn, warmup=25, rep=100, grad_to_none=None, quantiles=None,
                       return_mode="mean"):
        """Drop-in for triton.testing.do_bench: graph timing with per-shape honest fallback.

        A call from an autotuner (`callers.tuner_module`) goes to Triton's own do_bench, as
        in upstream's run: it is tuning, not the benchmark's measurement."""
        if tuner_module(caller_of_caller()):
            self.ledger["tuner_calls"] += 1
            import triton.testing as tt
            original = self.upstream if self.upstream is not None else tt.do_bench
            return original(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                            quantiles=quantiles, return_mode=return_mode)
        op = self.current_op()
        self.ledger["calls"] += 1
        args = (fn, warmup, rep, grad_to_none, quantiles, return_mode)
        # For a deny-listed operator the attempt itself is the damage (it poisons the
        # context), so it is never made, not even once per run to rediscover that.
        if self.backend.denies_capture(op):
            return self._fallback(op, "denylist", "KnownPoisoningOp",
                                  f"{self.backend.name} denies capture for {op}", *args)
        step = {"phase": "sync"}
        try:
            return self._time_with_graph(step, *args)
        except Exception as exc:
            phase, reason, detail = self._judge(op, step["phase"], exc)
            return self._fallback(op, phase, reason, detail, *args)

    @contextlib.contextmanager
    def _spent(self, key: str):
        """Add the block's host seconds to ledger[key], whether it returns or raises."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.ledger[key] += time.perf_counter() - t0

    def ledger_line(self) -> str:
        """One line: do_bench calls, warmup, capture and replays, fallbacks (host seconds)."""
        g = self.ledger
        return (f"graph timer spent {g['warmup_s'] + g['graph_s'] + g['fallback_s']:.3f} s over "
                f"{g['calls']} do_bench call(s): warmup {g['warmup_s']:.3f} s ({g['warmup_calls']} "
                f"timed call(s)), capture and replays {g['graph_s']:.3f} s, {g['fallbacks']} "
                f"fallback row(s) {g['fallback_s']:.3f} s; {g['tuner_calls']} autotuner call(s) "
                f"left to Triton's do_bench")

    def _time_with_graph(self, step, fn, warmup, rep, grad_to_none, quantiles, return_mode):
        di = device.device_interface()
        forward_stream = self.backward.forward_stream
        cold = self.l2 == "cold"
        # upstream verbatim on torch.cuda, except for a backward benchmark (upstream's own
        # cudagraph mode loses those rows entirely, so there is no upstream number to keep)
        # and a cold L2 (upstream's graph has no flush in it)
        upstream = device.is_torch_cuda(di) and forward_stream is None and not cold
        graph_cls = None
        if not upstream:
            # Known before anything runs; failing here spares the warmup budget.
            step["phase"] = "capture"
            graph_cls = device.graph_type(di)
        step["phase"] = "sync"
        di.synchronize()
        step["phase"] = "warmup"
        if cold:
            self.flush.ensure(di)  # allocated here: an allocation would break the capture
        with self._spent("warmup_s"):
            self.ledger["warmup_calls"] += capture.warmup_before_capture(
                di, fn, warmup, grad_to_none, cap_ms=self.warmup_cap_ms)
        step["phase"] = "capture"
        with self._spent("graph_s"), capture.scratch_rng(di):
            if upstream:
                import triton.testing as tt
                # A replay failure inside upstream's function reports phase=capture.
                return tt.do_bench_cudagraph(fn, rep=rep, grad_to_none=grad_to_none,
                                             quantiles=quantiles, return_mode=return_mode)
            if cold:
                return capture.graph_bench_cold(di, graph_cls, step, fn, rep, grad_to_none,
                                                quantiles, return_mode, self.flush.flush,
                                                stream=forward_stream, clock=self.cold_clock)
            return capture.graph_bench_port(di, graph_cls, step, fn, rep, grad_to_none,
                                            quantiles, return_mode, stream=forward_stream)

    def _judge(self, op, phase, exc):
        """Decide after a failed attempt: re-raise (fatal, poisoned) or -> marker fields.

        Must be called inside the `except` block that caught `exc` (a bare raise re-raises it).
        """
        verdict = classify(self.backend, exc)
        reason, detail = type(exc).__name__, _detail(exc)
        if verdict == "fatal":
            _log(f"fatal device error for op={op} phase={phase} ({reason}); not falling back")
            raise exc
        if verdict == "recoverable" and not isinstance(exc, device.NoGraphSupport):
            # Confirm the context survived the attempt before timing inside it: a dead
            # context showed up once as a fallback marker followed by zero rows.
            try:
                device.device_interface().synchronize()
            except Exception as probe:
                verdict, reason, detail = "poisoned", type(probe).__name__, _detail(probe)
                if classify(self.backend, probe) == "fatal":
                    raise probe from exc
        if verdict == "poisoned":
            _marker(markers.format_marker(markers.CAPTURE_POISONED, op=op, phase=phase,
                                          reason=reason, detail=f"'{detail}'"), "red")
            _log(f"capture attempt left the context unusable for op={op}; re-run it with "
                 f"ZL_ENABLE_CUDAGRAPH=0 and add it to backend {self.backend.name}'s deny list")
            raise exc
        return phase, reason, detail

    def _fallback(self, op, phase, reason, detail, fn, warmup, rep, grad_to_none, quantiles,
                  return_mode):
        self.ledger["fallbacks"] += 1
        with self._spent("fallback_s"):
            repeat = self.repeat
            share = self._host_share(fn, grad_to_none)
            # do_bench zeroes its own 256 MB cache before every call: a cold row either way.
            l2 = "cold_by_do_bench_flush" if self.l2 == "cold" else None
            _marker(markers.format_marker(markers.DIRECT_NO_CUDAGRAPH, op=op, phase=phase,
                                          reason=reason, detail=f"'{detail}'",
                                          host_share=share, l2=l2,
                                          repeat=repeat if repeat > 1 else None), "yellow")
            return run_direct(self.upstream, fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                              quantiles=quantiles, return_mode=return_mode, repeat=repeat)

    @staticmethod
    def _host_share(fn, grad_to_none) -> str:
        """`<pct>%` of the direct reading that is host dispatch, or `unknown`.

        A direct row of a small kernel reads the host's Python dispatch whenever that
        outlasts the kernel (softmax 64x64 read 25.95 then 5.09 us between two runs), so the
        marker says how much of the row that is instead of leaving it silently inside.
        """
        try:
            share = measure_host_share(device.device_interface(), fn, grad_to_none)
        except Exception as exc:  # the probe must not cost the row; do_bench still runs
            _log(f"host-share probe failed ({type(exc).__name__}: {_detail(exc)})")
            share = None
        return "unknown" if share is None else f"{share:.0f}%"
