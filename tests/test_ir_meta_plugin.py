"""_ir_meta_plugin: listener/hook payload replay, naming, index.tsv, chaining, fail-soft.

On the CPU the interpreter compiles nothing, so the collector is driven with
recorded payloads (tests/fixtures/ir/payloads*.json: hand-built to the documented
structure until benchmarks/capture_ir_payloads.py output from an H200 is added).
"""
import json
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import _ir_meta_plugin as plugin
from zl.ir import fingerprint as fp
from zl.ir import naming
from zl.ir.variants import replay_kwargs, variant_record

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ir"
HANDBUILT = FIXTURES / "payloads_handbuilt.json"
ALL_FIXTURES = sorted(FIXTURES.glob("payloads*.json"))


class Launch:
    """Stands in for triton's LazyDict: the hook reads `.data`."""

    def __init__(self, data):
        self.data = data


def replay(collector, doc, tmp_path):
    """Feed recorded events to the collector the way Triton would call it."""
    ir_dir = tmp_path / "cache"
    ir_dir.mkdir(exist_ok=True)
    for ev in doc["events"]:
        kind = ev["kind"]
        if kind == "compile":
            payload = ev["payload"]
            group = dict(payload["metadata_group"])
            h = payload["metadata"]["hash"]
            for ext, text in (ev.get("ir") or {}).items():
                name = next(k for k in group if k.endswith("." + ext))
                path = ir_dir / f"{h}.{ext}"
                path.write_text(text)
                group[name] = str(path)
            collector.on_compile(**replay_kwargs(payload, group))
        elif kind == "load":
            collector.on_kernel_load(None, ev["function"], ev["name"], {}, ev["hash"])
        elif kind == "launch":
            collector.on_launch(Launch({"name": ev["name"], "function": ev["function"], "stream": 0}))
        elif kind == "begin_input":
            collector.begin_input()
        elif kind == "end_input":
            collector.end_input(ev["label"])
        elif kind == "sweep_begin":
            collector.sweep_depth += 1
        elif kind == "sweep_end":
            collector.sweep_depth -= 1
        else:
            raise AssertionError(f"unknown event {kind}")


def index_rows(dump_dir):
    lines = (Path(dump_dir) / "index.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    return header, [dict(zip(header, line.split("\t"))) for line in lines[1:]]


@pytest.fixture
def handbuilt_dump(tmp_path):
    collector = plugin.IRCollector(str(tmp_path / "run" / "ttgir"), ["ttgir", "llir"])
    replay(collector, json.loads(HANDBUILT.read_text()), tmp_path)
    summary = collector.dump("test")
    return collector, tmp_path / "run" / "ttgir", summary


def test_naming_breaks_collisions_by_dtype_then_alignment(handbuilt_dump):
    _, root, summary = handbuilt_dump
    scale = sorted(p.name for p in (root / "4096" / "scale_kernel").glob("*.ttgir"))
    # Same constexprs/warps/stages: fp16 vs fp32 first, then the fp16 pair by x_ptr alignment.
    assert scale == ["w4s3__fp16.ttgir", "w4s3__fp16__xpdiv16.ttgir", "w4s3__fp32.ttgir"]
    assert (root / "4096" / "fill_kernel" / "w4s3.ttgir").is_file()
    # Only the measured autotune winner of each shape is dumped.
    assert sorted(p.name for p in (root / "4096" / "tile_kernel").iterdir()) == ["w4s3.llir", "w4s3.ttgir"]
    assert "ttg.convert_layout" in (root / "4096" / "tile_kernel" / "w4s3.ttgir").read_text()
    assert [p.name for p in (root / "64x64" / "tile_kernel").glob("*.ttgir")] == ["w4s3.ttgir"]
    # Extra level beside the TTGIR, same stem.
    assert (root / "4096" / "tile_kernel" / "w4s3.llir").is_file()
    assert summary["files"] == 6 and summary["missing"] == []


def test_index_tsv_rows_counts_and_placeholders(handbuilt_dump):
    _, root, _ = handbuilt_dump
    header, rows = index_rows(root)
    assert header[:4] == ["shape", "kernel", "file", "launches"]
    assert {"sweep_launches", "num_warps", "num_stages", "constexprs", "dtypes", "specialization",
            "cache_hash", "ttgir_cache"} <= set(header)
    by = {(r["shape"], r["kernel"], r["file"], r["constexprs"]): r for r in rows}
    fill = by[("4096", "fill_kernel", "w4s3.ttgir", '{"BLOCK":1024}')]
    assert fill["launches"] == "1"  # built while the input was produced, credited to that input
    win = by[("4096", "tile_kernel", "w4s3.ttgir", '{"BLOCK_SIZE_M":64}')]
    assert (win["launches"], win["sweep_launches"], win["num_warps"]) == ("20", "5", "4")
    assert win["ttgir_cache"].endswith(".ttgir")
    losers = [r for r in rows if r["file"] == "(autotune sweep only, not dumped)"]
    assert sorted((r["shape"], r["constexprs"], r["sweep_launches"]) for r in losers) == [
        ("4096", '{"BLOCK_SIZE_M":128}', "5"), ("4096", '{"BLOCK_SIZE_M":32}', "5"),
        ("64x64", '{"BLOCK_SIZE_M":32}', "4")]
    never = [r for r in rows if r["shape"] == "-"]
    assert [(r["file"], r["constexprs"], r["num_warps"]) for r in never] == [
        ("(compiled, never launched)", '{"BLOCK_SIZE_M":256}', "8")]
    scale16 = by[("4096", "scale_kernel", "w4s3__fp16__xpdiv16.ttgir", '{"BLOCK":1024}')]
    assert json.loads(scale16["dtypes"]) == {"x_ptr": "*fp16", "y_ptr": "*fp16", "n": "i32"}
    assert json.loads(scale16["specialization"])["x_ptr"] == [["tt.divisibility", 16]]
    # Every named file in the index exists; every dumped ttgir is indexed.
    named = {f"{r['shape']}/{r['kernel']}/{r['file']}" for r in rows if not r["file"].startswith("(")}
    dumped = {p.relative_to(root).as_posix() for p in root.rglob("*.ttgir")}
    assert named == dumped


def test_dumped_tree_feeds_fingerprint_and_convert_scoping(handbuilt_dump, tmp_path):
    _, root, _ = handbuilt_dump
    run = root.parent
    out = fp.convert_count(run, launch_floor=1)
    assert out["scope_complete"] is True
    # fill_kernel (2 converts, launched once) is input construction: excluded.
    assert out["total_convert_count"] == 2 + 1 + 3
    assert out["measured_convert_count"] == 1 + 3
    assert [e["file"] for e in out["excluded_unmeasured"]] == ["4096/fill_kernel/w4s3.ttgir"]
    assert len(fp.fingerprint(run)) == 64


def test_naming_md_legend(handbuilt_dump):
    _, root, _ = handbuilt_dump
    text = (root / "naming.md").read_text()
    assert "| `BSM` | constexpr `BLOCK_SIZE_M` |" in text
    assert "| `xp` | argument `x_ptr` (alignment suffix) |" in text
    assert "| `w` | num_warps |" in text


def _v(h, consts, warps=4, stages=3, sig=None, spec=None):
    return {"hash": h, "kernel": "k", "constexprs": consts, "num_warps": warps, "num_stages": stages,
            "signature": sig or {"x": "*fp16"}, "specialization": spec or {}}


def test_naming_only_differing_params_and_hash_prefix_last():
    vs = [_v("aa11" * 16, {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 32, "GROUP": 8}, warps=4),
          _v("bb22" * 16, {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 32, "GROUP": 8}, warps=8)]
    assert sorted(naming.name_group(vs).values()) == ["BSM128_w8", "BSM64_w4"]
    twins = [_v("1234abcd" + "0" * 56, {"B": 1}), _v("1234abcd" + "f" * 56, {"B": 1})]
    names = naming.name_group(twins)
    assert sorted(names.values()) == ["w4s3__h1234abcd0000", "w4s3__h1234abcdffff"]
    assert naming.name_group([_v("c" * 64, {"B": 1})]) == {"c" * 64: "w4s3"}


def test_abbreviation_clash_keeps_full_names():
    assert naming.abbreviate("BLOCK_SIZE_M") == "BSM" and naming.abbreviate("BLOCK") == "BLOCK"
    abbr = naming.legend(["BLOCK_SIZE_M", "BATCH_SIZE_M", "NUM_WARPS_X", "w_x"])
    assert abbr["BLOCK_SIZE_M"] == "BLOCK_SIZE_M" and abbr["BATCH_SIZE_M"] == "BATCH_SIZE_M"
    assert abbr["NUM_WARPS_X"] == "NWX"
    assert abbr["w_x"] == "wx"


def test_zero_kernel_run_dumps_index_but_no_comparable_ir(tmp_path):
    collector = plugin.IRCollector(str(tmp_path / "r" / "ttgir"))
    summary = collector.dump()
    assert summary["files"] == 0
    header, rows = index_rows(tmp_path / "r" / "ttgir")
    assert header[0] == "shape" and rows == []
    assert (tmp_path / "r" / "ttgir" / "naming.md").is_file()
    with pytest.raises(fp.NoIRError):
        fp.fingerprint(tmp_path / "r")
    assert collector.dump() is None  # once only


def test_dump_skipped_in_forked_child_and_unreadable_ttgir_is_indexed(tmp_path):
    collector = plugin.IRCollector(str(tmp_path / "ttgir"))
    collector.pid = -1
    assert collector.dump() is None and not (tmp_path / "ttgir").exists()
    doc = json.loads(HANDBUILT.read_text())
    c2 = plugin.IRCollector(str(tmp_path / "t2"))
    for ev in doc["events"]:
        if ev["kind"] == "compile":  # paths point at a cache that no longer exists
            c2.on_compile(**replay_kwargs(ev["payload"]))
        elif ev["kind"] == "load":
            c2.on_kernel_load(None, ev["function"], ev["name"], {}, ev["hash"])
        elif ev["kind"] == "launch":
            c2.on_launch(Launch({"name": ev["name"], "function": ev["function"]}))
    summary = c2.dump()
    assert summary["files"] == 0 and summary["missing"]
    _, rows = index_rows(tmp_path / "t2")
    assert {r["file"] for r in rows if r["launches"] != "0"} == {"(ttgir not readable from the Triton cache)"}


def test_launch_of_unseen_variant_is_indexed_not_dropped(tmp_path):
    collector = plugin.IRCollector(str(tmp_path / "ttgir"))
    collector.end_input("8x8")
    collector.on_launch(Launch({"name": "early_kernel", "function": 999}))
    collector.on_launch(None)  # malformed payloads never raise into Triton
    collector.dump()
    _, rows = index_rows(tmp_path / "ttgir")
    row = next(r for r in rows if r["kernel"] == "early_kernel")
    assert (row["shape"], row["launches"], row["file"]) == ("8x8", "1", plugin._dump.PH_UNKNOWN)


def test_launch_without_function_handle_falls_back_to_unique_name():
    collector = plugin.IRCollector(None)
    collector.on_kernel_load(None, None, "solo", {}, "h1")
    collector.on_launch(Launch({"name": "solo"}))
    collector.on_kernel_load(None, 5, "twin", {}, "h2")
    collector.on_kernel_load(None, 6, "twin", {}, "h3")
    collector.on_launch(Launch({"name": "twin"}))  # ambiguous: never guessed
    assert collector.counts[(plugin.UNSCOPED, "h1")] == [1, 0]
    assert collector.counts[(plugin.UNSCOPED, "unseen:twin")] == [1, 0]


def test_shape_label():
    a, b = np.zeros((64, 128), np.float16), np.zeros((128, 32), np.float16)
    assert plugin.shape_label((np.zeros((1024, 1024)), 1)) == "1024x1024"
    assert plugin.shape_label((a, b, {"alpha": 1.0})) == "64x128_128x32"
    assert plugin.shape_label((np.float32(1.0).reshape(()),)) == "scalar"
    assert plugin.shape_label((3, "x")) == "noshape"
    long = plugin.shape_label([np.zeros((1,) * 1)] * 80)
    assert len(long) <= plugin.LABEL_MAX and "-h" in long


def test_parse_levels():
    assert plugin.parse_levels("") == ["ttgir"]
    assert plugin.parse_levels("llir, ptx,ttgir") == ["ttgir", "llir", "ptx"]
    for bad in ("cubin", "ll-ir", "json"):
        with pytest.raises(plugin.IRLevelsError):
            plugin.parse_levels(bad)


# --- installation against Triton ------------------------------------------------------

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
def clean_state():
    yield
    plugin.deactivate("test-cleanup")


def _first_compile_payload():
    doc = json.loads(HANDBUILT.read_text())
    return next(ev["payload"] for ev in doc["events"] if ev["kind"] == "compile")


def test_listener_and_old_style_hooks_are_chained_and_restored(clean_state, tmp_path):
    seen = []
    prev_listener = lambda **kw: seen.append(("prev", kw["metadata"]["hash"]))  # noqa: E731
    prev_launch = lambda md: seen.append(("prev-launch", md.data["name"]))  # noqa: E731
    runtime = OldStyleRuntime(prev_launch)
    tri = fake_triton(prev_listener, runtime)
    collector = plugin.activate(tri, dump_dir=str(tmp_path / "ttgir"))
    assert collector is not None
    payload = _first_compile_payload()
    tri.knobs.compilation.listener(**replay_kwargs(payload))
    assert seen == [("prev", payload["metadata"]["hash"])]
    assert payload["metadata"]["hash"] in collector.variants
    runtime.kernel_load_end_hook(None, 7, "fill_kernel", {}, payload["metadata"]["hash"])
    runtime.launch_enter_hook(Launch({"name": "fill_kernel", "function": 7}))
    assert seen[-1] == ("prev-launch", "fill_kernel")
    assert collector.counts[(plugin.UNSCOPED, payload["metadata"]["hash"])] == [1, 0]
    plugin.deactivate()
    assert tri.knobs.compilation.listener is prev_listener
    assert runtime.launch_enter_hook is prev_launch and runtime.kernel_load_end_hook is None
    assert (tmp_path / "ttgir" / "index.tsv").is_file()


def test_prev_listener_error_still_records(clean_state, tmp_path):
    def broken(**kw):
        raise RuntimeError("someone else's listener")
    tri = fake_triton(broken)
    collector = plugin.activate(tri, dump_dir=str(tmp_path / "ttgir"))
    with pytest.raises(RuntimeError):
        tri.knobs.compilation.listener(**replay_kwargs(_first_compile_payload()))
    assert len(collector.variants) == 1


def test_real_triton_knobs_hookchain_and_autotuner_restored(clean_state, tmp_path, monkeypatch):
    import triton
    from triton.runtime.autotuner import Autotuner
    knobs = triton.knobs
    seen_depth = []

    def probe(self, *args, **kwargs):
        seen_depth.append(plugin._state["collector"].sweep_depth)
        raise RuntimeError("probe")
    monkeypatch.setattr(Autotuner, "_bench", probe)
    before = (knobs.compilation.listener, list(knobs.runtime.launch_enter_hook.calls),
              list(knobs.runtime.kernel_load_end_hook.calls))
    collector = plugin.activate(triton, dump_dir=str(tmp_path / "ttgir"))
    assert collector is not None
    assert collector.on_launch in knobs.runtime.launch_enter_hook.calls
    assert collector.on_kernel_load in knobs.runtime.kernel_load_end_hook.calls
    assert knobs.compilation.listener is not before[0]
    with pytest.raises(RuntimeError, match="probe"):
        Autotuner._bench(object(), config=None)
    assert seen_depth == [1] and collector.sweep_depth == 0  # raised inside, unwound after
    plugin.deactivate()
    after = (knobs.compilation.listener, list(knobs.runtime.launch_enter_hook.calls),
             list(knobs.runtime.kernel_load_end_hook.calls))
    assert after == before and Autotuner.__dict__["_bench"] is probe


def test_triton_without_knobs_fails_soft(clean_state, capsys):
    assert plugin.activate(fake_triton(with_knobs=False), dump_dir="/nonexistent") is None
    err = capsys.readouterr().err
    assert err.count("[ir-meta-plugin]") == 1 and "IR collection off" in err
    no_hooks = fake_triton(runtime=types.SimpleNamespace(launch_enter_hook=None))
    assert plugin.activate(no_hooks, dump_dir="/nonexistent") is None
    assert no_hooks.knobs.compilation.listener is None
    assert "kernel_load_end_hook missing" in capsys.readouterr().err


def test_benchmark_run_wrapper_labels_launches_by_input(clean_state, tmp_path, monkeypatch):
    collector = plugin.IRCollector(str(tmp_path / "ttgir"))
    installer = plugin._Installer(collector)

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

    mod = types.ModuleType("fakebench.base")
    mod.Benchmark = Benchmark
    monkeypatch.setitem(sys.modules, "fakebench.base", mod)
    collector.functions.update({1: "h_randn", 2: "h_op"})
    original_run = Benchmark.run
    installer.patch_benchmarks()
    installer.patch_benchmarks()  # idempotent
    Benchmark().run()
    counts = {k: v for k, v in collector.counts.items()}
    assert counts[("16x16", "h_randn")] == [1, 0] and counts[("32x8", "h_randn")] == [1, 0]
    assert counts[("16x16", "h_op")] == [3, 0]
    assert counts[("32x8", "h_op")] == [3, 0]
    assert counts[(plugin.UNSCOPED, "h_op")] == [1, 0]
    installer.uninstall()
    assert Benchmark.run is original_run


def test_pytest_configure_switches(monkeypatch, tmp_path, clean_state):
    monkeypatch.setenv(plugin.DUMP_DIR_ENV, str(tmp_path / "ttgir"))
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    plugin.pytest_configure(None)
    assert plugin._state["collector"] is None
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.delenv(plugin.DUMP_DIR_ENV)
    plugin.pytest_configure(None)
    assert plugin._state["collector"] is None
    monkeypatch.setenv(plugin.DUMP_DIR_ENV, str(tmp_path / "ttgir"))
    monkeypatch.setenv(plugin.LEVELS_ENV, "ttgir,cubin")
    with pytest.raises(pytest.UsageError, match="ZL_IR_LEVELS"):
        plugin.pytest_configure(None)
    monkeypatch.setenv(plugin.LEVELS_ENV, "llir")
    plugin.pytest_configure(None)
    assert plugin._state["collector"].levels == ["ttgir", "llir"]
    plugin.pytest_unconfigure(None)
    assert plugin._state["collector"] is None and (tmp_path / "ttgir" / "index.tsv").is_file()


@pytest.mark.parametrize("fixture", ALL_FIXTURES, ids=lambda p: p.name)
def test_every_fixture_dumps_consistent_unique_names(fixture, tmp_path):
    """Invariants that must hold for hand-built and H200-recorded payloads alike."""
    doc = json.loads(fixture.read_text())
    collector = plugin.IRCollector(str(tmp_path / "run" / "ttgir"))
    replay(collector, doc, tmp_path)
    summary = collector.dump()
    root = tmp_path / "run" / "ttgir"
    _, rows = index_rows(root)
    launched = [r for r in rows if int(r["launches"]) > 0 and r["file"] != plugin._dump.PH_UNKNOWN]
    assert launched and all(not r["file"].startswith("(") for r in launched)
    names = [(r["shape"], r["kernel"], r["file"]) for r in launched]
    assert len(names) == len(set(names))
    assert summary["files"] == len(list(root.rglob("*.ttgir")))
    compiled = {ev["payload"]["metadata"]["hash"] for ev in doc["events"] if ev["kind"] == "compile"}
    assert compiled <= {r["cache_hash"] for r in rows}


def test_plugin_loads_under_the_cpu_harness(zl_run):
    """run_pytest.sh on the fake tree with the plugin in the plan: the run is unharmed."""
    res = zl_run(OP="softmax", OP_FILE="softmax", SHAPE_MODE="upstream")
    assert res.returncode == 0, res.explain()
    assert "Traceback" not in res.stderr
    ttgir = res.out_dir / "ttgir"
    assert (ttgir / "index.tsv").is_file() and (ttgir / "naming.md").is_file(), res.explain()
    # The interpreter compiles nothing: an index with no rows, and no comparable IR.
    assert "[ir-meta-plugin] dumped 0 TTGIR file(s)" in res.output
    assert fp.read_index(ttgir) == []
