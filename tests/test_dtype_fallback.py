"""zl.shapes.dtype_fallback + _shape_inject_plugin's --zl-dtype-fallback: under `first` a
refused --dtypes measures the op's first declared dtype (marker, identity, caliber); under
`all` nothing is patched and upstream's refusal stands."""

import json
import re

import pytest

import _shape_inject_plugin as sip
from harness.fake_config import FakeConfig
from zl.runlog.caliber import complaints
from zl.shapes.dtype_fallback import DtypeFallbackError, FirstDtype, check_policy
from harness.fake_benchmark import install_benchmark

TABLE_DTYPE = re.compile(r"Performance Test \(dtype=torch\.(\w+),")
MARKER = re.compile(r"DTYPE_FALLBACK op=(\S+) asked=(\S+) measured=(\S+)$", re.M)


class Benchmark:
    """upstream's set_dtypes, byte for byte in its refusal (tests/fake_flaggems/benchmark/base.py)."""

    def __init__(self, op_name, dtypes):
        self.op_name, self.dtypes, self.to_bench_dtypes = op_name, dtypes, dtypes

    def set_dtypes(self, user_desired_dtypes):
        if user_desired_dtypes:
            invalid = [d for d in user_desired_dtypes if d not in self.dtypes]
            if invalid:
                raise ValueError(f"Given dtype(s) '{', '.join(str(d) for d in invalid)}'"
                                 f"can't be supported by this op '{self.op_name}'")
        self.to_bench_dtypes = user_desired_dtypes or self.dtypes


class PickyBenchmark(Benchmark):
    """An override that refuses in its own words (not upstream's): never substituted."""

    def set_dtypes(self, user_desired_dtypes):
        if user_desired_dtypes and "bool" in user_desired_dtypes:
            raise ValueError("bool inputs make no sense here")
        super().set_dtypes(user_desired_dtypes)


ORIGINALS = (Benchmark.__dict__["set_dtypes"], PickyBenchmark.__dict__["set_dtypes"])


@pytest.fixture
def fake_base(monkeypatch):
    install_benchmark(monkeypatch, Benchmark)


@pytest.fixture
def first(fake_base, tmp_path):
    policy = FirstDtype(str(tmp_path), log=lambda message: None)
    policy.pytest_collection_finish(None)
    yield policy
    policy.close()


@pytest.mark.parametrize("word,want", [("", "all"), (None, "all"), ("all", "all"), (" First ", "first")])
def test_policy_words(word, want):
    assert check_policy(word) == want


def test_a_bad_policy_is_a_named_error():
    with pytest.raises(DtypeFallbackError, match=r"ZL_DTYPE_FALLBACK='any' \(--zl-dtype-fallback\) "
                                                 r"is not one of all, first"):
        check_policy("any")


def test_a_refused_dtype_measures_the_first_declared_one(first, tmp_path, capsys):
    bench = Benchmark("bitwise_and", ["int16", "int32", "bool"])
    bench.set_dtypes(["float16"])
    assert bench.to_bench_dtypes == ["int16"]       # not every declared dtype, not the last
    assert MARKER.findall(capsys.readouterr().err) == [("bitwise_and", "float16", "int16")]
    assert first.substituted == [("bitwise_and", "float16", "int16")]
    # upstream refuses a list with one unsupported dtype: that is substituted too, named whole
    bench.set_dtypes(["int32", "float16"])
    assert bench.to_bench_dtypes == ["int16"]
    assert MARKER.findall(capsys.readouterr().err) == [("bitwise_and", "int32,float16", "int16")]
    assert json.loads((tmp_path / "run_identity.json").read_text())["dtype_fallback"] == "first"


def test_an_accepted_dtype_and_other_errors_are_left_alone(first, capsys):
    bench = Benchmark("relu", ["float16", "float32"])
    bench.set_dtypes(["float16"])
    assert bench.to_bench_dtypes == ["float16"]
    bench.set_dtypes(None)
    assert bench.to_bench_dtypes == ["float16", "float32"]
    with pytest.raises(ValueError, match="bool inputs make no sense here"):
        PickyBenchmark("where", ["float16"]).set_dtypes(["bool"])
    with pytest.raises(ValueError, match="can't be supported by this op 'empty'"):
        Benchmark("empty", []).set_dtypes(["float16"])     # nothing declared: nothing to measure
    assert "DTYPE_FALLBACK" not in capsys.readouterr().err and first.substituted == []


def test_an_override_calling_upstream_is_substituted_once(first, capsys):
    bench = PickyBenchmark("where", ["int32"])
    bench.set_dtypes(["float16"])
    assert bench.to_bench_dtypes == ["int32"]
    assert len(MARKER.findall(capsys.readouterr().err)) == 1


def test_close_puts_the_originals_back(first):
    assert Benchmark.__dict__["set_dtypes"] is not ORIGINALS[0]
    first.close()
    assert (Benchmark.__dict__["set_dtypes"], PickyBenchmark.__dict__["set_dtypes"]) == ORIGINALS
    with pytest.raises(ValueError, match="can't be supported"):
        Benchmark("abs", ["float32"]).set_dtypes(["float16"])


def test_the_plugin_patches_nothing_under_all_and_refuses_a_bad_word(fake_base, monkeypatch, tmp_path):
    monkeypatch.setenv("OUT_DIR", str(tmp_path))
    for word in ("all", None):      # the option, then the variable's default
        config = FakeConfig(sip, zl_dtype_fallback=word)
        sip.pytest_configure(config)
        assert config.pluginmanager.get_plugin(sip.DTYPE_NAME) is None
        config.pluginmanager.get_plugin(sip.NAME).pytest_collection_finish(None)
        assert Benchmark.__dict__["set_dtypes"] is ORIGINALS[0]
        sip.pytest_unconfigure(config)
    assert not (tmp_path / "run_identity.json").exists()
    monkeypatch.setenv("ZL_DTYPE_FALLBACK", "first")     # the option wins over the variable
    with pytest.raises(pytest.UsageError, match="ZL_DTYPE_FALLBACK='newest'"):
        sip.pytest_configure(FakeConfig(sip, zl_dtype_fallback="newest"))
    config = FakeConfig(sip)
    sip.pytest_configure(config)
    config.pluginmanager.get_plugin(sip.DTYPE_NAME).pytest_collection_finish(None)
    bench = Benchmark("abs", ["float32"])
    bench.set_dtypes(["float16"])
    assert bench.to_bench_dtypes == ["float32"]
    sip.pytest_unconfigure(config)
    assert Benchmark.__dict__["set_dtypes"] is ORIGINALS[0] and config.pluginmanager.plugins == {}


# ---------------------------------------------------------------- through run_pytest.sh

def rows_by_dtype(result):
    return TABLE_DTYPE.findall(result.log_text)


def identity(result):
    return json.loads((result.out_dir / "run_identity.json").read_text())


def test_run_pytest_first_measures_abs_in_float32_and_leaves_relu_alone(zl_run):
    common = dict(ZL_BACKEND="cuda", SHAPE_MODE="upstream", ZL_ENABLE_IR="0", DTYPES="float16")
    refused = zl_run(OP="abs", OP_FILE="abs", **common)        # today's caliber: upstream refuses
    assert refused.returncode == 1 and "can't be supported by this op 'abs'" in refused.log_text
    assert "dtype_fallback" not in identity(refused)
    abs_first = zl_run(OP="abs", OP_FILE="abs", ZL_DTYPE_FALLBACK="first", **common)
    assert abs_first.returncode == 0, abs_first.explain()
    assert MARKER.findall(abs_first.log_text) == [("abs", "float16", "float32")]
    assert rows_by_dtype(abs_first) == ["float32"] and "can't be supported" not in abs_first.log_text
    assert identity(abs_first)["dtype_fallback"] == "first" and identity(abs_first)["dtypes"] == "float16"
    relu_all = zl_run(OP="relu", OP_FILE="relu", **common)
    relu_first = zl_run(OP="relu", OP_FILE="relu", ZL_DTYPE_FALLBACK="first", **common)
    assert relu_all.returncode == relu_first.returncode == 0, relu_first.explain()
    assert rows_by_dtype(relu_first) == rows_by_dtype(relu_all) == ["float16"]
    assert "DTYPE_FALLBACK" not in relu_first.log_text
    # the caliber keeps the policies apart (identity absent under `all`, as runs before it)
    assert "dtype_fallback differs: all=<missing>, first=first" in complaints(
        [("all", relu_all.out_dir), ("first", relu_first.out_dir)])
    assert not [c for c in complaints([("a", abs_first.out_dir), ("b", relu_first.out_dir)])
                if c.startswith("dtype_fallback")]


def test_run_pytest_refuses_a_bad_policy_word(zl_run):
    r = zl_run(OP="abs", OP_FILE="abs", ZL_BACKEND="cuda", DTYPES="float16", ZL_DTYPE_FALLBACK="newest")
    assert r.returncode == 4, r.explain()
    assert "ZL_DTYPE_FALLBACK='newest' (--zl-dtype-fallback) is not one of all, first" in r.log_text + r.stderr


def test_side_b_keeps_the_restriction_unless_side_a_ran_without_it():
    """Side B runs unrestricted only after side A's own fallback or rescue. A node whose name
    holds "dtype_" (addmm_dtype_out) linked from a baseline carries `baseline=<dir>/addmm_dtype_out`
    in its notes: a substring test sent side B unrestricted and the H100 screen read
    BASELINE_MISMATCH ("dtypes: baseline 'float16', side B ''")."""
    from zl.batch.case import measured_first, unrestricted
    linked = "shared_device=16;baseline=/tmp/base/main/addmm_dtype_out"
    assert not unrestricted(linked)
    assert unrestricted("timeout_s=60;dtype_fallback;rc=1->124")
    assert unrestricted("dtype_rescue(first: FAIL);rc=1->1->0")
    assert not unrestricted("dtype_fallback=first:int32;shared_device=16")
    assert measured_first("dtype_fallback=first:int16+int32;shared_device=16") == "int16 int32"
    assert measured_first(linked) == ""
