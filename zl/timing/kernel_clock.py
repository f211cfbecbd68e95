"""The kernel clock of the cold graph (ZL_COLD_CLOCK=kernels, and `auto` wherever CUPTI can
read the graph): CUPTI's per-kernel device timestamps instead of events around the replay.

Why: events around a replay time everything the graph does, and in a graph each kernel starts
0.3-0.6 us after the work it depends on ends (H200, docs/validation/timing.md, section 6). The
events clock keeps those starts, as a model's graph pays them and as the warm reading does;
CUPTI's kernel durations, the reference of the cold target, leave them out. On the events clock
a call of two kernels (sum 4096x4096: 12.3 us and 1.2 us) read 8-17 % above eager CUPTI, a
single 11 us kernel 4-7 %, and softmax 4096x4096 read 23.0 or 23.9 us depending on which fill
kernel did the flush. The kernel clock replays the (flush, call) graph once under
torch.profiler (CUPTI on torch.cuda) and sums, per call, the durations of the kernels that are
not the flush's: the same device timestamps as the reference. The per-call sums are averaged
in N_REPLAYS groups (`group_means`), so the samples have upstream's shape. On the H200 it read
0.980-1.028 of eager CUPTI on seven cases in three calls.

The flush's kernels are told apart by position: a captured graph of (flush, call) pairs runs
its kernels in capture order, so every call contributes one chunk of `m` flush kernels
followed by the call's own. `m` and the flush's kernel names are read by tracing one eager
flush under the same dispatch state (under FlagGems' `use_gems()` a `zero_` is FlagGems' own
fill kernel, which a call may also launch, so names alone cannot separate them).
"""

from __future__ import annotations

import warnings
from typing import Callable, List, Sequence, Tuple

Kernel = Tuple[str, float, float]  # (name, start us, end us)

# Calls per traced graph. A replay's trace comes back as one host-side event per kernel, so
# its cost grows with the calls; 200 calls, in 10 groups of 20, traced in 0.06-0.12 s per
# do_bench call on the H200 and read 0.980-1.028 of eager CUPTI.
MAX_TRACED_CALLS = 200


PROFILER_CYCLE_WARNING = r".*Profiler clears events at the end of each cycle"


class KernelClockError(RuntimeError):
    """The trace cannot be split into calls: CUPTI missing or busy, or a graph whose kernels
    do not repeat in (flush, call) chunks."""


def unavailable_reason(backend_name: str) -> str:
    """'' when torch.profiler can trace CUDA kernels for this backend, else why not."""
    if backend_name != "cuda":
        return (f"backend {backend_name} has no kernel clock (it reads CUPTI through "
                "torch.profiler, torch.cuda only)")
    try:
        from torch.profiler import ProfilerActivity, supported_activities
    except Exception as exc:  # a torch without the profiler module
        return f"torch.profiler cannot be imported ({type(exc).__name__}: {exc})"
    if ProfilerActivity.CUDA not in supported_activities():
        return "torch.profiler cannot trace CUDA kernels here (no CUPTI in this torch build)"
    return ""


def is_device_event(event) -> bool:
    """A torch.profiler event that ran on the device (a kernel or memset on torch.cuda)."""
    return "CUDA" in str(getattr(event, "device_type", ""))


def device_kernels(events) -> List[Kernel]:
    """(name, start, end) of the device-side events of a torch.profiler trace, in start order.

    `events` is `prof.events()`; events of zero length (a memset's marker) are kept so every
    chunk of a graph holds the same count."""
    out = [(e.name, float(e.time_range.start), float(e.time_range.end)) for e in events
           if is_device_event(e) and e.time_range.end >= e.time_range.start]
    out.sort(key=lambda k: (k[1], k[2]))
    return out


def profiler_busy() -> bool:
    """True while some torch.profiler / autograd profiler session is active in this process."""
    import torch
    return bool(torch._C._autograd._profiler_enabled())


def trace(di, body: Callable[[], object]) -> List[Kernel]:
    """Run `body` once under torch.profiler's CUDA activity; its device kernels."""
    from torch.profiler import ProfilerActivity, profile
    if profiler_busy():
        # Starting a trace inside another one ends the outer session: on the H200 the user's
        # own profiler then failed on exit ("Can't disable Kineto profiler when it's not
        # running"). The row falls back with the marker instead.
        raise KernelClockError("another torch.profiler session is tracing this process; the "
                               "kernel clock would end it")
    try:
        with warnings.catch_warnings():
            # torch.profiler warns on every trace that a new one starts empty, which is what
            # the clock wants; left alone it lands in every cold run's pytest summary.
            warnings.filterwarnings("ignore", message=PROFILER_CYCLE_WARNING)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                body()
                di.synchronize()
            return device_kernels(prof.events())
    except Exception as exc:  # CUPTI taken by another profiler, or the trace failed
        raise KernelClockError(f"the kernel trace failed ({type(exc).__name__}: "
                               f"{' '.join(str(exc).split())[:120]})") from exc


def call_samples_us(kernels: Sequence[Kernel], calls: int, flush_names: Sequence[str]) -> List[float]:
    """Per call: the summed duration of its own kernels (us), the flush's left out.

    `kernels` is the trace of one replay of `calls` (flush, call) pairs; `flush_names` the
    kernels of one flush, in order. A trace that does not split into `calls` equal chunks
    starting with the flush's kernels is a KernelClockError, never a guess."""
    m = len(flush_names)
    if calls < 1 or m < 1:
        raise KernelClockError(f"nothing to split: {calls} call(s), {m} flush kernel(s)")
    if len(kernels) % calls:
        raise KernelClockError(f"{len(kernels)} kernels do not split into {calls} calls")
    chunk = len(kernels) // calls
    if chunk <= m:
        raise KernelClockError(f"the call launched no kernel of its own ({chunk} kernel(s) per "
                               f"call, {m} of them the flush's)")
    samples = []
    for i in range(calls):
        part = kernels[i * chunk:(i + 1) * chunk]
        names = [k[0] for k in part[:m]]
        if names != list(flush_names):
            raise KernelClockError(f"call {i} does not start with the flush's kernels "
                                   f"({names[:2]} where {list(flush_names)[:2]} was expected)")
        samples.append(sum(end - start for _, start, end in part[m:]))
    return samples


def group_means(samples: Sequence[float], groups: int) -> List[float]:
    """`samples` in `groups` consecutive groups (sizes differing by at most one), each group's
    mean: the shape of upstream's samples, each one replay's mean over its calls.

    CUPTI's timestamps tick in 32 ns on the H200 (every traced duration is a multiple), so a
    median of single calls moves in 32 ns steps: softmax 64x64 read 1.600 and 1.632 us in an
    A/A pair (2 %). A mean over the calls of a group has 32 ns / calls resolution."""
    import numpy as np
    if not samples:
        raise KernelClockError("no samples to group")
    parts = np.array_split(np.asarray(samples, dtype=float), max(1, min(groups, len(samples))))
    return [float(part.mean()) for part in parts]
