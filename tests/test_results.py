"""The results check: capture (zl.results.capture / recorder), compare, and the screen.

The end-to-end tests run ab_rlc_test.sh through the real run_pytest.sh on the fake tree:
`ZL_TEST_SKEW=1` makes the fake abs kernel return 1.01 * |x| at the same speed.
"""
import json
import subprocess
import sys
import types

import pytest
import torch

import _results_plugin
from harness.runner import REPO_ROOT, run_zl
from zl.results import capture, compare
from zl.results.recorder import ResultsRecorder


@pytest.mark.parametrize("name,reason", [
    ("dropout", "random operator (dropout)"), ("native_dropout", "random operator (dropout)"),
    ("randn", "random operator (randn)"), ("rand_like", "random operator (rand)"),
    ("normal", "random operator (normal)"), ("uniform_", "random operator (uniform)"),
    ("exponential_", "random operator (exponential)"), ("bernoulli", "random operator (bernoulli)"),
    ("multinomial", "random operator (multinomial)"), ("dropout_backward", "random operator (dropout)"),
    ("add_", "in-place operator"), ("zero_", "in-place operator"),
    ("layer_norm", None), ("normalize", None), ("softmax", None), ("gelu_backward", None), ("randomize_ish", None),
])
def test_random_and_inplace_names(name, reason):
    assert capture.not_comparable_reason(name) == reason


def _rec(values, dtype=torch.float32):
    return capture.describe(torch.tensor(values, dtype=dtype))


def test_tensor_comparison_equal_within_tol_and_different():
    a = _rec([1.0, 2.0, 3.0])
    assert compare.compare_tensor(_rec([1.0, 2.0, 3.0]), a)["status"] == "equal"
    near = compare.compare_tensor(_rec([1.0, 2.0, 3.000001]), a)
    assert near["status"] == "within_tol" and near["abs"] > 0
    off = compare.compare_tensor(_rec([1.0, 2.0, 3.03]), a)
    assert off["status"] == "different" and abs(off["abs"] - 0.03) < 1e-6
    assert off["allowed"] == pytest.approx(1e-4 + 1.3e-6 * 3) and off["ref"] == 3.0 and "rel" not in off
    # bf16 tolerance is wider: 1 % is within it, 5 % is not
    h = _rec([1.0, 2.0, 3.0], torch.bfloat16)
    assert compare.compare_tensor(_rec([1.0, 2.0, 3.03], torch.bfloat16), h)["status"] in ("within_tol", "equal")
    assert compare.compare_tensor(_rec([1.0, 2.0, 3.15], torch.bfloat16), h)["status"] == "different"
    assert compare.compare_tensor(_rec([1, 2], torch.int64), _rec([1, 3], torch.int64))["status"] == "different"
    assert "vs" in compare.compare_tensor(_rec([1.0, 2.0]), a)["why"]
    nan = compare.compare_tensor(_rec([1.0, 2.0, float("nan")]), a)
    assert nan["status"] == "different" and "nan/inf" in nan["why"]


# FlagGems' tolerance table (src/flag_gems/testing RESOLUTION, atol 1e-4), pinned here so
# a loosened entry fails a test instead of silently widening "within_tol".
PINNED_RTOL = {"float16": 1e-3, "bfloat16": 0.016, "float32": 1.3e-6, "float64": 1e-7}


def _synthetic(values, dtype):
    """A record of the given float64 values labelled `dtype`: the criterion alone, free of
    what a dtype can represent."""
    values = [float(v) for v in values]
    return {"dtype": dtype, "shape": [len(values)], "numel": len(values), "digest": f"x:{values}",
            "nan": 0, "inf": 0, "values": values}


@pytest.mark.parametrize("dtype", sorted(PINNED_RTOL))
@pytest.mark.parametrize("ref", [3.0, -250.0, 1e4])
def test_each_float_dtype_at_and_just_beyond_its_relative_bound(dtype, ref):
    bound = 1e-4 + PINNED_RTOL[dtype] * abs(ref)
    a = _synthetic([1.0, ref], dtype)
    at = compare.compare_tensor(_synthetic([1.0, ref + bound * (1 - 1e-6)], dtype), a)
    beyond = compare.compare_tensor(_synthetic([1.0, ref - bound * (1 + 1e-6)], dtype), a)
    assert at["status"] == "within_tol" and beyond["status"] == "different"
    assert beyond["allowed"] == pytest.approx(bound, rel=1e-9) and beyond["ref"] == ref


@pytest.mark.parametrize("dtype", sorted(PINNED_RTOL))
def test_near_zero_the_absolute_bound_decides(dtype):
    """Against a reference of 0 only atol counts (1e-4); nothing is divided by the 0."""
    a = _synthetic([0.0, 0.0], dtype)
    assert compare.compare_tensor(_synthetic([0.0, 0.99999e-4], dtype), a)["status"] == "within_tol"
    off = compare.compare_tensor(_synthetic([0.0, -1.00001e-4], dtype), a)
    assert off["status"] == "different" and off["allowed"] == pytest.approx(1e-4) and off["ref"] == 0.0


def test_a_half_percent_float16_error_is_not_within_tolerance():
    """Real float16 tensors: 1.0048828125 (5 ulps above 1, a 0.49 % error) against 1.0 is
    beyond 1e-4 + 1e-3 x 1; one ulp (0.098 %) is within."""
    a = _rec([1.0, 2.0], torch.float16)
    assert compare.compare_tensor(_rec([1.0048828125, 2.0], torch.float16), a)["status"] == "different"
    assert compare.compare_tensor(_rec([1.0009765625, 2.0], torch.float16), a)["status"] == "within_tol"


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_and_bool_outputs_must_be_equal(dtype):
    a = _rec([1, 0, 1], dtype)
    assert compare.compare_tensor(_rec([1, 0, 1], dtype), a)["status"] == "equal"
    off = compare.compare_tensor(_rec([1, 1, 1], dtype), a)
    assert off["status"] == "different" and off["why"] == f"{str(dtype)[6:]} must be equal"
    a["reduce"] = 10 ** 6     # a reduction allowance never loosens an exact dtype
    assert compare.compare_tensor(_rec([1, 1, 1], dtype), a, reduce_aware=True)["status"] == "different"


def test_nan_and_inf_must_sit_at_the_same_positions():
    a = _rec([float("nan"), 1.0, float("inf")])
    assert compare.compare_tensor(_rec([float("nan"), 1.000001, float("inf")]), a)["status"] == "within_tol"
    moved = compare.compare_tensor(_rec([1.0, float("nan"), float("inf")]), a)
    assert moved["status"] == "different" and moved["why"] == "nan/inf at different positions"
    flipped = compare.compare_tensor(_rec([float("nan"), 1.0, float("-inf")]), a)
    assert flipped["status"] == "different"


def test_reduce_scales_atol_against_torch_only():
    """FlagGems' tests scale atol by reduce_dim (nll_loss: the target's numel); the B-vs-A
    check keeps 1e-4: both sides ran FlagGems on the same inputs."""
    a = _synthetic([0.0, 5.0], "float32")
    a["reduce"] = 1000
    b = _synthetic([0.05, 5.0], "float32")
    torch_like = compare.compare_tensor(b, a, reduce_aware=True)
    assert torch_like["status"] == "within_tol" and torch_like["allowed"] == pytest.approx(0.1)
    assert compare.compare_tensor(b, a)["status"] == "different"


def test_a_mismatch_against_a_zero_reference_names_the_bound_not_a_ratio():
    """nll_loss2d_forward on the H200 read `worst error abs 0.002 rel 8.97e+304`."""
    ops = {"nll": {"entries": {"float16|1#0": {"gems": [_synthetic([0.002], "float16")],
                                                "torch": [_synthetic([0.0], "float16")]}}}}
    res = compare.compare_op(ops["nll"], ops["nll"], "gems", ("torch",))
    assert res["value"] == "MISMATCH (1/1 shapes, worst error abs 0.002 > allowed 0.0001 at float16|1#0)"
    assert "e+" not in res["value"]


def test_worst_shape_is_the_one_furthest_beyond_its_bound():
    """A large absolute error on a large value can be the smaller violation."""
    big = {"gems": [_synthetic([1000.0 + 2.0], "float16")], "torch": [_synthetic([1000.0], "float16")]}
    small = {"gems": [_synthetic([0.01], "float16")], "torch": [_synthetic([0.0], "float16")]}
    doc = {"entries": {"float16|big#0": big, "float16|small#0": small}}
    res = compare.compare_op(doc, doc, "gems", ("torch",))
    assert res["value"].startswith("MISMATCH (2/2 shapes, worst error abs 0.01 > allowed 0.0001 at float16|small#0")


@pytest.mark.parametrize("op_name,inputs,out_shape,size", [
    ("exp", [(64, 32)], (64, 32), 1),
    ("add", [(64, 32), (64, 32)], (64, 32), 1),
    ("sum", [(1000, 64)], (1000,), 64),
    ("nll_loss2d_forward", [(4, 10, 8, 8), (4, 8, 8)], (), 2560),
    ("mm", [(64, 128), (128, 32)], (64, 32), 128),
    ("mm", [(256, 256), (256, 256)], (256, 256), 256),
    ("addmm", [(32,), (64, 128), (128, 32)], (64, 32), 128),
    ("conv2d", [(2, 16, 12, 12), (8, 16, 3, 3)], (2, 8, 12, 12), 48),
])
def test_reduction_size(op_name, inputs, out_shape, size):
    assert capture.reduction_size(op_name, [torch.zeros(s) for s in inputs], torch.zeros(out_shape)) == size


def test_large_tensors_keep_a_sample_and_compare_on_it():
    x = torch.arange(capture.FULL_CAP * 4, dtype=torch.float32)
    rx = capture.describe(x)
    assert "values" not in rx and len(rx["sample"]) == capture.SAMPLE_SIZE and rx["numel"] == x.numel()
    ry = capture.describe(x * 1.01)
    res = compare.compare_tensor(ry, rx)
    assert res["status"] == "different" and res["why"] == "sampled"


class FakeBench:
    def __init__(self, op_name, torch_op, gems_op=None, is_backward=False, is_inplace=False):
        self.op_name, self.torch_op, self.gems_op = op_name, torch_op, gems_op
        self.is_backward, self.is_inplace = is_backward, is_inplace


def _record(tmp_path, bench, inputs, gems_scale=1.0, name="run"):
    rec = ResultsRecorder(tmp_path / name, log=lambda m: None)
    for x in inputs:
        rec.record(bench, bench.torch_op, (x,), {})
        rec.gems_depth = 1  # as inside flag_gems.use_gems()
        rec.record(bench, lambda t: bench.torch_op(t) * gems_scale, (x,), {})
        rec.gems_depth = 0
        rec.flush()  # what leaving the outermost use_gems() does
    return tmp_path / name, rec


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16, torch.int32, torch.bool,
                                   torch.int8, torch.float8_e4m3fn])
def test_large_outputs_are_described_where_they_live_with_the_same_statistics(monkeypatch, dtype):
    """Above HOST_CAP the record comes from chunked device-side reductions (a 2^30-element
    output timed a real case out on the H200); it must say what the host path says."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(10_003, generator=gen) * 100).to(dtype)
    if dtype.is_floating_point and dtype.itemsize > 1:
        x[7], x[9000] = float("nan"), float("inf")
    if dtype == torch.int8:
        x[11] = -128      # its absolute value does not fit int8: abs_mean must still be exact
    small = capture.describe(x)
    monkeypatch.setattr(capture, "HOST_CAP", 1000)
    monkeypatch.setattr(capture, "CHUNK", 4096)        # several chunks, a ragged last one
    large = capture.describe(x)
    assert large["digest"].startswith("wsum64:") and "sha256" not in large
    for key in ("dtype", "shape", "numel", "nan", "inf", "sample_index"):
        assert large[key] == small[key], key
    for key in ("min", "max", "mean", "abs_mean"):
        assert large[key] == pytest.approx(small[key], rel=1e-9, nan_ok=True), key
    assert large["sample"] == pytest.approx(small["sample"], nan_ok=True)
    again = capture.describe(x.clone())
    assert again["digest"] == large["digest"]
    assert compare.compare_tensor(again, large)["status"] == "equal"


@pytest.mark.parametrize("fill", [float("nan"), float("inf"), float("-inf")])
def test_a_large_output_with_no_finite_element_has_no_statistics(monkeypatch, fill):
    """Counts of the non-finite kinds, and min/max/mean left empty, as on the host path."""
    x = torch.full((5003,), fill, dtype=torch.float16)
    small = capture.describe(x)
    monkeypatch.setattr(capture, "HOST_CAP", 1000)
    monkeypatch.setattr(capture, "CHUNK", 2048)
    large = capture.describe(x)
    assert (large["nan"], large["inf"]) == (small["nan"], small["inf"]) and large["nan"] + large["inf"] == 5003
    assert all(large[k] is None and small[k] is None for k in ("min", "max", "mean", "abs_mean"))


def test_large_output_digest_sees_one_changed_word_anywhere(monkeypatch):
    monkeypatch.setattr(capture, "HOST_CAP", 100)
    monkeypatch.setattr(capture, "CHUNK", 1000)
    x = torch.linspace(-3, 3, 5001, dtype=torch.float16)          # odd byte count: a padded word
    base = capture.describe(x)["digest"]
    for i in (0, 2499, 5000):
        y = x.clone()
        y.view(torch.int16)[i] ^= 1                               # one bit, lowest mantissa bit
        assert capture.describe(y)["digest"] != base, i
    swapped = x.clone()
    swapped[[10, 11]] = x[[11, 10]]                               # same values, other places
    assert capture.describe(swapped)["digest"] != base
    nan_a = torch.full((5001,), float("nan"), dtype=torch.float32)
    nan_b = nan_a.clone()
    nan_b.view(torch.int32)[5] ^= 1                               # another NaN payload
    assert capture.describe(nan_a)["digest"] != capture.describe(nan_b)["digest"]


def test_results_written_before_the_digest_field_still_compare():
    a, b = _rec([1.0, 2.0, 3.0]), _rec([1.0, 2.0, 3.0])
    del a["digest"], b["digest"]
    assert compare.compare_tensor(b, a)["status"] == "equal"
    b2 = _rec([1.0, 2.0, 4.0])
    del b2["digest"]
    assert compare.compare_tensor(b2, a)["status"] == "different"


def test_recorder_sides_keys_and_a_planted_change(tmp_path):
    inputs = [torch.randn(8, 16), torch.randn(64)]
    bench = FakeBench("exp", torch.exp)
    a, rec = _record(tmp_path, bench, inputs, name="A")
    doc = json.loads((a / "results" / "exp.json").read_text())
    assert sorted(doc["entries"]) == ["float32|64#0", "float32|8x16#0"]
    assert set(doc["entries"]["float32|64#0"]) == {"torch", "gems"}
    b, _ = _record(tmp_path, bench, inputs, name="B")
    same = compare.compare_runs(a, b)
    assert same["value"] == "match" and same["torch_value"] == "A match; B match"
    c, _ = _record(tmp_path, bench, inputs, gems_scale=1.01, name="C")
    res = compare.compare_runs(a, c)
    assert res["status"] == "mismatch" and res["value"].startswith("MISMATCH (2/2 shapes, worst error abs")
    assert res["torch_value"].startswith("A match; B MISMATCH")
    assert compare.exit_code(res) == compare.EXIT_MISMATCH


def test_random_and_inplace_operators_are_na_and_not_called(tmp_path):
    calls = []

    def dropout(x):
        calls.append(1)
        return torch.nn.functional.dropout(x, 0.5)
    a, _ = _record(tmp_path, FakeBench("dropout", dropout), [torch.randn(4)], name="A")
    b, _ = _record(tmp_path, FakeBench("dropout", dropout), [torch.randn(4)], name="B")
    assert not calls
    res = compare.compare_runs(a, b)
    assert res["value"] == "n/a (random operator (dropout))" and compare.exit_code(res) == compare.EXIT_NA
    # in-place discovered at capture time: the output aliases the input
    c, _ = _record(tmp_path, FakeBench("relu_inplace_alias", lambda t: t.clamp_(min=0)), [torch.randn(4)], name="C")
    d, _ = _record(tmp_path, FakeBench("relu_inplace_alias", lambda t: t.clamp_(min=0)), [torch.randn(4)], name="D")
    assert compare.compare_runs(c, d)["value"] == "n/a (in-place operator (output aliases an input))"


def test_backward_records_output_and_gradients(tmp_path):
    bench = FakeBench("gelu_backward", torch.nn.functional.gelu, is_backward=True)
    x = torch.randn(32).requires_grad_()
    run, _ = _record(tmp_path, bench, [x])
    entry = json.loads((run / "results" / "gelu_backward.json").read_text())["entries"]["float32|32#0"]
    assert len(entry["torch"]) == 2 and entry["torch"][1]["shape"] == [32]
    assert entry["torch"] == entry["gems"]


def _record_pair(tmp_path, bench, x, gems_op, name="run", torch_op=None):
    """One shape: the torch side with `torch_op` (default bench.torch_op), the gems side with `gems_op`."""
    rec = ResultsRecorder(tmp_path / name, log=lambda m: None)
    rec.record(bench, torch_op or bench.torch_op, x if isinstance(x, tuple) else (x,), {})
    rec.gems_depth = 1
    rec.record(bench, gems_op, x if isinstance(x, tuple) else (x,), {})
    rec.gems_depth = 0
    rec.flush()
    return tmp_path / name, rec


def _shifted(t):
    """(t + 1000) - 1000: exact in float32, rounded to float16's 0.5 steps near 1000."""
    return (t + 1000) - 1000


def test_torch_reference_is_computed_upcast_like_flaggems_tests(tmp_path):
    """A float16 torch output is one rounding of the answer; FlagGems' tests compare with
    torch on float32 copies rounded back. A kernel that computes in float32 must match that
    reference even where float16 torch is far off (here by up to 0.25)."""
    bench = FakeBench("shifted", _shifted)
    x = torch.linspace(-1, 1, 64).to(torch.float16)
    accurate = lambda t: _shifted(t.float()).to(torch.float16)   # noqa: E731
    run, _ = _record_pair(tmp_path, bench, x, accurate)
    doc = json.loads((run / "results" / "shifted.json").read_text())
    entry = doc["entries"]["float16|64#0"]
    assert set(entry) == {"torch", "gems", capture.REFERENCE_SIDE}
    assert entry[capture.REFERENCE_SIDE][0]["dtype"] == "float16"       # rounded back, as ref.to(dtype)
    assert entry[capture.REFERENCE_SIDE][0]["digest"] == entry["gems"][0]["digest"]
    res = compare.compare_runs(run, run)
    assert res["torch_value"] == "A match; B match"
    assert res["ops"]["shifted"]["a_vs_torch"]["shapes"]["float16|64#0"]["reference"] == capture.REFERENCE_SIDE
    # against the plain float16 torch output the same kernel would read as wrong
    plain = compare.compare_op(doc, doc, "gems", ("torch",))
    assert plain["status"] == "mismatch"


def test_no_upcast_reference_for_float32_and_a_failed_one_falls_back(tmp_path):
    bench = FakeBench("exp", torch.exp)
    run, _ = _record_pair(tmp_path, bench, torch.randn(16), torch.exp, name="f32")
    entry = json.loads((run / "results" / "exp.json").read_text())["entries"]["float32|16#0"]
    assert set(entry) == {"torch", "gems"}

    def half_only(t):
        if t.dtype != torch.float16:
            raise TypeError("float16 only")
        return t * 2
    logged = []
    rec = ResultsRecorder(tmp_path / "h", log=logged.append)
    x = torch.randn(16).to(torch.float16)
    rec.record(FakeBench("half_only", half_only), half_only, (x,), {})
    rec.gems_depth = 1
    rec.record(FakeBench("half_only", half_only), half_only, (x,), {})
    rec.gems_depth = 0
    rec.flush()
    doc = json.loads((tmp_path / "h" / "results" / "half_only.json").read_text())
    assert doc["reference_errors"] == {"float16|16#0": "TypeError: float16 only"}
    assert capture.REFERENCE_SIDE not in doc["entries"]["float16|16#0"]
    assert any("upcast reference of half_only not made" in m for m in logged) and rec.errors == 0
    assert compare.compare_runs(tmp_path / "h", tmp_path / "h")["torch_value"] == "A match; B match"


def test_integer_outputs_of_the_reference_are_the_plain_torch_ones(tmp_path):
    """Indices come from the plain call: the upcast only stands in for floating outputs."""
    bench = FakeBench("max_dim", lambda t: torch.max(t, dim=1))
    x = torch.randn(8, 32).to(torch.bfloat16)
    run, _ = _record_pair(tmp_path, bench, x, lambda t: torch.max(t, dim=1))
    entry = json.loads((run / "results" / "max_dim.json").read_text())["entries"]["bfloat16|8x32#0"]
    ref, plain = entry[capture.REFERENCE_SIDE], entry["torch"]
    assert [r["dtype"] for r in ref] == ["bfloat16", "int64"] and ref[1]["digest"] == plain[1]["digest"]


def test_backward_reference_is_upcast_with_the_same_rounded_gradient(tmp_path):
    bench = FakeBench("gelu_backward", torch.nn.functional.gelu, is_backward=True)
    x = torch.randn(32).to(torch.float16).requires_grad_()
    run, _ = _record_pair(tmp_path, bench, x, torch.nn.functional.gelu)
    entry = json.loads((run / "results" / "gelu_backward.json").read_text())["entries"]["float16|32#0"]
    ref = entry[capture.REFERENCE_SIDE]
    assert [r["dtype"] for r in ref] == ["float16", "float16"] and ref[1]["shape"] == [32]
    gen = torch.Generator().manual_seed(0)
    dout = torch.randn(32, generator=gen).to(torch.float16).float()
    x32 = x.detach().float().requires_grad_()
    (grad,) = torch.autograd.grad(torch.nn.functional.gelu(x32), x32, dout)
    assert ref[1]["values"] == grad.to(torch.float16).double().tolist()


def test_nll_loss_against_torch_scales_atol_by_what_it_reduces(tmp_path):
    """A loss over 4 x 10 x 8 x 8 inputs: an absolute difference of 0.002 against a reference
    near 0 is inside FlagGems' reduced-loss bound (atol x the elements reduced)."""
    bench = FakeBench("nll_loss2d_forward", torch.nn.functional.nll_loss)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 10, 8, 8, generator=gen).to(torch.float16)
    target = torch.randint(0, 10, (4, 8, 8), generator=gen)
    off = lambda t, y: torch.nn.functional.nll_loss(t, y) + 0.002   # noqa: E731
    run, _ = _record_pair(tmp_path, bench, (x, target), off)
    doc = json.loads((run / "results" / "nll_loss2d_forward.json").read_text())
    (entry,) = doc["entries"].values()
    assert entry[capture.REFERENCE_SIDE][0]["reduce"] == 2560
    res = compare.compare_runs(run, run)
    assert res["torch_value"] == "A within_tol; B within_tol"


def test_backward_capture_of_a_large_output_is_reproducible(tmp_path, monkeypatch):
    """Above HOST_CAP the upstream gradient is drawn on the output's device: two runs must
    still record the same gradients (a fresh seeded generator each call)."""
    monkeypatch.setattr(capture, "HOST_CAP", 16)
    bench = FakeBench("gelu_backward", torch.nn.functional.gelu, is_backward=True)
    x = torch.randn(64, generator=torch.Generator().manual_seed(1)).requires_grad_()
    docs = []
    for i in range(2):
        run, _ = _record(tmp_path / str(i), bench, [x])
        docs.append(json.loads((run / "results" / "gelu_backward.json").read_text())["entries"]["float32|64#0"])
    grad = docs[0]["gems"][1]
    assert grad["digest"].startswith("wsum64:") and grad["shape"] == [64]
    assert docs[0] == docs[1]


def test_compare_cli_exit_codes_and_tsv(tmp_path):
    bench = FakeBench("exp", torch.exp)
    a, _ = _record(tmp_path, bench, [torch.randn(16)], name="A")
    c, _ = _record(tmp_path, bench, [torch.randn(16)], gems_scale=1.01, name="C")
    cmd = [sys.executable, "-m", "zl.results.compare"]
    ok = subprocess.run(cmd + [str(a), str(a), "--tsv"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout == "match\tA match; B match\n"
    bad = subprocess.run(cmd + [str(a), str(c), "--json", str(tmp_path / "r.json")], cwd=REPO_ROOT,
                         capture_output=True, text=True)
    assert bad.returncode == 10 and bad.stdout.startswith("MISMATCH (1/1 shapes")
    assert json.loads((tmp_path / "r.json").read_text())["ops"]["exp"]["b_vs_a"]["status"] == "mismatch"
    none = subprocess.run(cmd + [str(a), str(tmp_path / "missing")], cwd=REPO_ROOT, capture_output=True, text=True)
    assert none.returncode == 2 and "run directory not found" in none.stderr
    (tmp_path / "E").mkdir()
    empty = subprocess.run(cmd + [str(a), str(tmp_path / "E")], cwd=REPO_ROOT, capture_output=True, text=True)
    assert empty.returncode == 1 and empty.stdout.startswith("n/a (side B recorded no outputs)")
    (c / "results" / "exp.json").write_text("{not json")
    corrupt = subprocess.run(cmd + [str(a), str(c)], cwd=REPO_ROOT, capture_output=True, text=True)
    assert corrupt.returncode == 2 and "unreadable results file" in corrupt.stderr


def test_plugin_switch_and_bad_value(monkeypatch, tmp_path):
    from harness.fake_config import FakeConfig
    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    monkeypatch.setenv("ZL_ENABLE_RESULTS", "maybe")
    with pytest.raises(pytest.UsageError, match="ZL_ENABLE_RESULTS='maybe'"):
        _results_plugin.pytest_configure(FakeConfig(_results_plugin))
    off = FakeConfig(_results_plugin, zl_results="0")  # the option wins over the variable
    _results_plugin.pytest_configure(off)
    assert off.pluginmanager.get_plugin(_results_plugin.NAME) is None
    monkeypatch.setenv("ZL_ENABLE_RESULTS", "1")
    on = FakeConfig(_results_plugin)
    _results_plugin.pytest_configure(on)
    session = on.pluginmanager.get_plugin(_results_plugin.NAME)
    assert session is not None and session.recorder.run_dir == tmp_path
    _results_plugin.pytest_unconfigure(on)
    assert on.pluginmanager.get_plugin(_results_plugin.NAME) is None


# ---------------------------------------------------------------- screens on the CPU

def _screen(tmp_path, switch, name):
    root = tmp_path / name
    r = run_zl(tmp_path / f"w_{name}", script="ab_rlc_test.sh", timeout=400, OPS="abs", SWITCH=switch, AB_ROOT=root)
    assert r.returncode == 0, r.explain()
    import csv
    with open(root / "screen.tsv", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))[0], r


def test_screen_flags_a_wrong_answer_at_equal_speed(tmp_path):
    row, r = _screen(tmp_path, "ZL_TEST_SKEW", "skew")
    assert row["verdict"] == "WRONG_RESULTS", r.explain()
    assert row["results"].startswith("MISMATCH (2/2 shapes, worst error abs") and "> allowed" in row["results"]
    assert " rel " not in row["results"]
    assert row["results_torch"].startswith("A match; B MISMATCH")
    assert "!!! abs: WRONG_RESULTS: MISMATCH" in r.stdout


def test_aa_screen_is_not_wrong_results(tmp_path):
    row, r = _screen(tmp_path, "ZL_UNREAD_SWITCH", "aa")
    assert row["verdict"] == "NO_TRITON" and row["results"] == "match", r.explain()
    assert (tmp_path / "aa" / "abs_after" / "results" / "abs.json").is_file()


# ---------------------------------------------------------------- reports

STUB = REPO_ROOT / "tests" / "fixtures" / "runlogs" / "stub_run_pytest.py"


def _stub_cell(tmp_path, out, replay="", scale=1.0):
    """A run directory with an upstream-format run.log (the stub) plus recorded outputs."""
    env = {"OUT_DIR": str(out), "OP": "exp", "ZL_STUB_IR": "same", "REPLAY_FROM": replay, "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, str(STUB)], env=env, check=True, capture_output=True)
    torch.manual_seed(0)
    rec = ResultsRecorder(out, log=lambda m: None)
    bench = FakeBench("exp", torch.exp)
    x = torch.randn(64)
    rec.record(bench, bench.torch_op, (x,), {})
    rec.gems_depth = 1
    rec.record(bench, lambda t: torch.exp(t) * scale, (x,), {})
    rec.gems_depth = 0
    rec.flush()
    return out


def _summary(*args):
    return subprocess.run([sys.executable, str(REPO_ROOT / "batch_summary.py"), *map(str, args)],
                          cwd=REPO_ROOT, capture_output=True, text=True)


def test_ab_report_shows_a_mismatch_first_and_beside_the_replay_facts(tmp_path):
    a = _stub_cell(tmp_path, tmp_path / "A")
    b = _stub_cell(tmp_path, tmp_path / "B", replay=str(a), scale=1.01)
    r = _summary("--ab", a, b, "--json", tmp_path / "ab.json")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("!!! [ab] exp: WRONG RESULTS B vs A: MISMATCH (1/1 shapes")
    assert "[ab] exp: results B vs A: MISMATCH (1/1 shapes" in r.stdout
    doc = json.loads((tmp_path / "ab.json").read_text())
    assert next(iter(doc)) == "results" and doc["results"]["status"] == "mismatch"
    same = _summary("--ab", a, _stub_cell(tmp_path, tmp_path / "C", replay=str(a)))
    assert "WRONG RESULTS" not in same.stdout and "[ab] exp: results B vs A: match; vs torch: A match" in same.stdout


def test_ab_rounds_report_checks_b_cells_and_replays_against_the_record(tmp_path):
    root = tmp_path / "exp"
    rec = _stub_cell(tmp_path, root / "r1_A")
    _stub_cell(tmp_path, root / "r1_B", replay=str(rec))
    _stub_cell(tmp_path, root / "r2_B", replay=str(rec))
    _stub_cell(tmp_path, root / "r2_A", replay=str(rec), scale=1.01)  # a replay that is not the record
    r = _summary("--ab-rounds", root, "--label", "exp", "--json", tmp_path / "r.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[ab-rounds] exp: results B vs r1_A: match" in r.stdout
    assert "REPLAY_RESULTS_DIFFER label=exp side=r2_A MISMATCH (1/1 shapes" in r.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["results"]["replays"]["status"] == "mismatch" and doc["results"]["cells"]["r2_B"]["status"] == "match"


def test_device_plant_plugin_skews_abs_on_the_fake_tree(tmp_path):
    """benchmarks/_plant_skew_plugin.py (used on the H200) works as the CPU skew does."""
    scripts = REPO_ROOT / "benchmarks"
    r = run_zl(tmp_path / "w", script="ab_rlc_test.sh", timeout=400, OPS="abs", SWITCH="ZL_PLANT_SKEW",
               AB_ROOT=tmp_path / "root", ZL_EXTRA_PLUGINS="_plant_skew_plugin",
               PYTHONPATH=f"{REPO_ROOT}:{REPO_ROOT}/tests/fake_flaggems/src:{scripts}")
    import csv
    with open(tmp_path / "root" / "screen.tsv", newline="") as fh:
        row = list(csv.DictReader(fh, delimiter="\t"))[0]
    assert row["verdict"] == "WRONG_RESULTS" and "> allowed" in row["results"], r.explain()


def test_uninstall_leaves_a_wrapper_stacked_over_ours_in_place(tmp_path, monkeypatch):
    """Another plugin wrapping get_latency after us must keep its wrapper when we restore."""
    import sys as _sys

    class Benchmark:
        def run(self):
            pass

        def get_latency(self, op, *args, **kwargs):
            return 1.0
    mod = types.ModuleType("zl_test_results_fake.base")  # found like FlagGems' benchmark/base.py
    mod.Benchmark = Benchmark
    monkeypatch.setitem(_sys.modules, "zl_test_results_fake.base", mod)
    rec = ResultsRecorder(tmp_path, log=lambda m: None)
    rec.install()
    ours = Benchmark.get_latency

    def theirs(self, op, *a, **k):
        return ours(self, op, *a, **k) * 2
    Benchmark.get_latency = theirs
    rec.uninstall()
    assert Benchmark.get_latency is theirs
    b = Benchmark()
    b.op_name = "exp"
    assert b.get_latency(torch.exp, torch.zeros(2)) == 2.0
    assert not (tmp_path / "results").exists()  # inactive: no capture after uninstall
    # alone (nobody wrapped over us): the original comes back
    plain = Benchmark.__dict__["run"]
    Benchmark.get_latency = original = lambda self, op, *a, **k: 1.0
    rec2 = ResultsRecorder(tmp_path, log=lambda m: None)
    rec2.install()
    assert Benchmark.__dict__["get_latency"] is not original and Benchmark.__dict__["run"] is plain
    rec2.uninstall()
    assert Benchmark.__dict__["get_latency"] is original


def test_statistics_and_gradients_wait_until_flaggems_is_off(tmp_path, monkeypatch):
    """Inside use_gems() every aten op is FlagGems': the H200's IR dump of abs 4096x4096 held
    FlagGems' isnan/sum/nonzero kernels run by the capture. The operator runs inside; its
    description (and a backward's upstream gradient) after the outermost use_gems() exits;
    the gradient itself inside a fresh use_gems() with the caller's arguments."""
    import contextlib
    state = {"on": False, "entered": []}

    @contextlib.contextmanager
    def use_gems(*args, **kwargs):
        state["entered"].append((args, kwargs))
        state["on"] = True
        try:
            yield
        finally:
            state["on"] = False
    gems = types.SimpleNamespace(use_gems=use_gems)
    monkeypatch.setitem(sys.modules, "flag_gems", gems)
    seen = []
    real = capture.describe
    monkeypatch.setattr(capture, "describe", lambda t: seen.append(state["on"]) or real(t))

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            seen_bwd.append(state["on"])
            return g * 2
    seen_bwd = []
    rec = ResultsRecorder(tmp_path, log=lambda m: None)
    rec.install()
    x = torch.randn(8).requires_grad_()
    fwd, bwd = FakeBench("exp", torch.exp), FakeBench("scale_backward", Scale.apply, is_backward=True)
    with gems.use_gems(exclude=["zero_"]):
        rec.record(fwd, torch.exp, (x.detach(),), {})
        rec.record(bwd, Scale.apply, (x,), {})
        assert len(rec.pending) == 2 and not seen  # nothing described while FlagGems is on
    assert not rec.pending and seen and not any(seen)
    assert seen_bwd == [True]  # FlagGems' backward, in a fresh use_gems() ...
    assert state["entered"][-1] == ((), {"exclude": ["zero_"]})  # ... with the caller's arguments
    doc = json.loads((tmp_path / "results" / "scale_backward.json").read_text())
    (entry,) = doc["entries"].values()
    assert len(entry["gems"]) == 2 and entry["gems"][1]["shape"] == [8]
    assert json.loads((tmp_path / "results" / "exp.json").read_text())["entries"]
    rec.uninstall()
