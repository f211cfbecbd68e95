"""zl.ir.collect + zl.ir.dump + zl.ir.naming: payload replay, naming, index.tsv, fail-soft.

On the CPU the interpreter compiles nothing, so the collector is driven with
recorded payloads (tests/fixtures/ir/payloads*.json: hand-built to the documented
structure until benchmarks/capture_ir_payloads.py output from an H200 is added).
"""
import json

import numpy as np
import pytest

from harness.ir_replay import ALL_FIXTURES, HANDBUILT, Launch, index_rows, replay
from zl.ir import collect
from zl.ir import dump
from zl.ir import fingerprint as fp
from zl.ir import naming
from zl.ir.variants import replay_kwargs


@pytest.fixture
def handbuilt_dump(tmp_path):
    collector = collect.IRCollector(str(tmp_path / "run" / "ttgir"), ["ttgir", "llir"])
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
    # shared bytes from the compile metadata; registers and spills come only from a kernel
    # Triton loaded (zl.ir.collect.loaded_resources), which a replay never is: empty, not 0
    assert (win["shared"], win["n_regs"], win["n_spills"]) == ("0", "", "")
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
    collector = collect.IRCollector(str(tmp_path / "r" / "ttgir"))
    summary = collector.dump()
    assert summary["files"] == 0
    header, rows = index_rows(tmp_path / "r" / "ttgir")
    assert header[0] == "shape" and rows == []
    assert (tmp_path / "r" / "ttgir" / "naming.md").is_file()
    with pytest.raises(fp.NoIRError):
        fp.fingerprint(tmp_path / "r")
    assert collector.dump() is None  # once only


def test_dump_skipped_in_forked_child_and_unreadable_ttgir_is_indexed(tmp_path):
    collector = collect.IRCollector(str(tmp_path / "ttgir"))
    collector.pid = -1
    assert collector.dump() is None and not (tmp_path / "ttgir").exists()
    doc = json.loads(HANDBUILT.read_text())
    c2 = collect.IRCollector(str(tmp_path / "t2"))
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
    collector = collect.IRCollector(str(tmp_path / "ttgir"))
    collector.end_input("8x8")
    collector.on_launch(Launch({"name": "early_kernel", "function": 999}))
    collector.on_launch(None)  # malformed payloads never raise into Triton
    collector.dump()
    _, rows = index_rows(tmp_path / "ttgir")
    row = next(r for r in rows if r["kernel"] == "early_kernel")
    assert (row["shape"], row["launches"], row["file"]) == ("8x8", "1", dump.PH_UNKNOWN)


def test_launch_without_function_handle_falls_back_to_unique_name():
    collector = collect.IRCollector(None)
    collector.on_kernel_load(None, None, "solo", {}, "h1")
    collector.on_launch(Launch({"name": "solo"}))
    collector.on_kernel_load(None, 5, "twin", {}, "h2")
    collector.on_kernel_load(None, 6, "twin", {}, "h3")
    collector.on_launch(Launch({"name": "twin"}))  # ambiguous: never guessed
    assert collector.counts[(collect.UNSCOPED, "h1")] == [1, 0]
    assert collector.counts[(collect.UNSCOPED, "unseen:twin")] == [1, 0]


def test_shape_label():
    a, b = np.zeros((64, 128), np.float16), np.zeros((128, 32), np.float16)
    assert collect.shape_label((np.zeros((1024, 1024)), 1)) == "1024x1024"
    assert collect.shape_label((a, b, {"alpha": 1.0})) == "64x128_128x32"
    assert collect.shape_label((np.float32(1.0).reshape(()),)) == "scalar"
    assert collect.shape_label((3, "x")) == "noshape"
    long = collect.shape_label([np.zeros((1,) * 1)] * 80)
    assert len(long) <= collect.LABEL_MAX and "-h" in long


def test_parse_levels():
    assert collect.parse_levels("") == ["ttgir"]
    assert collect.parse_levels("llir, ptx,ttgir") == ["ttgir", "llir", "ptx"]
    for bad in ("cubin", "ll-ir", "json"):
        with pytest.raises(collect.IRLevelsError):
            collect.parse_levels(bad)



@pytest.mark.parametrize("fixture", ALL_FIXTURES, ids=lambda p: p.name)
def test_every_fixture_dumps_consistent_unique_names(fixture, tmp_path):
    """Invariants that must hold for hand-built and H200-recorded payloads alike."""
    doc = json.loads(fixture.read_text())
    collector = collect.IRCollector(str(tmp_path / "run" / "ttgir"))
    replay(collector, doc, tmp_path)
    summary = collector.dump()
    root = tmp_path / "run" / "ttgir"
    _, rows = index_rows(root)
    launched = [r for r in rows if int(r["launches"]) > 0 and r["file"] != dump.PH_UNKNOWN]
    assert launched and all(not r["file"].startswith("(") for r in launched)
    names = [(r["shape"], r["kernel"], r["file"]) for r in launched]
    assert len(names) == len(set(names))
    assert summary["files"] == len(list(root.rglob("*.ttgir")))
    compiled = {ev["payload"]["metadata"]["hash"] for ev in doc["events"] if ev["kind"] == "compile"}
    assert compiled <= {r["cache_hash"] for r in rows}



def test_dump_says_how_long_the_callbacks_and_the_dump_took(capsys, tmp_path):
    """The IR plugin's own seconds (callbacks over every launch, and the dump)."""
    import re
    collector = collect.IRCollector(str(tmp_path / "run" / "ttgir"), ["ttgir"])
    replay(collector, json.loads(HANDBUILT.read_text()), tmp_path)
    collector.dump("test")
    err = capsys.readouterr().err
    m = re.search(r"IR plugin spent ([0-9.]+) s in Triton callbacks over (\d+) launch\(es\) "
                  r"and ([0-9.]+) s writing the dump", err)
    assert m, err
    _, rows = index_rows(tmp_path / "run" / "ttgir")
    every = sum(int(r["launches"]) + int(r["sweep_launches"]) for r in rows)
    assert int(m.group(2)) == collector.launches == every
    assert collector.hook_s > 0 and float(m.group(1)) == pytest.approx(collector.hook_s, abs=1e-3)


def test_capture_prologue_launches_are_indexed_apart_and_never_fingerprinted(tmp_path):
    """torch's CUDAGraph.capture_begin fills the RNG seed/offset tensors with two fill_ calls,
    which FlagGems runs under use_gems(): on the H200 every operator's dump held
    fill_scalar_kernel at every shape. Those launches are the harness's, not the operator's."""
    def dumped(name, prologue_launches):
        collector = collect.IRCollector(str(tmp_path / name / "ttgir"), ["ttgir"])
        replay(collector, json.loads(HANDBUILT.read_text()), tmp_path / name)
        collector.prologue_depth += 1  # inside capture_begin, at the last shape (64x64)
        for _ in range(prologue_launches):
            collector.on_launch(Launch({"name": "fill_kernel", "function": 101}))
        collector.prologue_depth -= 1
        collector.dump("test")
        return tmp_path / name / "ttgir"
    (tmp_path / "plain").mkdir()
    (tmp_path / "prologue").mkdir()
    plain, with_prologue = dumped("plain", 0), dumped("prologue", 2)
    _, rows = index_rows(with_prologue)
    fill64 = [r for r in rows if r["shape"] == "64x64" and r["kernel"] == "fill_kernel"]
    assert [(r["file"], r["launches"], r["sweep_launches"]) for r in fill64] == [
        (dump.PH_CAPTURE_PROLOGUE, "2", "0")]
    assert not (with_prologue / "64x64" / "fill_kernel").exists()
    # the operator's launches of the same kernel at 4096 are still dumped as before
    assert (with_prologue / "4096" / "fill_kernel" / "w4s3.ttgir").is_file()
    fps = [json.loads((d / "ir_fingerprints.json").read_text()) for d in (plain, with_prologue)]
    assert fps[0]["levels"] == fps[1]["levels"]
    assert fps[0]["per_variant"] == fps[1]["per_variant"]
