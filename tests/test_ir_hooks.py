"""zl.ir.hooks: the collector chained onto Triton and FlagGems' Benchmark, restored after."""
import types

import numpy as np
import pytest

from harness.ir_replay import Launch, first_compile_payload
from zl.ir import collect
from zl.ir.hooks import IRSession, TritonHooks
from zl.ir.variants import replay_kwargs
from harness.fake_benchmark import install_benchmark


class OldStyleRuntime:
    """triton < 3.4: hooks are plain attributes (None or a callable)."""

    def __init__(self, prev_launch=None):
        self.kernel_load_end_hook = None
        self.launch_enter_hook = prev_launch


def fake_triton(listener=None, runtime=None, with_knobs=True):
    mod = types.SimpleNamespace(__version__="fake")
    if with_knobs:
        mod.knobs = types.SimpleNamespace(compilation=types.SimpleNamespace(listener=listener),
                                          runtime=runtime or OldStyleRuntime())
    return mod


@pytest.fixture
def start():
    """IRSession.start that closes every session it started when the test ends."""
    started = []

    def _start(*args, **kwargs):
        session = IRSession.start(*args, **kwargs)
        if session is not None:
            started.append(session)
        return session
    yield _start
    for session in started:
        session.close("test-cleanup")


def test_listener_and_old_style_hooks_are_chained_and_restored(start, tmp_path):
    seen = []
    prev_listener = lambda **kw: seen.append(("prev", kw["metadata"]["hash"]))  # noqa: E731
    prev_launch = lambda md: seen.append(("prev-launch", md.data["name"]))  # noqa: E731
    runtime = OldStyleRuntime(prev_launch)
    tri = fake_triton(prev_listener, runtime)
    session = start(tri, dump_dir=str(tmp_path / "ttgir"))
    assert session is not None
    collector = session.collector
    payload = first_compile_payload()
    tri.knobs.compilation.listener(**replay_kwargs(payload))
    assert seen == [("prev", payload["metadata"]["hash"])]
    assert payload["metadata"]["hash"] in collector.variants
    runtime.kernel_load_end_hook(None, 7, "fill_kernel", {}, payload["metadata"]["hash"])
    runtime.launch_enter_hook(Launch({"name": "fill_kernel", "function": 7}))
    assert seen[-1] == ("prev-launch", "fill_kernel")
    assert collector.counts[(collect.UNSCOPED, payload["metadata"]["hash"])] == [1, 0]
    session.close()
    assert tri.knobs.compilation.listener is prev_listener
    assert runtime.launch_enter_hook is prev_launch and runtime.kernel_load_end_hook is None
    assert (tmp_path / "ttgir" / "index.tsv").is_file()


def test_prev_listener_error_still_records(start, tmp_path):
    def broken(**kw):
        raise RuntimeError("someone else's listener")
    tri = fake_triton(broken)
    collector = start(tri, dump_dir=str(tmp_path / "ttgir")).collector
    with pytest.raises(RuntimeError):
        tri.knobs.compilation.listener(**replay_kwargs(first_compile_payload()))
    assert len(collector.variants) == 1


def test_real_triton_knobs_hookchain_and_autotuner_restored(start, tmp_path, monkeypatch):
    import triton
    from triton.runtime.autotuner import Autotuner
    knobs = triton.knobs
    seen_depth = []
    holder = {}

    def probe(self, *args, **kwargs):
        seen_depth.append(holder["collector"].sweep_depth)
        raise RuntimeError("probe")
    monkeypatch.setattr(Autotuner, "_bench", probe)
    before = (knobs.compilation.listener, list(knobs.runtime.launch_enter_hook.calls),
              list(knobs.runtime.kernel_load_end_hook.calls))
    session = start(triton, dump_dir=str(tmp_path / "ttgir"))
    assert session is not None
    collector = holder["collector"] = session.collector
    assert collector.on_launch in knobs.runtime.launch_enter_hook.calls
    assert collector.on_kernel_load in knobs.runtime.kernel_load_end_hook.calls
    assert knobs.compilation.listener is not before[0]
    with pytest.raises(RuntimeError, match="probe"):
        Autotuner._bench(object(), config=None)
    assert seen_depth == [1] and collector.sweep_depth == 0  # raised inside, unwound after
    session.close()
    after = (knobs.compilation.listener, list(knobs.runtime.launch_enter_hook.calls),
             list(knobs.runtime.kernel_load_end_hook.calls))
    assert after == before and Autotuner.__dict__["_bench"] is probe


def test_the_autotuners_reset_after_its_sweep_counts_as_the_sweep_and_is_restored(start, tmp_path, monkeypatch):
    """Triton's Autotuner zeroes reset_to_zero tensors once more after tuning, outside _bench
    (FlagGems' zero_ launches fill_scalar_kernel); a replay never tunes, so that launch must
    not count as the operator's or side A's IR differs from side B's."""
    import triton
    from triton.runtime.autotuner import Autotuner
    holder, depths = {}, []
    monkeypatch.setattr(Autotuner, "_bench", lambda self, *a, config, **k: float(config.kwargs["B"]))

    class Out:      # stands in for a tensor under use_gems(): zero_ launches FlagGems' fill
        def zero_(self):
            depths.append(("zero_", holder["c"].sweep_depth))
            holder["c"].on_launch(Launch({"name": "fill_scalar_kernel", "function": 9}))

    def launch_kernel(*args, **kwargs):
        depths.append(("kernel", holder["c"].sweep_depth))
        holder["c"].on_launch(Launch({"name": "pool_kernel", "function": 8}))

    def pool_kernel(x, out):
        pass
    fn = types.SimpleNamespace(fn=pool_kernel, run=launch_kernel, arg_names=["x", "out"])
    tuner = Autotuner(fn, ["x", "out"], [triton.Config({"B": 2}), triton.Config({"B": 1})], key=["x"],
                      reset_to_zero=["out"], restore_value=None)
    original = tuner.pre_hook
    session = start(triton, dump_dir=str(tmp_path / "ttgir"))
    collector = holder["c"] = session.collector
    tuner.run(7, Out())          # tunes: the sweep, its reset, then the measured launch
    tuner.run(7, Out())          # the key is known (as in a replay): no sweep, no reset
    tuner.pre_hook({"out": Out()})   # a plain pre_hook call is not the post-sweep reset
    assert depths == [("zero_", 1), ("kernel", 0), ("kernel", 0), ("zero_", 0)]
    by_name = {name: collector.counts[(collect.UNSCOPED, collector._hash_by_name(name))]
               for name in ("fill_scalar_kernel", "pool_kernel")}
    assert by_name == {"fill_scalar_kernel": [1, 1], "pool_kernel": [2, 0]}   # [measured, sweep]
    assert collector.sweep_depth == 0
    session.close()
    assert tuner.pre_hook is original


def test_a_tuner_whose_pre_hook_cannot_be_wrapped_is_reported(tmp_path, capsys):
    class SlottedTuner:
        __slots__ = ()
        pre_hook = staticmethod(lambda kwargs, reset_only=False: None)
    collector = collect.IRCollector(str(tmp_path / "ttgir"))
    TritonHooks(collector)._reset_is_sweep(SlottedTuner())
    assert collector.errors == 1
    assert "wrapping SlottedTuner.pre_hook (its post-sweep reset counts as the operator's)" in capsys.readouterr().err


def test_triton_without_knobs_fails_soft(start, capsys):
    assert start(fake_triton(with_knobs=False), dump_dir="/nonexistent") is None
    err = capsys.readouterr().err
    assert err.count("[ir-meta-plugin]") == 1 and "IR collection off" in err
    no_hooks = fake_triton(runtime=types.SimpleNamespace(launch_enter_hook=None))
    assert start(no_hooks, dump_dir="/nonexistent") is None
    assert no_hooks.knobs.compilation.listener is None
    assert "kernel_load_end_hook missing" in capsys.readouterr().err


def test_benchmark_run_wrapper_labels_launches_by_input(start, tmp_path, monkeypatch):
    collector = collect.IRCollector(str(tmp_path / "ttgir"))
    installer = TritonHooks(collector)

    class Benchmark:
        def get_input_iter(self, dtype):
            for shape in ((16, 16), (32, 8)):
                collector.on_launch(Launch({"name": "randn", "function": 1}))  # input construction
                yield (np.zeros(shape, dtype), 1)

        def run(self):
            for inp in self.get_input_iter(np.float32):
                for _ in range(3):
                    collector.on_launch(Launch({"name": "op", "function": 2}))
            collector.on_launch(Launch({"name": "op", "function": 2}))  # after the loop

    install_benchmark(monkeypatch, Benchmark)
    collector.functions.update({1: "h_randn", 2: "h_op"})
    original_run = Benchmark.run
    installer.patch_benchmarks()
    installer.patch_benchmarks()  # idempotent
    Benchmark().run()
    counts = {k: v for k, v in collector.counts.items()}
    assert counts[("16x16", "h_randn")] == [1, 0] and counts[("32x8", "h_randn")] == [1, 0]
    assert counts[("16x16", "h_op")] == [3, 0]
    assert counts[("32x8", "h_op")] == [3, 0]
    assert counts[(collect.UNSCOPED, "h_op")] == [1, 0]
    installer.uninstall()
    assert Benchmark.run is original_run



def test_graph_capture_begin_marks_its_launches_as_the_prologue_and_is_restored(monkeypatch, tmp_path):
    from torch.cuda.graphs import CUDAGraph
    collector = collect.IRCollector(str(tmp_path / "ttgir"))
    depths = []

    def capture_begin(graph, *args, **kwargs):  # stands in for torch's: it launches fill_ twice
        for _ in range(2):
            depths.append(collector.prologue_depth)
            collector.on_launch(Launch({"name": "fill_scalar_kernel", "function": 9}))
    monkeypatch.setattr(CUDAGraph, "capture_begin", capture_begin)
    hooks = TritonHooks(collector)
    hooks._wrap_graph_capture()
    assert CUDAGraph.capture_begin is not capture_begin
    CUDAGraph.capture_begin(object(), capture_error_mode="global")
    collector.on_launch(Launch({"name": "fill_scalar_kernel", "function": 9}))  # outside: the operator's
    assert depths == [1, 1] and collector.prologue_depth == 0
    assert sum(collector.prologue.values()) == 2
    assert sum(n for n, _ in collector.counts.values()) == 1
    hooks.uninstall()
    assert CUDAGraph.capture_begin is capture_begin


def test_registers_and_spills_come_from_the_kernel_triton_just_loaded(start, tmp_path, monkeypatch):
    """Triton's own CompiledKernel._init_handles, with a driver that loads nothing: it sets
    n_regs/n_spills from load_binary, then calls the load hook (a HookChain) without the
    kernel; the dump's index.tsv carries them beside the compile metadata's shared bytes. A
    load that no CompiledKernel made (a replayed payload) records nothing: empty cells."""
    import collections

    import triton
    from triton.compiler import compiler as tc
    from triton.runtime import driver as driver_config

    from harness.ir_replay import index_rows

    payload = first_compile_payload()
    h = payload["metadata"]["hash"]
    ttgir = tmp_path / "cache" / "k.ttgir"
    ttgir.parent.mkdir()
    ttgir.write_text("module { tt.func @fill_kernel() }\n")
    utils = types.SimpleNamespace(get_device_properties=lambda device: {"max_shared_mem": 1 << 20},
                                  load_binary=lambda name, binary, shared, device: (11, 22, 40, 3, 1024))
    monkeypatch.setattr(driver_config, "_active", types.SimpleNamespace(
        get_current_device=lambda: 0, launcher_cls=lambda src, metadata: None, utils=utils))
    Meta = collections.namedtuple("Meta", "name shared num_warps warp_size target")
    kernel = object.__new__(tc.CompiledKernel)
    kernel.__dict__.update(module=None, function=None, _run=None, src=None, hash=h, name="fill_kernel",
                           kernel=b"", metadata_group={}, metadata=Meta("fill_kernel", 256, 4, 32, None))
    session = start(triton, dump_dir=str(tmp_path / "ttgir"))
    try:
        kernel._init_handles()
    finally:
        kernel.module = None   # nothing was loaded: Triton's __del__ must not unload it
    collector = session.collector
    assert collector.resources == {h: {"n_regs": 40, "n_spills": 3}}
    collector.on_kernel_load(None, 23, "fill_kernel", {}, "replayed" + "0" * 56)
    assert collector.resources["replayed" + "0" * 56] == {}
    collector.on_compile(**replay_kwargs(payload, {"fill_kernel.ttgir": str(ttgir)}))
    collector.on_launch(Launch({"name": "fill_kernel", "function": 22}))
    session.close("test")
    _, rows = index_rows(tmp_path / "ttgir")
    [row] = [r for r in rows if r["cache_hash"] == h]
    assert (row["file"], row["shared"], row["n_regs"], row["n_spills"]) == ("w4s3.ttgir", "0", "40", "3")
