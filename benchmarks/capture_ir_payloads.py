"""Record real Triton listener/hook payloads + TTGIR text on a GPU (run on the H200).

Only the project's own tiny kernels are compiled here (nothing from FlagGems), so the
output can be committed as test fixtures:

    $OUT/payloads_h200.json   -> tests/fixtures/ir/payloads_h200.json (as is)
    $OUT/plugin_tree.tar.gz   the real IR plugin dump (zl.ir) of the same session (evidence)
    $OUT/capture.log          versions, counts, the plugin's own log lines

Kernels: `fill_kernel` (jit, constexpr BLOCK; launched once per input like an input
builder), `scale_kernel` (jit) launched with fp16 and fp32 and with an aligned and an
unaligned x pointer (dtype and alignment collisions), and `tile_kernel` (autotuned,
3 configs differing in BLOCK_SIZE_M and num_warps: sweep losers vs the winner).
The event stream has the structure tests/harness/ir_replay.py::replay reads.

    python benchmarks/capture_ir_payloads.py --out DIR   (default $OUT, else ./capture_out;
                                                          needs a GPU, triton 3.6 or 3.9)
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_ap = argparse.ArgumentParser(prog="capture_ir_payloads.py", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
_ap.add_argument("--out", default=os.environ.get("OUT") or "capture_out",
                 help="folder for payloads_h200.json, plugin_tree.tar.gz and capture.log")
OUT = Path(_ap.parse_args().out)
OUT.mkdir(parents=True, exist_ok=True)
# A private cache so every variant really compiles (cache_hit False) in this process.
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="zl_ir_capture_cache_"))
os.environ.setdefault("ZL_IR_LEVELS", "ttgir,llir")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from zl.ir.collect import UNSCOPED, parse_levels, shape_label  # noqa: E402
from zl.ir.hooks import IRSession  # noqa: E402
from zl.ir.variants import serialise_payload  # noqa: E402

events = []


def recorder_listener(*, src, metadata, metadata_group, times, cache_hit, **_):
    payload = serialise_payload(src, metadata, metadata_group, cache_hit)
    ir = {}
    for name, path in metadata_group.items():
        ext = name.rsplit(".", 1)[-1]
        if ext in ("ttgir", "llir"):
            ir[ext] = Path(path).read_text()
    events.append({"kind": "compile", "payload": payload, "ir": ir})


handles = {}


def recorder_load(module, function, name, metadata_group, hash, *a, **k):
    fid = handles.setdefault(function, len(handles) + 1)
    events.append({"kind": "load", "function": fid, "name": str(name), "hash": str(hash)})


def recorder_launch(metadata, *a, **k):
    data = getattr(metadata, "data", metadata) or {}
    fid = handles.get(data.get("function"), -1)
    events.append({"kind": "launch", "function": fid, "name": str(data.get("name"))})


@triton.jit
def fill_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(out_ptr.dtype.element_ty), mask=offs < n)


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * 2, mask=mask)


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE_M": 32}, num_warps=2),
        triton.Config({"BLOCK_SIZE_M": 64}, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 128}, num_warps=4),
    ],
    key=["M"],
)
@triton.jit
def tile_kernel(a_ptr, out_ptr, M, N: tl.constexpr, BLOCK_SIZE_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    cols = tl.arange(0, N)
    mask = rows[:, None] < M
    a = tl.load(a_ptr + rows[:, None] * N + cols[None, :], mask=mask)
    s = tl.sum(a, axis=1)  # a reduction: layouts change, convert_layout likely appears
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], a - s[:, None], mask=mask)


def main() -> int:
    log = io.StringIO()
    dev = "cuda"
    session = IRSession.start(triton, dump_dir=str(OUT / "plugin_ttgir"),
                              levels=parse_levels(os.environ["ZL_IR_LEVELS"]))
    collector = session.collector
    knobs = triton.knobs
    prev = knobs.compilation.listener

    def listener(**kw):
        recorder_listener(**kw)
        if prev is not None:
            prev(**kw)
    knobs.compilation.listener = listener
    knobs.runtime.kernel_load_end_hook.add(recorder_load)
    knobs.runtime.launch_enter_hook.add(recorder_launch)

    def sweep(flag):
        events.append({"kind": "sweep_begin" if flag else "sweep_end"})

    orig_bench = triton.runtime.autotuner.Autotuner._bench

    def _bench(self, *a, **k):
        sweep(True)
        try:
            return orig_bench(self, *a, **k)
        finally:
            sweep(False)
    triton.runtime.autotuner.Autotuner._bench = _bench

    def inputs():
        # Like a FlagGems Benchmark: build each input with a kernel launched once.
        for n, m in ((4096, 64), (65536, 256)):
            x16 = torch.empty(n + 8, device=dev, dtype=torch.float16)
            fill_kernel[(triton.cdiv(n + 8, 1024),)](x16, n + 8, BLOCK=1024)
            yield (x16[:n], torch.randn(m, 64, device=dev, dtype=torch.float32))

    for x16, a in collector.track_inputs(_tagged(inputs())):
        n = x16.numel()
        y16 = torch.empty_like(x16)
        x32 = x16.float()
        y32 = torch.empty_like(x32)
        grid = (triton.cdiv(n, 1024),)
        for _ in range(10):
            scale_kernel[grid](x16, y16, n, BLOCK=1024)           # fp16, aligned
            scale_kernel[grid](x32, y32, n, BLOCK=1024)           # fp32, aligned
            scale_kernel[grid](x16[1:], y16[1:], n - 1, BLOCK=1024)  # fp16, x not 16-byte aligned
        out = torch.empty_like(a)
        for _ in range(20):
            tile_kernel[lambda meta: (triton.cdiv(a.shape[0], meta["BLOCK_SIZE_M"]),)](a, out, a.shape[0], N=64)
        torch.cuda.synchronize()

    triton.runtime.autotuner.Autotuner._bench = orig_bench
    knobs.runtime.launch_enter_hook.remove(recorder_launch)
    knobs.runtime.kernel_load_end_hook.remove(recorder_load)
    knobs.compilation.listener = prev
    summary = session.close("capture")

    doc = {
        "source": "benchmarks/capture_ir_payloads.py on a GPU",
        "triton_version": triton.__version__,
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "events": events,
    }
    (OUT / "payloads_h200.json").write_text(json.dumps(doc, indent=1))
    with tarfile.open(OUT / "plugin_tree.tar.gz", "w:gz") as tar:
        tar.add(OUT / "plugin_ttgir", arcname="ttgir")
    kinds = {}
    for ev in events:
        kinds[ev["kind"]] = kinds.get(ev["kind"], 0) + 1
    print(f"triton={triton.__version__} torch={torch.__version__} device={doc['device']}", file=log)
    print(f"events={kinds}", file=log)
    print(f"plugin summary={summary}", file=log)
    for p in sorted((OUT / "plugin_ttgir").rglob("*")):
        print(p.relative_to(OUT), file=log)
    print((OUT / "plugin_ttgir" / "index.tsv").read_text(), file=log)
    (OUT / "capture.log").write_text(log.getvalue())
    print(log.getvalue())
    import shutil
    shutil.rmtree(OUT / "plugin_ttgir")  # only 8 files come back: keep the tarball
    return 0


def _tagged(it):
    """Mirror track_inputs into the recorded event stream (begin_input/end_input)."""
    for item in _with_events(it):
        yield item


def _with_events(it):
    it = iter(it)
    while True:
        events.append({"kind": "begin_input"})
        try:
            item = next(it)
        except StopIteration:
            events.append({"kind": "end_input", "label": UNSCOPED})
            return
        events.append({"kind": "end_input", "label": shape_label(item)})
        yield item


if __name__ == "__main__":
    sys.exit(main())
