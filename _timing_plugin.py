"""pytest plugin: choose the benchmark timer once, before any shape runs, and record it.

What it patches: `triton.testing.do_bench`, only when needed, through the session's
`zl.patching.PatchStack`, undone at `pytest_unconfigure`:
- graph timing (the backend declares `supports_cuda_graph` and ZL_ENABLE_CUDAGRAPH is
  auto/1): do_bench becomes the per-shape graph timer (`zl.timing.graph`), and FlagGems'
  `Benchmark.get_latency` is hooked so backward benchmarks run on a side stream
  (`zl.timing.backward`); the hooks for that are registered as "zl_cudagraph".
- direct timing with ZL_DIRECT_REPEAT=N > 1: do_bench becomes the median of N calls.
- direct timing with N = 1: nothing is patched; upstream do_bench runs untouched.

When it steps back: ZL_ENABLE_CUDAGRAPH=0/off/direct (graph_capture=disabled), a backend
without graph capture (unsupported; asking for it with 1 is refused with a log line), and,
per shape, a capture the backend judges recoverable (a BENCHMARK_DIRECT_NO_CUDAGRAPH marker,
then plain do_bench). `timer=cuda_graph` therefore means capture was *attempted*.

Why: upstream times with do_bench, whose host launch overhead and drift make small kernels
noisy; graph replay removes the launch cost, and every row it could not capture says so.

Options (group zl_bench; each a setting of the run configuration, named by its variable):
--zl-cudagraph (ZL_ENABLE_CUDAGRAPH), --zl-direct-repeat (ZL_DIRECT_REPEAT), --zl-graph-warmup-ms
(ZL_GRAPH_WARMUP_MS: the warmup before each capture stops when calls settle, within
min(caller's warmup, this) ms; default 25, `caller` = the caller's whole budget), --zl-l2
(ZL_L2: warm, or cold = L2 flushed before every timed call inside the graph, the flush's own
time subtracted; fallback rows are flushed by do_bench itself), --zl-cold-clock
(ZL_COLD_CLOCK, cold graph only: kernels = CUPTI's per-kernel durations, without each
kernel's in-graph start; events = the replay timed by events; auto, the default = kernels
where CUPTI can read the graph, else events, said in the log). A bad timer word, warmup, L2
mode, cold clock (or kernels where it cannot be read: warm L2, direct timer, no CUPTI) or an
unknown ZL_BACKEND is a pytest usage error (exit 4). --zl-time-torch (ZL_TIME_TORCH=off):
the torch baseline is not timed (identity time_torch=off; zl.timing.session.TorchBaselineOff). run_identity.json gets timer (cuda_graph|direct),
graph_capture (attempted|disabled|refused|unsupported), direct_repeat, graph_warmup_ms, l2
and, when cold, cold_clock. Fallback markers carry host_share=<pct>|unknown: the
measured host-dispatch share of the direct reading.
Under --overlap (ZL_DEVICE_OVERLAP > 1 with ZL_TIMING_LOCK) on torch.cuda, this process's CUDA
context is created holding the device's lock shared before the benchmark's conftest is imported,
and from the exit handler on the process holds the share until it is gone
(zl.timing.exclusive.run_shared, hold_share_at_exit).
The code lives in `zl/timing/`; this module only connects it to pytest.
"""

import pytest

from zl.timing import select, session


def pytest_addoption(parser):
    select.add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Under --overlap, this process's CUDA context first, under the device's shared lock."""
    session.context_first(early_config)


def pytest_configure(config):
    """Pick the timer and register the "zl_timing" session object that owns the patches."""
    session.start(config)
