"""runlog/parse.py against upstream-format run.logs (tests/fixtures/runlogs: make_synthetic.py's
logs, packed as synthetic.tar.xz and written into each test's tmp_path)."""

import importlib.util
import tarfile
from pathlib import Path

import pytest
import torch

from zl.runlog.parse import RunLogError, parse_run_log, read_run_log
from zl.runlog.stats import aa_by_latency, band_label, index_rows, pair_logs

from harness import report_fixtures as rf

FIX = Path(__file__).resolve().parent / "fixtures" / "runlogs"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def synth(tmp_path):
    """name -> the path of make_synthetic.py's log `name`, written under tmp_path."""
    return lambda name: rf.synthetic_log(name, tmp_path / "synthetic" / name)


def _fake_consts():
    spec = importlib.util.spec_from_file_location(
        "zl_fake_consts_t", REPO / "tests/fake_flaggems/benchmark/consts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_two_dtype_tables_gbps_and_na(synth):
    p = read_run_log(synth("softmax_gbps_two_dtypes.log"))
    assert p.tables == 2 and len(p.rows) == 6
    assert [r.dtype for r in p.rows] == ["torch.float16"] * 3 + ["torch.bfloat16"] * 3
    first = p.rows[0]
    assert (first.op, first.mode, first.level) == ("softmax", "kernel", "core")
    assert first.torch_lat == pytest.approx(0.0123) and first.gems_lat == pytest.approx(0.0101)
    assert first.speedup == pytest.approx(1.218)
    assert first.extra == {"torch_gbps": pytest.approx(341.1), "gems_gbps": pytest.approx(415.4)}
    assert first.size_detail == "[torch.Size([1024, 1024])]"
    # upstream drops the GBPS cells of a row whose gbps is None: fewer tokens than the header
    na = p.rows[2]
    assert na.gems_lat is None and na.speedup is None and na.extra == {}
    assert na.size_detail == "[torch.Size([64, 512, 512])]"
    assert p.n_failed == 0 and p.final_line.startswith("1 passed")


def test_tflops_column_and_duplicate_shapes_get_occurrence_index(synth):
    p = read_run_log(synth("mm_tflops_duplicates.log"))
    assert [r.extra["tflops"] for r in p.rows] == pytest.approx([5.69, 857.9, 859.0])
    keys = list(index_rows(p))
    assert [k[3] for k in keys] == [0, 0, 1]
    assert keys[1][:3] == keys[2][:3]


def test_row_tflops_differs_from_header_decision():
    """Upstream decides the TFLOPS header from row 0 but each row prints its own."""
    C = _fake_consts()
    rows = [C.BenchmarkMetrics(shape_detail=[torch.Size([8])], latency_base=1.0, latency=2.0,
                               speedup=0.5, tflops=3.0),
            C.BenchmarkMetrics(shape_detail=[torch.Size([9])], latency_base=1.0, latency=4.0,
                               speedup=0.25, tflops=0.0)]
    text = str(C.BenchmarkResult(op_name="x", dtype="torch.float32", mode="kernel", level="core",
                                 result=rows))
    p = parse_run_log(text)
    assert [r.gems_lat for r in p.rows] == [2.0, 4.0]
    assert p.rows[0].extra == {"tflops": 3.0} and p.rows[1].extra == {}
    assert [r.size_detail for r in p.rows] == ["[torch.Size([8])]", "[torch.Size([9])]"]


def test_failed_shape_is_reported_from_pytest_output_not_rows(synth):
    p = read_run_log(synth("gelu_backward_cudagraph_failed.log"))
    assert p.rows == [] and p.tables == 0
    assert p.n_failed == 1 and p.failed_count == 1
    assert p.failures[0].node == "benchmark/test_pointwise_perf.py::test_gelu_backward"
    assert "previous error during capture" in p.failure_text()
    assert any("previous error during capture" in e for e in p.error_lines)


def test_folded_table_unfolds_to_the_plain_size_detail_and_pairs(synth):
    folded = read_run_log(synth("fused_moe_folded.log"))
    plain = read_run_log(synth("fused_moe_plain.log"))
    assert "[same for all rows]" in synth("fused_moe_folded.log").read_text()
    assert [r.size_detail for r in folded.rows] == [r.size_detail for r in plain.rows]
    rep = pair_logs(plain, folded)
    assert len(rep.paired) == 3 and rep.unpaired == []


def test_ansi_colour_and_marker_counts(synth):
    p = read_run_log(synth("relu_colour_markers.log"))
    assert [r.row_status for r in p.rows] == ["SUCCESS"]
    assert p.rows[0].gems_lat == pytest.approx(0.02)
    # the configure line that merely names the marker is not an event
    assert p.markers == {"no_cudagraph": 1, "capture_poisoned": 0, "replay_fallback": 1}


def test_failed_row_and_upstream_failure_notice():
    text = "\n".join([
        "Operator: abs  Performance Test (dtype=torch.float32, mode=kernel,level=core)",
        "Status       Torch Latency (ms)    Gems Latency (ms)         Gems Speedup          Size Detail",
        "-" * 95,
        "FAILED                     N/A                 N/A                 N/A          [torch.Size([7])]",
        "SUCCESS               0.010000            0.020000               0.500          N/A",
        "",
        "FAILED: Operator=abs dtype={dtype} err=<<<{e}>>>",
    ])
    p = parse_run_log(text)
    assert [r.row_status for r in p.rows] == ["FAILED", "SUCCESS"]
    assert p.rows[0].gems_lat is None and p.rows[1].size_detail == "N/A"
    assert p.n_failed == 1 and p.failures[0].source == "upstream"


def test_truncated_row_is_reported_as_malformed_not_guessed():
    text = "\n".join([
        "Operator: abs  Performance Test (dtype=torch.float32, mode=kernel,level=core)",
        "Status       Torch Latency (ms)    Gems Latency (ms)         Gems Speedup          Size Detail",
        "-" * 95,
        "SUCCESS               0.010000            0.0200",
    ])
    p = parse_run_log(text)
    assert p.rows == [] and len(p.malformed) == 1


@pytest.mark.parametrize("content", ["", "hello world\n", "\x00\x01binary\xff"])
def test_unreadable_logs_raise_named_error(tmp_path, content):
    f = tmp_path / "run.log"
    f.write_bytes(content.encode("utf-8", "surrogateescape") if isinstance(content, str) else content)
    with pytest.raises(RunLogError):
        read_run_log(f)


def test_missing_log_and_run_dir_resolution(tmp_path, synth):
    with pytest.raises(RunLogError):
        read_run_log(tmp_path / "nope.log")
    (tmp_path / "run.log").write_text(synth("mm_tflops_duplicates.log").read_text())
    assert len(read_run_log(tmp_path).rows) == 3


def test_fixtures_match_the_generator(tmp_path):
    """The committed logs are what make_synthetic.py prints today (the fake consts is the
    format), packed deterministically: sorted names, mtime 0, uid/gid 0, mode 0644; packed
    twice, the same bytes."""
    spec = importlib.util.spec_from_file_location("zl_make_synth", FIX / "make_synthetic.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    committed = rf.archive_members(rf.SYNTHETIC_ARCHIVE)
    assert mod.softmax_log() == committed["softmax_gbps_two_dtypes.log"].decode()
    assert mod.mm_log() == committed["mm_tflops_duplicates.log"].decode()
    folded, plain = mod.moe_folded_log()
    assert folded == committed["fused_moe_folded.log"].decode()
    assert {name: text.encode() for name, text in mod.logs().items()} == committed
    with tarfile.open(rf.SYNTHETIC_ARCHIVE, "r:xz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(committed)
    assert {(m.isfile(), m.mtime, m.uid, m.gid, m.mode) for m in members} == {(True, 0, 0, 0, 0o644)}
    rf.pack_members(committed, tmp_path / "a.tar.xz")
    rf.pack_members(dict(reversed(list(committed.items()))), tmp_path / "b.tar.xz")
    assert (tmp_path / "a.tar.xz").read_bytes() == (tmp_path / "b.tar.xz").read_bytes()


LEGEND_TABLE = """Operator: fused_moe  Performance Test (dtype=torch.float16, mode=kernel,level=core)
Status       Torch Latency (ms)    Gems Latency (ms)         Gems Speedup          Size Detail
-----------------------------------------------------------------------------------------------
  [same for all rows] {legend}
SUCCESS               0.010000            0.020000               0.500          [8]
"""


@pytest.mark.parametrize("legend", ['{"n": 2, "fixed": {"1": "x"', '{"n": "two", "fixed": {}}',
                                    '{"n": 2, "fixed": []}', '{"n": 2, "fixed": {"5": "x"}}',
                                    '[1, 2]'])
def test_malformed_legend_line_names_file_and_line(tmp_path, legend):
    log = tmp_path / "run.log"
    log.write_text("collected 1 item\n" + LEGEND_TABLE.replace("{legend}", legend))
    with pytest.raises(RunLogError) as exc:
        read_run_log(log)
    assert str(log) in str(exc.value) and "line 5" in str(exc.value)
    assert "malformed legend line" in str(exc.value)


def test_valid_legend_unfolds():
    text = LEGEND_TABLE.replace("{legend}", '{"n": 2, "fixed": {"1": "torch.float16"}}')
    assert parse_run_log(text).rows[0].size_detail == "[8, torch.float16]"


def test_replay_fallback_events_keep_key_with_spaces():
    p = parse_run_log("AUTOTUNE_REPLAY_FALLBACK op=mm kernel=mm_kernel key=(64, 'torch.float16') "
                      "reason=key_missing\n"
                      "AUTOTUNE_REPLAY_FALLBACK op=mm kernel=* key=* reason=backend_mismatch "
                      "recorded=musa current=cuda\n"
                      "[autotune] markers: AUTOTUNE_REPLAY_FALLBACK per key\n")
    assert p.markers["replay_fallback"] == 2
    assert p.replay_fallbacks == [
        {"op": "mm", "kernel": "mm_kernel", "key": "(64, 'torch.float16')", "reason": "key_missing"},
        {"op": "mm", "kernel": "*", "key": "*", "reason": "backend_mismatch"}]


def test_aa_noise_is_split_by_side_a_latency():
    pairs = [(0.001, 0.04), (0.004, -0.02), (0.005, 0.01), (0.02, -0.03), (0.05, 0.002), (3.0, -0.001)]
    small, mid, large = aa_by_latency(pairs)
    assert [b["shapes"] for b in (small, mid, large)] == [2, 2, 2]      # 5 us and 50 us open a band
    assert abs(small["median_abs"] - 0.03) < 1e-12 and small["positive_share"] == 0.5
    assert abs(mid["median_abs"] - 0.02) < 1e-12 and abs(large["median_abs"] - 0.0015) < 1e-12
    assert [band_label(b) for b in (small, mid, large)] == ["< 5 us", "5-50 us", ">= 50 us"]
    empty = aa_by_latency([], edges_ms=(1.0,))
    assert [(b["shapes"], b["median_abs"], b["positive_share"]) for b in empty] == [(0, None, None)] * 2
    assert band_label(empty[1]) == ">= 1000 us"
