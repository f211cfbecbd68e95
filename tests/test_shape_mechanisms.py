"""Shape mechanisms: the survey, the iter-list and bespoke injections, the statements where a
yaml cannot apply, shape provenance in run_identity.json / shapes.yaml, and its caliber refusal."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.identity_links import link_fields
from zl.runlog import caliber
from zl.shapes import coverage, mechanism as mech

REPO = Path(__file__).resolve().parent.parent
FAST = dict(ZL_ENABLE_IR="0", ZL_ENABLE_AUTOTUNE="0")


def _identity(res):
    return json.loads((res.out_dir / "run_identity.json").read_text())


def _yaml(tmp_path, text, name="shapes.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ------------------------------------------------------------------ static survey

def test_survey_of_fake_tree_names_each_mechanism(fake_flaggems_dir):
    rows = {r.name: r for r in coverage.survey(fake_flaggems_dir)}
    assert rows["Conv2DPaddingBenchmark"].mechanism == "get_input_iter class list"
    assert rows["Conv2DPaddingBenchmark"].controlled.startswith("yes (_shape_iter_inject_plugin")
    assert rows["MaxPool2dBenchmark"].mechanism == "get_input_iter local list"
    assert rows["MaxPool2dBenchmark"].controlled.startswith("yes (_bespoke_shape_plugin")
    assert rows["VarDimBenchmark"].mechanism == "bespoke inputs"
    assert rows["VarDimBenchmark"].controlled.startswith("no")
    assert rows["PadBenchmark"].mechanism == "set_shapes override"
    assert rows["BlasBenchmark"].mechanism == "yaml lookup" and "mm" in rows["BlasBenchmark"].ops


@pytest.mark.parametrize("src,kind", [
    ("def get_input_iter(self, d):\n    for s in self.shapes:\n        yield s", mech.SELF_SHAPES),
    ("def get_input_iter(self, d):\n    for s in type(self).LIST:\n        yield s", mech.CLASS_LIST),
    ("def get_input_iter(self, d):\n    xs = [(1, 2)]\n    for s in xs:\n        yield s", mech.LOCAL_LIST),
    ("def get_input_iter(self, d):\n    for p in self.params():\n        yield p", mech.BESPOKE),
])
def test_iter_classification(src, kind):
    import ast
    assert mech.classify_iter(ast.parse(src).body[0], {"LIST", "params"}).kind == kind


@pytest.mark.parametrize("src,how", [
    ("def set_shapes(self, p=None):\n    super().set_shapes(p)\n    self.shapes = self.shapes[:1]", mech.YAML),
    ("def set_shapes(self, p=None):\n    self.shapes = [(1, 2)]", mech.OVERRIDE),
    ("def set_shapes(self, p=None):\n    '''doc'''\n    pass", mech.NOOP),
    ("def set_shapes(self, *a):\n    self.shapes = self.DEFAULT_SHAPES", mech.NOOP),
])
def test_set_shapes_classification(src, how):
    import ast
    assert mech.classify_set_shapes(ast.parse(src).body[0]) == how


def test_coverage_cli_markdown_and_bad_dir(fake_flaggems_dir, tmp_path):
    ok = subprocess.run([sys.executable, "-m", "zl.shapes.coverage", str(fake_flaggems_dir), "--commit", "abc"],
                        capture_output=True, text=True, cwd=REPO)
    assert ok.returncode == 0 and "commit abc" in ok.stdout
    assert "| test_conv2d.py | Conv2DPaddingBenchmark | conv2d_padding | get_input_iter class list" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "zl.shapes.coverage", str(tmp_path)],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "no benchmark/ directory" in bad.stderr


# ------------------------------------------------------------------ runs on the fake tree

def test_iter_list_class_measures_the_yaml_shape(zl_run, tmp_path):
    shape_file = _yaml(tmp_path, "conv2d_padding:\n  shapes:\n    - [1, 2, 5, 5, 3, 3, 3, 1, valid, 1]\n")
    res = zl_run(OP="conv2d_padding", OP_FILE="conv2d", SHAPE_FILE=shape_file, **FAST)
    assert res.returncode == 0, res.explain()
    assert "torch.Size([1, 2, 5, 5])" in res.log_text
    assert "torch.Size([1, 2, 6, 6])" not in res.log_text  # the class's own list is not measured too
    ident = _identity(res)
    assert ident["shape_source"] == "conv2d_padding=yaml"
    assert ident["shape_sources"]["conv2d_padding"]["mechanism"] == "class_list:DEFAULT_SHAPES"
    written = yaml.safe_load((res.out_dir / "shapes.yaml").read_text())
    assert written["conv2d_padding"]["shapes"] == [[1, 2, 5, 5, 3, 3, 3, 1, "valid", 1]]


def test_iter_list_arity_mismatch_says_so_and_keeps_upstream(zl_run, tmp_path):
    shape_file = _yaml(tmp_path, "conv2d_padding:\n  shapes:\n    - [1, 2, 5, 5]\n")
    res = zl_run(OP="conv2d_padding", OP_FILE="conv2d", SHAPE_FILE=shape_file, **FAST)
    assert res.returncode == 0, res.explain()
    assert ("yaml key 'conv2d_padding' has shape arity [4] but Conv2DPaddingBenchmark.DEFAULT_SHAPES "
            "holds arity [10]") in res.log_text
    assert "torch.Size([1, 2, 6, 6])" in res.log_text and "torch.Size([1, 2, 5, 5])" not in res.log_text
    assert _identity(res)["shape_source"] == "conv2d_padding=hardcoded"


def test_iter_list_no_key_says_so(fake_pytest, tmp_path):
    """run_pytest.sh refuses a SHAPE_FILE without the operator's key at preflight
    (test_run_pytest.py); a direct pytest run with the plugins still says it in one line
    and keeps the class's shapes, never a mix."""
    shape_file = _yaml(tmp_path, "softmax:\n  shapes:\n    - [4, 64]\n")
    out = tmp_path / "out"
    out.mkdir()
    proc = fake_pytest("benchmark/test_conv2d.py::test_conv2d_padding", "--shape_file", shape_file,
                       "-p", "_device_setup_plugin", "-p", "_shape_inject_plugin",
                       "-p", "_shape_iter_inject_plugin", OUT_DIR=str(out), ZL_OP="conv2d_padding",
                       ZL_SHAPE_FILE=shape_file, ZL_SHAPE_MODE="file")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert "no yaml key for Conv2DPaddingBenchmark (op=conv2d_padding; tried: conv2d_padding, " \
           "Conv2DPaddingBenchmark, GenericBenchmark, Benchmark)" in text
    assert "torch.Size([1, 2, 6, 6])" in text
    ident = json.loads((out / "run_identity.json").read_text())
    assert ident["shape_source"] == "conv2d_padding=hardcoded"


def test_bespoke_class_measures_the_yaml_shape(zl_run, tmp_path):
    shape_file = _yaml(tmp_path, "max_pool2d:\n  shapes:\n    - [1, 3, 7, 7]\n")
    res = zl_run(OP="max_pool2d", OP_FILE="max_pool2d", SHAPE_FILE=shape_file, **FAST)
    assert res.returncode == 0, res.explain()
    assert "MaxPool2dBenchmark (op=max_pool2d): 1 shape(s) from yaml key 'max_pool2d' as (N, C, H, W)" \
        in res.log_text
    assert "torch.Size([1, 3, 7, 7])" in res.log_text and "torch.Size([1, 2, 8, 8])" not in res.log_text
    entry = _identity(res)["shape_sources"]["max_pool2d"]
    assert entry["source"] == "yaml" and entry["mechanism"] == "bespoke:MaxPool2dBenchmark"


def test_class_without_mechanism_says_so(zl_run, tmp_path):
    shape_file = _yaml(tmp_path, "var_dim:\n  shapes:\n    - [8, 8]\n")
    res = zl_run(OP="var_dim", OP_FILE="max_pool2d", SHAPE_FILE=shape_file, **FAST)
    assert res.returncode == 0, res.explain()
    assert "no mechanism for VarDimBenchmark (op=var_dim)" in res.log_text
    assert _identity(res)["shape_source"] == "var_dim=hardcoded"


def test_set_shapes_class_provenance_and_upstream_mode(zl_run, tmp_path):
    shape_file = _yaml(tmp_path, "pad:\n  shapes:\n    - [3, 5]\n")
    res = zl_run(OP="pad", OP_FILE="pad", SHAPE_FILE=shape_file, **FAST)
    assert res.returncode == 0, res.explain()
    assert _identity(res)["shape_source"] == "pad=yaml"
    up = zl_run(OP="pad", OP_FILE="pad", SHAPE_FILE="upstream", **FAST)
    assert up.returncode == 0, up.explain()
    assert _identity(up)["shape_source"] == "pad=upstream"
    # Two runs whose shapes came from different places are refused like any caliber mismatch.
    problems = caliber.complaints([("A", res.out_dir), ("B", up.out_dir)])
    assert any(p.startswith("shape_source differs: A=pad=yaml, B=pad=upstream") for p in problems)


# ------------------------------------------------------------------ caliber unit

def test_caliber_refuses_different_shape_sources(tmp_path):
    base = {"backend": "cuda", "device": "0", "timer": "direct", "bench_level": "core",
            "shape_mode": "file", "tuner_cache": "isolated", "direct_repeat": 1}
    runs = []
    for name, source, mode in (("A", "conv2d=yaml", "record"), ("B", "conv2d=hardcoded", "replay")):
        d = tmp_path / name
        d.mkdir()
        (d / "run_identity.json").write_text(json.dumps({**base, "shape_source": source, "autotune_mode": mode,
                                                         **link_fields(mode)}))
        runs.append((name, d))
    assert caliber.complaints(runs) == ["shape_source differs: A=conv2d=yaml, B=conv2d=hardcoded"]
    (runs[1][1] / "run_identity.json").write_text(json.dumps({**base, "shape_source": "conv2d=yaml",
                                                               "autotune_mode": "replay",
                                                               **link_fields("replay")}))
    assert caliber.complaints(runs) == []


# ------------------------------------------------------------------ ops/shapes_single.yaml

def _single(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "zl.shapes.single", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


def test_single_shapes_generated_and_checked_against_the_scan(fake_flaggems_dir, tmp_path):
    gen = _single(fake_flaggems_dir)
    assert gen.returncode == 0
    data = yaml.safe_load(gen.stdout)
    # every mechanism a yaml reaches gets a key; the class nothing reaches is named instead
    assert data["conv2d_padding"]["shapes"] == [[1, 2, 6, 6, 2, 3, 3, 1, "valid", 1]]
    assert data["max_pool2d"]["shapes"] == [[1, 2, 8, 8]] and data["pad"]["shapes"] == [[4, 8]]
    assert data["mm"]["shapes"] == [[1, 32, 32, 32]] and "var_dim" not in data
    assert "#   var_dim: VarDimBenchmark: no yaml reaches it" in gen.stdout
    good = tmp_path / "single.yaml"
    good.write_text(gen.stdout)
    assert _single(fake_flaggems_dir, "--check", good).returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("sofmax:\n  shapes: [[4, 64]]\nmm:\n  shapes: [[32, 32]]\n")
    res = _single(fake_flaggems_dir, "--check", bad)
    assert res.returncode == 1
    assert "sofmax: not an op_name" in res.stderr and "mm: shape [32, 32] has arity 2" in res.stderr
    assert _single(tmp_path, "--check", good).returncode == 2


# `--check` exits 0: every key is an op_name of the bundled fake tree and every shape has an
# arity its class takes (a subset of the generated file, a second shape under softmax).
SINGLE_GOOD = """conv2d_padding:
  shapes:
  - [1, 2, 6, 6, 2, 3, 3, 1, valid, 1]
mm:
  shapes:
  - [1, 32, 32, 32]
softmax:
  shapes:
  - [4, 64]
  - [8, 128]
"""
# `--check` exits 1 and names every entry except softmax, which is clean.
SINGLE_BAD = """sofmax:            # not an op_name of the fake tree (misspelled)
  shapes:
  - [4, 64]
mm:                # its BlasBenchmark takes 4-element shapes [b, m, n, k]
  shapes:
  - [32, 32]
relu:              # a bare list, not a mapping with `shapes`
- [4096]
abs:               # no shape at all
  shapes: []
exp: {}            # no `shapes` key
softmax:
  shapes:
  - [4, 64]
"""
# `--check` exits 2: the top level must map operator keys to entries, not list them.
SINGLE_NOT_A_MAPPING = "- softmax\n- mm\n"


def test_single_check_on_fixture_files(fake_flaggems_dir, tmp_path):
    """The checker against the bundled tree: a clean file, one naming each kind of problem, and
    files it cannot read (exit 2, a named reason, no traceback)."""
    files = {}
    for name, text in (("good", SINGLE_GOOD), ("bad", SINGLE_BAD), ("not_a_mapping", SINGLE_NOT_A_MAPPING)):
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(text, encoding="utf-8")
    assert _single(fake_flaggems_dir, "--check", files["good"]).returncode == 0
    res = _single(fake_flaggems_dir, "--check", files["bad"])
    assert res.returncode == 1, res.stderr
    named = {line.split(":", 1)[0].removeprefix("!!! ") for line in res.stderr.splitlines()}
    assert named == {"sofmax", "mm", "relu", "abs", "exp"}, res.stderr
    assert "sofmax: not an op_name" in res.stderr and "mm: shape [32, 32] has arity 2" in res.stderr
    for key in ("relu", "abs", "exp"):
        assert f"{key}: entry must be a mapping with a non-empty `shapes` list" in res.stderr
    binary = tmp_path / "latin1.yaml"
    binary.write_bytes(b"softmax:\n  shapes: [[4, 64]]  # \xe9\n")
    for path, why in ((files["not_a_mapping"], "is not a mapping of operator keys"),
                      (binary, "cannot read"), (tmp_path / "absent.yaml", "cannot read")):
        res = _single(fake_flaggems_dir, "--check", path)
        assert res.returncode == 2 and why in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_committed_single_shapes_are_well_formed():
    """ops/shapes_single.yaml as committed: every entry a non-empty `shapes` list, and the header's
    counts and omitted keys agree with the body. Its keys and arities are checked against the
    FlagGems tree named in the header (`python -m zl.shapes.single DIR --check
    ops/shapes_single.yaml`), which CI does not have; the checker itself is tested above."""
    from zl.shapes import single
    committed = REPO / "ops" / "shapes_single.yaml"
    text = committed.read_text(encoding="utf-8")
    head = [line for line in text.splitlines() if line.startswith("#")]
    assert head[0].startswith("# One representative shape per FlagGems operator key")
    assert "(commit not given)" not in head[0]
    data = single.read(committed)
    assert single.shape_problems(data) == []
    keys, omitted_n = re.search(r"^# (\d+) keys\. Omitted \((\d+)\)", text, re.M).groups()
    omitted = [line[4:].split(":", 1)[0] for line in head if line.startswith("#   ")]
    assert int(keys) == len(data) and int(omitted_n) == len(omitted)
    assert not set(omitted) & set(data)


# ------------------------------------------------------------------ bespoke registry units
# The registered upstream classes need a GPU; stand-ins with the same names and the attributes
# each entry drives check that the yaml fields reach the class's own input code.

def _bespoke_bench(name, module, **attrs):
    cls = type(name, (), {"__module__": module.__name__, **attrs})
    bench = cls()
    bench.op_name, bench.device = "op_x", "cpu"
    return bench


@pytest.fixture
def bespoke_env(tmp_path, monkeypatch):
    monkeypatch.delenv("OUT_DIR", raising=False)
    monkeypatch.setenv("ZL_SHAPE_MODE", "file")

    def use(text):
        path = tmp_path / f"y{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(text)
        monkeypatch.setenv("ZL_SHAPE_FILE", str(path))
    return use


def test_bespoke_flash_mla_fields_become_test_params(bespoke_env, monkeypatch):
    from zl.shapes import bespoke
    module = type(sys)("zl_test_flash_mla")

    class TestParam:
        def __init__(self, **kw):
            self.kw = kw
    module.TestParam = TestParam
    monkeypatch.setitem(sys.modules, module.__name__, module)
    bench = _bespoke_bench("FlashMLAWithKVCacheBenchmark", module,
                           make_input=lambda self, p: iter([p.kw]))
    bespoke_env("op_x:\n  shapes:\n    - [64, 256, 128, 576, 1, 0]\n")
    inj = bespoke.BespokeInjector(lambda m: None)
    entry = bespoke.REGISTRY["FlashMLAWithKVCacheBenchmark"]
    out = list(inj.replacement(entry, lambda b, d: iter(["upstream"]))(bench, None))
    assert out == [dict(batch=64, topk=256, h_q=128, d_qk=576, is_fp8=True, have_attn_sink=False)]


def test_bespoke_upsample_cfgs_feed_the_class_iterator(bespoke_env):
    from zl.shapes import bespoke
    bench = _bespoke_bench("UpsampleBilinear2dAaBackwardBenchmark", sys.modules[__name__])
    bench._cfgs = [(4, 16, 4, 4, 1, 1, False, "tiny")]
    bespoke_env("op_x:\n  shapes:\n    - [1, 2, 8, 8, 4, 4, 0]\n    - [1, 2, 4, 4, 8, 8, 1]\n")

    def upstream_iter(b, dtype):  # the class's own loop over self._cfgs
        for n, c, hi, wi, ho, wo, ac, _label in b._cfgs:
            yield [n, c, ho, wo], [ho, wo], [n, c, hi, wi], ac
    inj = bespoke.BespokeInjector(lambda m: None)
    fn = inj.replacement(bespoke.REGISTRY["UpsampleBilinear2dAaBackwardBenchmark"], upstream_iter)
    assert list(fn(bench, None)) == [([1, 2, 4, 4], [4, 4], [1, 2, 8, 8], 0),
                                     ([1, 2, 8, 8], [8, 8], [1, 2, 4, 4], 1)]


def test_bespoke_steps_back_on_arity_and_on_a_changed_class(bespoke_env):
    from zl.shapes import bespoke
    said = []
    inj = bespoke.BespokeInjector(said.append)
    entry = bespoke.REGISTRY["MaxPool2dBenchmark"]
    bench = _bespoke_bench("MaxPool2dBenchmark", sys.modules[__name__],
                           input_fn=lambda self, s, d, dev: iter([s]))
    bespoke_env("op_x:\n  shapes:\n    - [8, 8]\n")
    assert list(inj.replacement(entry, lambda b, d: iter(["upstream"]))(bench, None)) == ["upstream"]
    assert "takes 4 fields (N, C, H, W); upstream's shapes are measured" in said[-1]
    gone = _bespoke_bench("MaxPool2dBenchmark", sys.modules[__name__])  # upstream dropped input_fn
    bespoke_env("op_x:\n  shapes:\n    - [1, 2, 8, 8]\n")
    assert list(inj.replacement(entry, lambda b, d: iter(["upstream"]))(gone, None)) == ["upstream"]
    assert "no longer has input_fn" in said[-1]
