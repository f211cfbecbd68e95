"""Helper, not a tool: CUDA-graph helpers shared by graph_timer_cost.py's cold stage and
cold_l2_gap.py (GPU only).

`capture_calls` and `replay_ms` build and time the unrolled graphs that both set beside
CUPTI; `graph_timer_ms` is zl_bench's graph timer on one callable, read as a run reads it.
"""

from __future__ import annotations


def capture_calls(body, n: int):
    """A CUDA graph of `n` calls of `body`."""
    import torch
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            body()
    return g


def replay_ms(graph, begin, end) -> float:
    """One replay of `graph` between the timing events `begin` and `end`, in ms."""
    begin.record()
    graph.replay()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end)


def graph_timer_ms(fn, l2: str, op: str, clock: str = "events") -> float:
    """The graph timer (ZL_L2=`l2`, ZL_COLD_CLOCK=`clock`) on `fn` through do_bench, median
    in ms; `op` names it in the timer's log lines."""
    import triton.testing as tt
    from zl.backends import get_backend
    from zl.timing.graph import GraphTimer

    timer = GraphTimer(get_backend("cuda"), l2=l2, cold_clock=clock)
    timer.install()
    try:
        timer.op = op
        return tt.do_bench(fn, warmup=1000, rep=100, return_mode="median")
    finally:
        timer.uninstall()
