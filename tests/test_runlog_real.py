"""The run.log parser on logs captured from real FlagGems on an H200 (tests/fixtures/runlogs/h200,
traceback source trimmed): upstream tables with TFLOPS, upstream's cudagraph failure that prints
no row, and zl_bench's folded tables."""

from pathlib import Path

from zl.runlog.parse import read_run_log

H200 = Path(__file__).parent / "fixtures" / "runlogs" / "h200"


def test_upstream_mm_with_tflops_column():
    log = read_run_log(H200 / "upstream_mm_kernel.log")
    assert len(log.rows) == 5 and all(r.row_status == "SUCCESS" for r in log.rows)
    assert {r.dtype for r in log.rows} == {"torch.float16"}
    assert all(r.extra.get("tflops") for r in log.rows)
    assert all(r.gems_lat and r.gems_lat > 0 for r in log.rows)
    assert log.n_failed == 0


def test_upstream_cudagraph_failure_shows_as_failure_not_rows():
    log = read_run_log(H200 / "upstream_gelu_backward_cudagraph.log")
    assert log.rows == []
    assert log.n_failed == 1
    assert "CUDA error" in log.failure_text()
    assert any("capturing blocking stream" in e for e in log.error_lines)


def test_folded_zl_tables_unfold_to_upstream_text():
    log = read_run_log(H200 / "zl_softmax_folded.log")
    assert len(log.rows) == 9
    assert {r.dtype for r in log.rows} == {"torch.float16", "torch.float32", "torch.bfloat16"}
    # the legend's constant `1` (dim) is put back: upstream's exact Size Detail
    assert "[torch.Size([4096, 4096]), 1]" in {r.size_detail for r in log.rows}


def test_upstream_node_run_through_zl_bench():
    log = read_run_log(H200 / "zl_layer_norm_node.log")
    assert len(log.success_rows()) == 5 and log.n_failed == 0
