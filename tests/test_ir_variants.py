"""VARIANTS_DIFFER: the verdict matches variants by identity when the two sides compiled
different variant sets.

tests/fixtures/ir/dropout_aa_index.json holds the index.tsv files ("before", "after") of a real
H200 A/A screen of dropout (FlagGems, private caches). Side A's ("before") time-based
timing loops ran dropout far more often (30058 launches at 64x64 against 214), its philox_offset
passed 2**31 and Triton compiled one more specialisation (`philox_offset: i64`); the
same variant is `w16s3__i32` in A and `w16s3` in B. The IR texts
were not kept: the ones here are small fakes, one per compile hash, each carrying its
run's own absolute path (which the normalisation removes, as on the H200).
"""
import json
import subprocess
import sys
from pathlib import Path

from zl import screen_verdict as sv
from zl.batch.partition import REPEAT_VERDICTS, verdict_selected
from zl.ir import fingerprint as fp, levels, per_variant

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ir"
_PAIR = json.loads((FIXTURES / "dropout_aa_index.json").read_text())   # both sides' index.tsv
BEFORE, AFTER = _PAIR["before"], _PAIR["after"]
I64 = "4096x4096/dropout_forward_kernel[philox_offset:i64]"
TEXT_LEVELS = ("ttgir", "llir", "ptx")


def fake_text(level, kernel, h, cache):
    return {"ttgir": f'#loc = loc("{cache}/gen.py":1:0)\nmodule {{ tt.func @{kernel}() {{ // {h}\n}} }}\n',
            "llir": f'!0 = !DIFile(filename: "{cache}/gen.py")\ndefine void @{kernel}() {{ ; {h}\n}}\n',
            "ptx": f'.file 1 "{cache}/gen.py"\n.visible .entry {kernel}() {{ // {h}\n}}\n'}[level]


def make_run(tmp_path, name, index_text, edit=None, rows=None):
    """A run dir as the IR plugin leaves it: index.tsv, dumped .ttgir, ir_fingerprints.json.

    `edit(level, row, text) -> text` changes a variant's code on this side; `rows` keeps
    only the index rows it accepts (a different variant set)."""
    run, cache = tmp_path / name, tmp_path / name / "cache"
    dump = run / "ttgir"
    lines = index_text.splitlines()
    header = lines[0].split("\t")
    kept = [ln for ln in lines[1:] if rows is None or rows(dict(zip(header, ln.split("\t"))))]
    dump.mkdir(parents=True)
    (dump / "index.tsv").write_text("\n".join([lines[0]] + kept) + "\n")
    variants = {}
    for line in kept:
        row = dict(zip(header, line.split("\t")))
        h, kernel = row["cache_hash"], row["kernel"]
        group = cache / h
        group.mkdir(parents=True, exist_ok=True)
        paths = {}
        for level in TEXT_LEVELS:
            text = fake_text(level, kernel, h, group)
            if edit:
                text = edit(level, row, text)
            (group / f"{kernel}.{level}").write_text(text)
            paths[level] = str(group / f"{kernel}.{level}")
        blob = (edit("binary", row, f"CUBIN {h}") if edit else f"CUBIN {h}").encode()
        (group / f"{kernel}.cubin").write_bytes(blob)
        variants[h] = {"ir_paths": paths}
        target = dump / row["shape"] / kernel / row["file"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text((group / f"{kernel}.ttgir").read_text())
    levels.record(dump, variants)
    return run


def change(level, shape="64x64", kernel="fill_scalar_kernel"):
    """An edit of one common variant's code at one level (fill_scalar at 64x64, not the i64 one)."""
    def edit(lv, row, text):
        if lv == level and row["shape"] == shape and row["kernel"] == kernel and row["file"] == "w4s3.ttgir":
            return text + ("X" if lv == "binary" else "// changed\n")
        return text
    return edit


def test_dropout_aa_extra_i64_variant_is_variants_differ(tmp_path):
    a, b = make_run(tmp_path, "a", BEFORE), make_run(tmp_path, "b", AFTER)
    res = fp.verdict(a, b)
    assert res["verdict"] == fp.VARIANTS_DIFFER and res["exit_code"] == fp.EXIT_OK, res
    assert res["compared"] == ["ttgir", "llir", "ptx", "binary"]
    # the aggregates do differ at every level: the old rule read IR_CHANGED@ttgir
    assert all(res["a"][lv] != res["b"][lv] for lv in res["compared"])
    assert res["variants_only"] == f"A: {I64}; B: -"
    assert fp.verdict(b, a)["variants_only"] == f"A: -; B: {I64}"
    cells = fp.verdict_row(res)
    assert cells[0] == "VARIANTS_DIFFER" and cells[-1] == res["variants_only"] and "/" in cells[2]


def test_record_has_each_variant_identity_path_and_digest_per_level(tmp_path):
    doc = json.loads((make_run(tmp_path, "a", BEFORE) / "ttgir" / fp.FINGERPRINTS_NAME).read_text())
    assert doc["schema_version"] == fp.SCHEMA_VERSION and len(doc["per_variant"]) == doc["variants"] == 8
    i64 = [v for v in doc["per_variant"] if v["identity"]["dtypes"].get("philox_offset") == "i64"]
    assert [v["path"] for v in i64] == ["4096x4096/dropout_forward_kernel/w16s3__i64"]
    assert set(i64[0]["levels"]) == {"ttgir", "llir", "ptx", "binary"}


def test_same_sets_common_llir_differs_is_ir_changed_at_llir(tmp_path):
    a, b = make_run(tmp_path, "a", BEFORE), make_run(tmp_path, "b", BEFORE, edit=change("llir"))
    res = fp.verdict(a, b)
    assert res["verdict"] == "IR_CHANGED@llir" and res["variants_only"] == "-"


def test_extra_variant_and_a_common_change_names_the_common_variant_first_level(tmp_path):
    a = make_run(tmp_path, "a", AFTER)
    for level, word in (("ttgir", "IR_CHANGED@ttgir"), ("llir", "IR_CHANGED@llir"),
                        ("ptx", "IR_CHANGED@ptx"), ("binary", fp.BINARY_CHANGED)):
        b = make_run(tmp_path, f"b_{level}", BEFORE, edit=change(level))
        res = fp.verdict(a, b)
        # ttgir differs in aggregate because of the extra variant: the word is where COMMON code differs
        assert res["verdict"] == word and res["exit_code"] == fp.EXIT_DIFFERENT, (level, res)
        assert res["variants_only"] == f"A: -; B: {I64}"


def _as_schema_1(run):
    path = run / "ttgir" / fp.FINGERPRINTS_NAME
    doc = json.loads(path.read_text())
    doc.pop("per_variant")
    doc["schema_version"] = 1
    path.write_text(json.dumps(doc))


def test_old_schema_on_either_side_keeps_the_aggregate_rule(tmp_path):
    a, b = make_run(tmp_path, "a", BEFORE), make_run(tmp_path, "b", AFTER)
    _as_schema_1(b)
    res = fp.verdict(a, b)
    assert res["verdict"] == "IR_CHANGED@ttgir" and res["variants_only"] == "-"
    _as_schema_1(a)
    assert fp.verdict(a, b)["verdict"] == "IR_CHANGED@ttgir"


def test_no_common_variant_is_ir_changed_at_ttgir(tmp_path):
    a = make_run(tmp_path, "a", AFTER)
    b = make_run(tmp_path, "b", BEFORE, rows=lambda r: '"philox_offset":"i64"' in r["dtypes"])
    res = fp.verdict(a, b)
    assert res["verdict"] == "IR_CHANGED@ttgir", res
    assert res["variants_only"].startswith("A: 4096x4096/dropout_forward_kernel[philox_offset:i32], ")
    assert res["variants_only"].endswith("(+4 more); B: " + I64)


def test_divisibility_specialisation_is_named_in_the_label(tmp_path):
    a = make_run(tmp_path, "a", AFTER, rows=lambda r: not (r["shape"] == "64x64" and "vsdiv16" in r["file"]))
    res = fp.verdict(a, make_run(tmp_path, "b", AFTER))
    assert res["verdict"] == fp.VARIANTS_DIFFER
    assert res["variants_only"] == "A: -; B: 64x64/fill_scalar_kernel[value_scalar:div16]"


def test_malformed_per_variant_record_falls_back_to_the_aggregate_rule(tmp_path):
    a, b = make_run(tmp_path, "a", BEFORE), make_run(tmp_path, "b", AFTER)
    path = b / "ttgir" / fp.FINGERPRINTS_NAME
    doc = json.loads(path.read_text())
    doc["per_variant"][0] = {"path": "x"}
    path.write_text(json.dumps(doc))
    assert fp.verdict(a, b)["verdict"] == "IR_CHANGED@ttgir"
    try:
        per_variant.match(doc["per_variant"], doc["per_variant"])
        raise AssertionError("a malformed entry must raise")
    except per_variant.PerVariantError as exc:
        assert "identity/levels" in str(exc)


def test_cli_exit_code_stderr_and_screen_consumers(tmp_path):
    a, b = make_run(tmp_path, "a", BEFORE), make_run(tmp_path, "b", AFTER)
    r = subprocess.run([sys.executable, "-m", "zl.ir.fingerprint", "verdict", str(a), str(b), "--tsv"],
                       cwd=REPO, capture_output=True, text=True)
    cells = r.stdout.rstrip("\n").split("\t")
    assert r.returncode == 0 and cells[0] == "VARIANTS_DIFFER" and cells[-1] == f"A: {I64}; B: -"
    assert f"variants compiled on one side only: A: {I64}; B: -" in r.stderr
    row = sv.judge(6, 6, "0", "0", a, b)
    assert row["verdict"] == "VARIANTS_DIFFER" and row["variants_only"] == f"A: {I64}; B: -"
    # campaign.sh / partition.py repeat operators whose code the switch changed: not these
    assert not verdict_selected(row["verdict"], REPEAT_VERDICTS)


def test_labels_name_what_differs_and_the_cell_is_capped():
    def rec(shape="8", kernel="k", warps="4", block=64, spec=None, n="i32"):
        ident = {"shape": shape, "kernel": kernel, "num_warps": warps, "num_stages": "3",
                 "constexprs": {"BLOCK": block}, "dtypes": {"n": n}, "specialization": spec or {}}
        return {"identity": ident, "path": "p", "levels": {"ttgir": "d"}}
    common = rec()
    a = [common, rec(warps="8"), rec(block=128), rec(spec={"x": [["tt.divisibility", 16]]}),
         rec(shape="9"), rec(kernel="q", n="i64")]
    m = per_variant.match(a, [common])
    only_a, only_b = per_variant.labels(m)
    # every field that varies inside the (shape, kernel) group, so each label is unambiguous
    assert sorted(only_a) == ["8/k[w4,BLOCK=128,x:none]", "8/k[w4,BLOCK=64,x:div16]",
                              "8/k[w8,BLOCK=64,x:none]", "8/q", "9/k"] and only_b == []
    assert per_variant.common_equal(m, "ttgir") is True and per_variant.common_equal(m, "llir") is None
    assert per_variant.only_cell(m).endswith("(+2 more); B: -") and per_variant.only_cell(None) == "-"
    # the same identity with other code on one side counts as differing, never as a set difference
    other = {**common, "levels": {"ttgir": "e"}}
    assert per_variant.common_equal(per_variant.match([common], [other]), "ttgir") is False
    assert per_variant.identity_of({"shape": "8", "dtypes": '{"b":"i32","a":"i64"}'})["dtypes"] == {"a": "i64", "b": "i32"}


def test_a_one_sided_config_is_not_excused_as_a_specialisation(tmp_path):
    """A switch that changes a heuristic's num_warps for one kernel: its variant exists on one
    side only, every other variant is common and identical. That is changed code, not a
    specialisation: the aggregate rule names it (VARIANTS_DIFFER would drop the operator)."""
    lines = AFTER.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("64x64\tfill_scalar_kernel\tw4s3.ttgir\t"))
    cells = lines[i].split("\t")
    cells[5], cells[10] = "8", "f" * 64          # num_warps 4 -> 8, hence another compile
    lines[i] = "\t".join(cells)
    a, b = make_run(tmp_path, "a", AFTER), make_run(tmp_path, "b", "\n".join(lines) + "\n")
    res = fp.verdict(a, b)
    assert res["verdict"] == "IR_CHANGED@ttgir", res
    assert res["variants_only"] == ("A: 64x64/fill_scalar_kernel[w4,value_scalar:none]; "
                                    "B: 64x64/fill_scalar_kernel[w8,value_scalar:none]")


def test_specialisation_partners():
    base = {"shape": "8", "kernel": "k", "num_warps": "4", "num_stages": "3",
            "constexprs": {"BLOCK": 64}, "dtypes": {"x": "*fp16", "n": "i32"}, "specialization": {}}
    same = lambda **kw: per_variant.specialisation_of({**base, **kw}, base)
    assert same(dtypes={"x": "*fp16", "n": "i64"})                       # int type follows the value
    assert same(specialization={"n": [["tt.divisibility", 16]]})         # divisibility 16
    assert same(dtypes={"x": "*fp16"}, constexprs={"BLOCK": 64, "n": 1})  # n == 1 folded to a constexpr
    assert not same(dtypes={"x": "*fp32", "n": "i32"})                   # a pointer's element type
    assert not same(constexprs={"BLOCK": 128})                            # a config
    assert not same(num_warps="8") and not same(num_stages="4")
    assert not same(dtypes={"x": "*fp16"}, constexprs={"BLOCK": 64, "n": 2})


def test_records_of_two_normalisations_are_hashed_again_from_the_files(tmp_path):
    """A record from an older normalisation (schema < 4) is not compared with a newer one:
    both sides are hashed from their dumped files, so the same code reads NO_IR_DIFF."""
    a, b = make_run(tmp_path, "a", BEFORE), make_run(tmp_path, "b", BEFORE)
    path = b / "ttgir" / fp.FINGERPRINTS_NAME
    doc = json.loads(path.read_text())
    doc["levels"]["ttgir"]["hash"] = "0" * 64          # what an older normalisation recorded
    path.write_text(json.dumps(doc))
    assert fp.verdict(a, b)["verdict"] == "IR_CHANGED@ttgir"     # one normalisation: records trusted
    for older in (2, 3):       # before the pid normalisation, and before it reached any quoted name
        doc["schema_version"] = older
        path.write_text(json.dumps(doc))
        res = fp.verdict(a, b)
        assert res["verdict"] == "NO_IR_DIFF" and "binary" not in res["compared"], (older, res)
