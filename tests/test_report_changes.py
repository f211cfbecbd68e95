"""zl.report.changes: what changed per kernel variant beside a pair's code verdict, and where
the reports show it (--ab, --ab-rounds, --screen: console, --json, --html).

The IR trees are built by the IR plugin's own writers (zl.ir.dump.write_tree, zl.ir.levels.record)
from hand-written kernels of this file; the private Triton cache is removed afterwards, as a
real run's is, so the report only has what the run dumped.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import batch_summary as bs
from harness import report_fixtures as rf
from harness.runner import REPO_ROOT, run_zl
from zl.ir import dump, levels
from zl.report import changes
from zl.report.html import render_report
from zl.report.run import LoadedRun


def ttgir(kernel: str, body: str = "%1 = arith.addf %0, %0 : f16", converts: int = 0, warps: int = 4) -> str:
    lines = ['#blocked = #ttg.blocked<{sizePerThread = [4], order = [0]}>',
             f'module attributes {{"ttg.num-warps" = {warps} : i32}} {{',
             f"  tt.func public @{kernel}(%arg0: !tt.ptr<f16>) {{",
             '    %0 = tt.load %arg0 : !tt.ptr<f16> loc("/tmp/cache/gen_k.py":4:0)']
    lines += [f"    %c{i} = ttg.convert_layout %0 : tensor<128xf16, #blocked> -> tensor<128xf16, #blocked1>"
              for i in range(converts)]
    lines += [f"    {body}", "    tt.return", "  }", "}"]
    return "\n".join(lines) + "\n"


def kernel(name="k", shape="1024", warps=4, stages=3, consts=None, n="i32", converts=0,
           body="%1 = arith.addf %0, %0 : f16", llir=None, ptx=None, binary=b"cubin", **meta):
    """One compiled variant: what the compile listener and the load hook would record."""
    ir = {"ttgir": ttgir(name, body, converts, warps), "llir": llir or f"; llir of {name}\n",
          "ptx": ptx or f"// ptx of {name}\n"}
    return {"kernel": name, "shape": shape, "num_warps": warps, "num_stages": stages,
            "constexprs": consts if consts is not None else {"BLOCK": 1024},
            "signature": {"x_ptr": "*fp16", "n": n, "BLOCK": "constexpr"}, "ir": ir,
            "binary": binary, **meta}


def make_run(d: Path, variants, dumped=("ttgir",)) -> Path:
    """A run directory whose ttgir/ tree the IR plugin's writers produced from `variants`."""
    cache = d / "cache"
    recs, counts = {}, {}
    for v in variants:
        h = hashlib.sha256(json.dumps({k: v[k] for k in ("kernel", "shape", "num_warps", "constexprs",
                                                         "signature")} | {"ir": v["ir"]},
                                      sort_keys=True, default=str).encode()).hexdigest()
        group = cache / h
        group.mkdir(parents=True)
        paths = {}
        for level, text in v["ir"].items():
            paths[level] = str(group / f"{v['kernel']}.{level}")
            Path(paths[level]).write_text(text)
        (group / f"{v['kernel']}.cubin").write_bytes(v["binary"])
        recs[h] = {"hash": h, "kernel": v["kernel"], "fn": f"tests.{v['kernel']}", "constexprs": v["constexprs"],
                   "signature": v["signature"], "specialization": {}, "num_warps": v["num_warps"],
                   "num_stages": v["num_stages"], "num_ctas": 1, "ir_paths": paths, "cache_hit": False,
                   **{k: v[k] for k in ("shared", "n_regs", "n_spills") if k in v}}
        counts[(v["shape"], h)] = (10, 0)
    dump.write_tree(d / "ttgir", recs, counts, list(dumped))
    levels.record(d / "ttgir", recs)
    shutil.rmtree(cache)
    return d


BASE = dict(shared=0, n_regs=40, n_spills=0)


@pytest.fixture
def changed_pair(tmp_path):
    """k at 1024 gains one convert_layout and loses 8 registers; `other` is unchanged."""
    a = make_run(tmp_path / "a", [kernel(**BASE), kernel("other", **BASE)])
    b = make_run(tmp_path / "b", [kernel(converts=1, shared=0, n_regs=32, n_spills=0),
                                  kernel("other", **BASE)])
    return a, b


def test_a_changed_kernel_has_its_deltas_first_level_excerpt_and_files(changed_pair):
    a, b = changed_pair
    ch = changes.pair_changes(LoadedRun(a), LoadedRun(b))
    assert ch["signature"] == "+1 convert_layout, -8 registers"
    assert ch["unchanged"] == 1 and ch["only"] == [] and ch["not_recorded"] == []
    [k] = ch["kernels"]
    assert (k["shape"], k["kernel"], k["first_level"]) == ("1024", "k", "ttgir")
    f = k["fields"]
    assert f["convert_layout"] == {"A": 0, "B": 1, "delta": 1}
    assert f["registers"] == {"A": 40, "B": 32, "delta": -8}
    assert f["spills"]["delta"] == 0 and f["shared"]["delta"] == 0 and f["num_warps"] == {"A": 4, "B": 4, "delta": 0}
    assert k["lines"] == {"level": "ttgir", "A": 8, "B": 9, "delta": 1}
    # the first hunk as the fingerprint compares it: the source path cut to its basename
    assert k["excerpt"][0] == "@@ -3,4 +3,5 @@"
    assert '     %0 = tt.load %arg0 : !tt.ptr<f16> loc("gen_k.py":4:0)' in k["excerpt"]
    assert any(x.startswith("+    %c0 = ttg.convert_layout") for x in k["excerpt"])
    assert k["files"]["A"] == {"ttgir": str(a / "ttgir" / "1024" / "k" / "w4s3.ttgir")}
    assert Path(k["files"]["B"]["ttgir"]).is_file()


def test_registers_a_run_did_not_record_read_not_recorded_never_zero(tmp_path):
    a = make_run(tmp_path / "a", [kernel(shared=0)])                        # no load hook facts
    b = make_run(tmp_path / "b", [kernel(converts=1, shared=0, n_regs=32, n_spills=0)])
    ch = changes.pair_changes(LoadedRun(a), LoadedRun(b))
    assert ch["kernels"][0]["fields"]["registers"] == {"A": None, "B": 32, "delta": None}
    assert ch["not_recorded"] == ["registers", "spills"]
    assert ch["signature"] == "+1 convert_layout (registers, spills not recorded)"
    row = changes.table_rows(ch)[0]
    cols = dict(zip(changes.TABLE_HEADERS, row))
    assert cols["registers"] == "not recorded -> 32" and cols["spills"] == "not recorded -> 0"
    assert cols["shared (B)"] == "0" and cols["convert_layout"] == "0 -> 1 (+1)"
    # an index.tsv from before the columns existed: every such field not recorded
    for run in (a, b):
        index = run / "ttgir" / "index.tsv"
        head, *rows = index.read_text().splitlines()
        cut = head.split("\t").index("shared")
        index.write_text("\n".join("\t".join(r.split("\t")[:cut]) for r in [head] + rows) + "\n")
    old = changes.pair_changes(LoadedRun(a), LoadedRun(b))
    assert old["signature"] == "+1 convert_layout (registers, spills, shared not recorded)"
    assert dict(zip(changes.TABLE_HEADERS, changes.table_rows(old)[0]))["registers"] == "not recorded"


def test_a_num_warps_change_pairs_the_variants_of_one_kernel(tmp_path):
    a = make_run(tmp_path / "a", [kernel(warps=4, **BASE)])
    b = make_run(tmp_path / "b", [kernel(warps=8, shared=0, n_regs=24, n_spills=0)])
    ch = changes.pair_changes(LoadedRun(a), LoadedRun(b))
    [k] = ch["kernels"]
    assert k["variant"] == {"A": "w4s3", "B": "w8s3"} and ch["only"] == []
    assert ch["signature"] == "-16 registers, +4 num_warps"
    assert changes.text_lines("[ab] x", ch)[1] == (
        "[ab] x:   1024/k[w4s3 -> w8s3]: differs from ttgir; registers 40 -> 24 (-16); num_warps 4 -> 8 (+4)")


def test_a_level_that_was_not_dumped_is_named_and_has_no_excerpt(tmp_path):
    """TTGIR equal, LLVM IR different: the digests recorded per variant name llir; its text is
    shown only when the run dumped it (ZL_IR_LEVELS)."""
    a = make_run(tmp_path / "a", [kernel(llir="; opt on\nret void\n", **BASE)])
    b = make_run(tmp_path / "b", [kernel(llir="; opt off\nret void\n", **BASE)])
    ch = changes.pair_changes(LoadedRun(a), LoadedRun(b))
    [k] = ch["kernels"]
    assert k["first_level"] == "llir" and k["excerpt"] is None and k["lines"] is None
    assert "llir was not dumped on side A and B" in k["excerpt_note"]
    assert ch["signature"] == "code only" and ch["first_levels"] == {"llir": 1}
    a2 = make_run(tmp_path / "a2", [kernel(llir="; opt on\nret void\n", **BASE)], ("ttgir", "llir"))
    b2 = make_run(tmp_path / "b2", [kernel(llir="; opt off\nret void\n", **BASE)], ("ttgir", "llir"))
    k2 = changes.pair_changes(LoadedRun(a2), LoadedRun(b2))["kernels"][0]
    assert k2["excerpt"] == ["@@ -1,2 +1,2 @@", "-; opt on", "+; opt off", " ret void"]
    assert set(k2["files"]["A"]) == {"ttgir", "llir"}
    assert changes.files_text(k2["files"]["A"]).endswith("/ttgir/1024/k/w4s3.{ttgir,llir}")


def test_binary_only_and_identical_code(tmp_path):
    a = make_run(tmp_path / "a", [kernel(**BASE)])
    b = make_run(tmp_path / "b", [kernel(binary=b"other cubin", **BASE)])
    k = changes.pair_changes(LoadedRun(a), LoadedRun(b))["kernels"][0]
    assert k["first_level"] == "binary" and "only the binary differs" in k["excerpt_note"]
    same = make_run(tmp_path / "same", [kernel(**BASE)])
    assert changes.pair_changes(LoadedRun(a), LoadedRun(same)) is None      # NO_IR_DIFF


def test_one_sided_variants_specialisations_apart_from_new_kernels(tmp_path):
    a = make_run(tmp_path / "a", [kernel(**BASE), kernel(n="i64", **BASE)])
    b = make_run(tmp_path / "b", [kernel(converts=1, **BASE), kernel("extra", **BASE)])
    ch = changes.pair_changes(LoadedRun(a), LoadedRun(b))
    assert [(o["side"], o["kernel"], o["specialisation"]) for o in ch["only"]] == [
        ("A", "k", True), ("B", "extra", False)]
    # the i64 specialisation follows the inputs, not the code: only the new kernel counts
    assert ch["signature"] == "+1 convert_layout, 1 variant B only"
    assert "side A only (argument specialisation)" in [r[1] for r in changes.table_rows(ch)]


def test_the_excerpt_is_one_bounded_hunk_with_lines_cut():
    a = "\n".join(["same"] * 50 + [f"old {i} " + "x" * 300 for i in range(30)] + ["tail"]) + "\n"
    b = "\n".join(["same"] * 50 + [f"new {i}" for i in range(30)] + ["tail"]) + "\n"
    out = changes.excerpt(a, b)
    assert out[0] == "@@ -49,33 +49,33 @@"
    assert out[1:3] == [" same", " same"] and out[3].startswith("-old 0 ")
    assert len(out) == 1 + changes.EXCERPT_LINES + 1 and all(len(x) <= changes.LINE_WIDTH for x in out)
    assert out[3].endswith("…") and out[-1].startswith("... 51 more line(s)")
    assert changes.excerpt("a\nb\n", "a\nb") == []


def test_without_index_the_dumped_files_are_matched_by_name(tmp_path):
    """ab_rlc_test.sh's stub and runs from before index.tsv: files only, every fact but the
    TTGIR's own counts not recorded."""
    for side, body in (("a", "arith.maxf"), ("b", "arith.select")):
        d = tmp_path / side / "ttgir" / "1024" / "relu_kernel"
        d.mkdir(parents=True)
        (d / "bs1024.ttgir").write_text(f"module {{ tt.func @k() {{ %0 = {body} }} }}\n")
    ch = changes.pair_changes(LoadedRun(tmp_path / "a"), LoadedRun(tmp_path / "b"))
    assert ch["matched_by"].startswith("file name")
    assert ch["signature"] == "code only (registers, spills, shared, num_warps, num_stages not recorded)"
    assert ch["kernels"][0]["excerpt"] == ["@@ -1,1 +1,1 @@", "-module { tt.func @k() { %0 = arith.maxf } }",
                                           "+module { tt.func @k() { %0 = arith.select } }"]


# ---------------------------------------------------------------- reports

def _json(tmp_path, *argv):
    out = tmp_path / "r.json"
    assert bs.main([str(a) for a in argv] + ["--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_ab_report_prints_stores_and_draws_what_changed(tmp_path, capsys):
    pair = rf.ab_pair(tmp_path / "ab")
    for side, v in (("before", kernel(shared=0)), ("after", kernel(converts=1, **{**BASE, "n_regs": 32}))):
        shutil.rmtree(pair[side] / "ttgir", ignore_errors=True)
        make_run(pair[side], [v])
    html = tmp_path / "ab.html"
    d = _json(tmp_path, "--ab", pair["before"], pair["after"], "--html", html)
    assert d["code"]["verdict"] == "IR_CHANGED@ttgir"
    assert d["changes"]["signature"] == "+1 convert_layout (registers, spills not recorded)"
    assert d["changes"]["kernels"][0]["fields"]["registers"]["A"] is None
    out = capsys.readouterr().out
    assert ("[ab] softmax: what changed: +1 convert_layout (registers, spills not recorded) "
            "(1 variant(s) differ, first at ttgir x1)") in out
    page = html.read_text()
    # the change summary heads the per-shape verdict table, below the chart
    at = page.index('<h2>Shapes</h2><details class="changes" id="changes-softmax"><summary>what changed '
                    'in softmax: +1 convert_layout')
    assert page.index("<svg") < at < page.index("<th>verdict</th>", at)
    block = page[page.index('<details class="changes" id="changes-softmax">'):]
    block = block[:block.index("</details>")]
    assert "<td>not recorded -&gt; 32</td>" in block and "<td>0 -&gt; 32</td>" not in block
    assert '<pre class="diff">@@ -3,4 +3,5 @@' in block and "ttg.convert_layout" in block
    assert str(pair["after"] / "ttgir" / "1024" / "k" / "w4s3.ttgir") in block


def test_rounds_report_says_what_changed_between_r1_a_and_r1_b(tmp_path, capsys):
    """--ab-rounds judges the code on r1_A vs r1_B; where it differs, the same per-kernel
    changes as --ab: console, --json, and the page's summary above the per-shape verdicts."""
    root = rf.rounds_root(tmp_path / "rounds")
    rounds = sorted({p.name[1:].split("_")[0] for p in root.glob("r*_A")})
    for k in rounds:      # every round compiled its side's code (a round that did not is left out)
        make_run(root / f"r{k}_A", [kernel(**BASE)])
        make_run(root / f"r{k}_B", [kernel(converts=1, **{**BASE, "n_regs": 32})])
    html = tmp_path / "r.html"
    d = _json(tmp_path, "--ab-rounds", root, "--html", html)
    assert d["code"]["verdict"] == "IR_CHANGED@ttgir"
    assert d["changes"]["signature"] == "+1 convert_layout, -8 registers"
    assert ("[ab-rounds] softmax r1_A vs r1_B: what changed: +1 convert_layout, -8 registers "
            "(1 variant(s) differ, first at ttgir x1)") in capsys.readouterr().out
    page = html.read_text()
    at = page.index('<h2>Shapes</h2><details class="changes" id="changes-softmax"><summary>what changed '
                    'in softmax: +1 convert_layout, -8 registers')
    assert page.index('id="chart-rounds_speedup"') < at < page.index("<th>verdict</th>", at)
    # the same rounds with one code on both sides: no change block
    for cell in (f"r{k}_{side}" for k in rounds for side in "AB"):
        shutil.rmtree(root / cell / "ttgir")
        make_run(root / cell, [kernel(**BASE)])
    d = _json(tmp_path, "--ab-rounds", root, "--html", html)
    assert d["code"]["verdict"] == "NO_IR_DIFF" and d["changes"] is None and d["rounds"] == len(rounds) > 1
    assert 'class="changes"' not in html.read_text()


def test_ab_of_identical_code_has_no_change_block(tmp_path, capsys):
    pair = rf.ab_pair(tmp_path / "ab")
    for side in ("before", "after"):
        make_run(pair[side], [kernel(**BASE)])
    d = _json(tmp_path, "--ab", pair["before"], pair["after"])
    assert d["code"]["verdict"] == "NO_IR_DIFF" and d["changes"] is None
    assert "what changed" not in capsys.readouterr().out
    assert 'class="changes"' not in render_report({**d, "demo": None, "identities": {}})[0]


def test_screen_groups_changed_cells_by_their_kernel_signature(tmp_path, capsys):
    """Two cells with one pattern (+1 convert_layout, -8 registers) read as one group; each cell
    gets its collapsed block; the A/A cell gets none."""
    root = rf.screen_root(tmp_path / "screen")
    tsv = root / "screen.tsv"
    lines = tsv.read_text().splitlines()
    cols = lines[0].split("\t")
    gelu = lines[2].split("\t")
    gelu[cols.index("op")] = gelu[cols.index("op_file")] = "gelu"
    for side in ("before", "after"):
        shutil.copytree(root / f"relu@float16_{side}", root / f"gelu@float16_{side}")
    tsv.write_text("\n".join(lines + ["\t".join(gelu)]) + "\n")
    for cell in ("relu", "gelu"):
        for side, v in (("before", kernel(f"{cell}_k", **BASE)),
                        ("after", kernel(f"{cell}_k", converts=1, **{**BASE, "n_regs": 32}))):
            shutil.rmtree(root / f"{cell}@float16_{side}" / "ttgir")
            make_run(root / f"{cell}@float16_{side}", [v])
    html = tmp_path / "s.html"
    d = _json(tmp_path, "--screen", root, "--html", html)
    ops = {o["cell"]: o for o in d["ops"]}
    assert ops["relu@float16"]["changes"]["signature"] == "+1 convert_layout, -8 registers"
    assert "changes" not in ops["softmax@float16"]
    groups = d["verdicts"]["change_groups"]
    assert [(g["signature"], g["cells"]) for g in groups] == [
        ("IR_CHANGED@ttgir, +1 convert_layout, -8 registers", ["relu@float16", "gelu@float16"])]
    out = capsys.readouterr().out
    assert "[screen] change IR_CHANGED@ttgir, +1 convert_layout, -8 registers: 2 cell(s)" in out
    assert "[screen] gelu@float16: what changed: +1 convert_layout, -8 registers (1 variant(s) differ" in out
    page = html.read_text()
    assert "Changed cells by change signature" in page and "What changed, per changed cell" in page
    for cell in ("relu@float16", "gelu@float16"):
        assert f'<details class="changes" id="changes-{cell}"><summary>what changed in {cell}: ' in page
    assert 'id="changes-softmax@float16"' not in page
    # the per-shape table: each shape's verdict beside its cell's change signature
    shapes = page[page.index("<h2>Shapes</h2>"):]
    shapes = shapes[:shapes.index("</table>")]
    for cell in ("relu@float16", "gelu@float16"):
        assert shapes.count(f"<td>{cell}</td>") == 5
    assert shapes.count("<td>IR_CHANGED@ttgir, +1 convert_layout, -8 registers</td>") == 10
    assert {o["cell"]: o["change_signature"] for o in d["ops"]} == {
        "softmax@float16": None, "relu@float16": "IR_CHANGED@ttgir, +1 convert_layout, -8 registers",
        "abs@float16": "IR_CHANGED", "gelu@float16": "IR_CHANGED@ttgir, +1 convert_layout, -8 registers"}


def test_screen_cell_whose_run_directories_are_gone_says_so(tmp_path, capsys):
    root = rf.screen_root(tmp_path / "screen")
    for side in ("before", "after"):
        shutil.rmtree(root / f"relu@float16_{side}")
    d = _json(tmp_path, "--screen", root)
    relu = next(o for o in d["ops"] if o["op"] == "relu")
    assert relu["changes"]["signature"] is None and "run directories not found" in relu["changes"]["note"]
    assert "[screen] relu@float16: what changed: unknown (run directories not found" in capsys.readouterr().out


def test_screen_driver_end_to_end_shows_the_first_differing_lines(tmp_path):
    """ab_rlc_test.sh over the stub run script (its TTGIR depends on the switch), then the
    report: the fake FlagGems tree under Triton's interpreter compiles no IR, so the stub's
    dumped files stand in for it."""
    root = tmp_path / "screen"
    r = run_zl(tmp_path / "w", script="ab_rlc_test.sh", OPS="relu abs", AB_ROOT=root,
               ZL_RUN_PYTEST=str(REPO_ROOT / "tests" / "fixtures" / "runlogs" / "stub_run_pytest.sh"),
               ZL_STUB_SWITCH="ZL_TEST_SWITCH", SWITCH="ZL_TEST_SWITCH", TELEMETRY_INTERVAL="0",
               ZL_STUB_IR_MAP="relu=switch,abs=same")
    assert r.returncode == 0, r.explain()
    html = tmp_path / "s.html"
    p = subprocess.run([sys.executable, str(REPO_ROOT / "batch_summary.py"), "--screen", str(root),
                        "--json", str(tmp_path / "s.json"), "--html", str(html)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    relu = next(o for o in json.loads((tmp_path / "s.json").read_text())["ops"] if o["op"] == "relu")
    assert relu["changes"]["kernels"][0]["excerpt"][1:] == [
        '-module attributes {"ttg.num-warps" = 4 : i32} { tt.func @k() { %0 = arith.maxf } }',
        '+module attributes {"ttg.num-warps" = 4 : i32} { tt.func @k() { %0 = arith.select } }']
    assert "[screen] relu: what changed: code only (registers, spills, shared, num_warps, num_stages " \
           "not recorded)" in p.stdout
    assert "+module attributes {&quot;ttg.num-warps&quot; = 4 : i32} { tt.func @k() { %0 = arith.select } }" \
        in html.read_text()
