"""The benchmark timer behind `_timing_plugin` and `_cudagraph_plugin`.

- `select`   read ZL_ENABLE_CUDAGRAPH / ZL_DIRECT_REPEAT (or their options) and pick the timer
             from the backend's capability.
- `direct`   the direct timer: upstream do_bench, optionally the median of N calls.
- `device`   Triton's active device interface (torch.cuda, torch_musa, ...) and its graph type.
- `capture`  one graph capture: warmup, scratch RNG, upstream do_bench_cudagraph's steps ported
             to any device interface.
- `kernel_clock` the cold graph read by CUPTI's per-kernel timestamps (ZL_COLD_CLOCK=kernels).
- `graph`    the do_bench replacement that captures per shape and falls back honestly.
- `backward` backward benchmarks run (and are captured) on a side stream.
- `session`  the objects the plugins register with pytest, and what they patch and undo.

Nothing here imports a `-p` plugin module: the plugins import this package, never each other.
"""

TIMING_LOG_TAG = "[timing-plugin]"
GRAPH_LOG_TAG = "[cudagraph-plugin]"
