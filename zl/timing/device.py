"""Triton's active device interface and what it offers for graph timing.

Streams, events and graphs come from Triton's active device interface (torch.cuda on
NVIDIA, torch_musa on MThreads), never from torch.cuda by name: upstream hard-codes
torch.cuda, so on MUSA every capture raised and every row silently fell back while the
log claimed graph timing.
"""

from __future__ import annotations

import sys


class NoGraphSupport(RuntimeError):
    """The active device interface exposes no graph type to capture into."""


def device_interface():
    """Triton's active device interface: torch.cuda on NVIDIA, torch_musa on MThreads."""
    from triton.runtime import driver
    return driver.active.get_device_interface()


def interface_name() -> str:
    """Name of Triton's active device interface for log lines; never raises."""
    try:
        di = device_interface()
    except Exception as exc:  # no driver yet (e.g. CPU before the harness installs one)
        return f"<no active driver: {type(exc).__name__}>"
    return getattr(di, "__name__", None) or type(di).__name__


def is_torch_cuda(di) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and di is getattr(torch, "cuda", None)


def graph_type(di):
    for name in ("CUDAGraph", "MUSAGraph", "XPUGraph", "Graph"):
        cls = getattr(di, name, None)
        if cls is not None:
            return cls
    raise NoGraphSupport(f"device interface {getattr(di, '__name__', type(di).__name__)} "
                         "exposes no graph type")


def interface_label() -> str:
    """'torch.cuda (upstream do_bench_cudagraph)' etc., for the configure log line."""
    try:
        di = device_interface()
    except Exception as exc:
        return f"<no active driver: {type(exc).__name__}>"
    name = getattr(di, "__name__", None) or type(di).__name__
    if is_torch_cuda(di):
        return f"{name} (upstream do_bench_cudagraph)"
    try:
        graph_type(di)
    except NoGraphSupport:
        return f"{name} (no graph type: every shape will fall back)"
    return f"{name} (graph timer through the device interface)"
