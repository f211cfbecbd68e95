"""batch_summary.py: caliber guard, --ab pairing, --ab-rounds statistics, summary.csv."""

import csv
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

import batch_summary as bs
from zl.runlog.caliber import CALIBER_FIELDS
from zl.runlog.stats import analyse_rounds, load_rounds, min_mwu_p, verdict

REPO = Path(__file__).resolve().parents[1]
FIX = Path(__file__).resolve().parent / "fixtures" / "runlogs"

IDENT = {"backend": "cuda", "device": "0", "timer": "cuda_graph", "bench_level": "core",
         "shape_mode": "inline", "tuner_cache": "isolated", "direct_repeat": 1,
         "shape_source": "softmax=yaml"}
SHAPES = ["[torch.Size([1024])]", "[torch.Size([64, 64])]", "[torch.Size([16, 256])]"]
HEADER = (f"{'Status':<10} {'Torch Latency (ms)':>20} {'Gems Latency (ms)':>20} "
          f"{'Gems Speedup':>20} {'Size Detail':>20}")


def table(op, dtype, rows):
    """rows: (status, gems_lat or None, detail). Upstream's layout (consts.py)."""
    out = [f"Operator: {op}  Performance Test (dtype={dtype}, mode=kernel,level=core)", HEADER, "-" * 95]
    for status, lat, detail in rows:
        lat_s = "N/A" if lat is None else f"{lat:.6f}"
        sp = "N/A" if not lat else f"{0.01 / lat:.3f}"
        out.append(f"{status:<10}{0.01:>20.6f}{lat_s:>20}{sp:>20}" + " " * 10 + detail)
    return "\n".join(out) + "\n"


def make_run(d: Path, tables, mode="replay", extra="", **ident):
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.log").write_text("collected 1 item\n" + extra + "\n".join(tables)
                               + "\n====== 1 passed in 1.00s ======\n")
    (d / "run_identity.json").write_text(json.dumps({**IDENT, "autotune_mode": mode, **ident}))
    return d


class _Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def cli(capsys):
    """batch_summary.main in-process (a subprocess costs ~2 s of imports per call here)."""
    def run(*args):
        capsys.readouterr()
        try:
            rc = bs.main([str(a) for a in args])
        except SystemExit as exc:   # argparse usage errors
            rc = exc.code
        out = capsys.readouterr()
        return _Result(rc, out.out, out.err)
    return run


def cli_subprocess(*args):
    return subprocess.run([sys.executable, str(REPO / "batch_summary.py"), *map(str, args)],
                          capture_output=True, text=True, cwd="/")


# ---------------------------------------------------------------- caliber

@pytest.mark.parametrize("field", CALIBER_FIELDS)
def test_every_caliber_field_alone_refuses(tmp_path, field, cli):
    a = make_run(tmp_path / "a", [table("relu", "torch.float16", [("SUCCESS", 0.01, SHAPES[0])])],
                 mode="record")
    b = make_run(tmp_path / "b", [table("relu", "torch.float16", [("SUCCESS", 0.01, SHAPES[0])])],
                 **{field: "something-else"})
    r = cli("--ab", a, b, "--label", "relu")
    assert r.returncode == 4, r.stdout + r.stderr
    assert f"!!! [caliber] relu: {field} differs" in r.stdout
    assert "paired rows" not in r.stdout          # no report at all
    r2 = cli("--ab", a, b, "--allow-caliber-mismatch")
    assert r2.returncode == 0 and f"{field} differs" in r2.stdout and "1 paired rows" in r2.stdout


def test_missing_identity_and_record_vs_record_refuse(tmp_path, cli):
    rows = [table("relu", "torch.float16", [("SUCCESS", 0.01, SHAPES[0])])]
    a = make_run(tmp_path / "a", rows, mode="record")
    b = make_run(tmp_path / "b", rows, mode="record")
    r = cli("--ab", a, b)
    assert r.returncode == 4 and "every run recorded its own autotune configs" in r.stdout
    (b / "run_identity.json").unlink()
    r = cli("--ab", a / "run.log", b / "run.log")
    assert r.returncode == 4 and "no readable run_identity.json for after" in r.stdout


def test_shared_tuner_cache_record_is_a_warning_not_a_refusal(tmp_path, cli):
    rows = [table("relu", "torch.float16", [("SUCCESS", 0.01, SHAPES[0])])]
    a = make_run(tmp_path / "a", rows, mode="record", tuner_cache="shared(/h/.flaggems)")
    b = make_run(tmp_path / "b", rows, mode="replay", tuner_cache="shared(/h/.flaggems)")
    r = cli("--ab", a, b)
    assert r.returncode == 0
    assert "warning [caliber]" in r.stdout and "shared tuner cache" in r.stdout


def test_caliber_tsv_row_and_header(tmp_path, cli):
    a = make_run(tmp_path / "a", [], mode="record")
    assert cli("--caliber-header").stdout.strip().split("\t") == list(CALIBER_FIELDS)
    assert cli("--caliber", a).stdout.rstrip("\n").split("\t") == [str(IDENT[k]) for k in CALIBER_FIELDS]
    assert cli("--caliber", tmp_path / "nope").returncode == 2


# ---------------------------------------------------------------- --ab

def test_ab_pairs_duplicates_lists_unpaired_failures_and_markers(tmp_path, cli):
    before = make_run(tmp_path / "before", [
        table("mm", "torch.float16", [("SUCCESS", 0.010, SHAPES[0]), ("SUCCESS", 0.020, SHAPES[1]),
                                      ("SUCCESS", 0.022, SHAPES[1]), ("SUCCESS", 0.030, SHAPES[2])]),
        table("mm", "torch.bfloat16", [("SUCCESS", 0.040, SHAPES[0])])], mode="record",
        extra="BENCHMARK_DIRECT_NO_CUDAGRAPH op=mm phase=capture reason=x detail='y'\n")
    after = make_run(tmp_path / "after", [
        table("mm", "torch.float16", [("SUCCESS", 0.008, SHAPES[0]), ("FAILED", None, SHAPES[1]),
                                      ("SUCCESS", 0.011, SHAPES[1]), ("SUCCESS", 0.0, SHAPES[2])])],
        extra="AUTOTUNE_REPLAY_FALLBACK op=mm kernel=k key=1 reason=key_missing\n")
    out_json = tmp_path / "ab.json"
    r = cli("--ab", before, after, "--label", "mm", "--json", out_json)
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(out_json.read_text())
    paired = {(p["size_detail"], p["occurrence"]): p["speedup_pct"] for p in data["paired"]}
    # occurrence 1 of the duplicate pairs with occurrence 1, not with the FAILED occurrence 0
    assert paired == {(SHAPES[0], 0): pytest.approx(25.0), (SHAPES[1], 1): pytest.approx(100.0)}
    reasons = {(u["dtype"], u["size_detail"], u["occurrence"]): u["reason"] for u in data["unpaired"]}
    assert reasons[("torch.float16", SHAPES[1], 0)] == "after FAILED"
    assert reasons[("torch.float16", SHAPES[2], 0)].startswith("after latency 0")
    assert reasons[("torch.bfloat16", SHAPES[0], 0)] == "only in before"
    assert "[ab] mm: 2 paired rows, range +25.00% ~ +100.00%, median +62.50%" in r.stdout
    assert "INCOMPLETE: 3 unpaired row(s)" in r.stdout
    assert "BENCHMARK_DIRECT_NO_CUDAGRAPH before=1 after=0" in r.stdout
    assert "AUTOTUNE_REPLAY_FALLBACK before=0 after=1" in r.stdout
    assert data["summary"]["complete"] is False


def test_ab_reports_pytest_failures_of_a_side_without_rows(tmp_path, cli):
    before = make_run(tmp_path / "b", [table("gelu_backward", "torch.float16",
                                             [("SUCCESS", 0.01, SHAPES[0])])], mode="record")
    after = tmp_path / "a"
    after.mkdir()
    (after / "run.log").write_text((FIX / "gelu_backward_cudagraph_failed.log").read_text())
    (after / "run_identity.json").write_text(json.dumps({**IDENT, "autotune_mode": "replay"}))
    r = cli("--ab", before, after, "--label", "gelu_backward")
    assert r.returncode == 0
    assert "FAILED after: 1 failed test(s)" in r.stdout and "previous error during capture" in r.stdout
    assert "0 paired rows" in r.stdout and "NO PAIRED ROWS" in r.stdout


@pytest.mark.parametrize("args", [["--ab", "/nonexistent/a", "/nonexistent/b"], [],
                                  ["--ab-rounds", "/nonexistent"], ["--bogus"]])
def test_usage_and_missing_input_exit_2_without_traceback(args, cli):
    r = cli(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_garbage_log_exit_2(tmp_path, cli):
    a = make_run(tmp_path / "a", [], mode="record")
    b = make_run(tmp_path / "b", [])
    (b / "run.log").write_text("nothing to see\n")
    r = cli("--ab", a, b)
    assert r.returncode == 2 and "not a benchmark run.log" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------- --ab-rounds

def make_rounds(root: Path, n: int, effect: float, noise: float, seed: int):
    rng = random.Random(seed)
    for k in range(1, n + 1):
        for side in "AB":
            rows = []
            for i, shape in enumerate(SHAPES):
                base = 0.01 * (i + 1) * (1 - (effect if side == "B" else 0.0))
                rows.append(("SUCCESS", base * (1 + rng.gauss(0, noise)), shape))
            make_run(root / f"r{k}_{side}", [table("relu", "torch.float16", rows)],
                     mode="record" if (k, side) == (1, "A") else "replay")


def test_planted_3pct_over_6_rounds_with_half_pct_noise_is_detected(tmp_path):
    make_rounds(tmp_path, 6, 0.03, 0.005, seed=1)
    res = analyse_rounds(load_rounds(tmp_path))
    assert [s["verdict"] for s in res["shapes"]] == ["faster"] * 3
    lo, hi = res["geomean_ci95_pct"]
    assert lo > 0 and lo < res["geomean_speedup_pct"] < hi
    assert res["geomean_speedup_pct"] == pytest.approx(100 * (1 / 0.97 - 1), abs=1.0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_identical_distributions_are_not_called_different(tmp_path, seed):
    make_rounds(tmp_path, 6, 0.0, 0.005, seed=seed)
    res = analyse_rounds(load_rounds(tmp_path))
    assert {s["verdict"] for s in res["shapes"]} == {"no detectable difference"}
    lo, hi = res["geomean_ci95_pct"]
    assert lo < 0 < hi


def test_three_rounds_are_underpowered_four_are_not(tmp_path, cli):
    assert min_mwu_p(3, 3) == pytest.approx(0.1) and min_mwu_p(4, 4) == pytest.approx(2 / 70)
    assert verdict([1.0, 1.01, 1.02], [0.5, 0.51, 0.52], noise_pct=1.0)[0] == "underpowered"
    assert verdict([1.0, 1.01, 1.02, 1.0], [0.5, 0.51, 0.52, 0.5], noise_pct=2.0)[0] == "faster"
    assert verdict([0.5, 0.51, 0.52, 0.5], [1.0, 1.01, 1.02, 1.0], noise_pct=2.0)[0] == "slower"
    # significant but smaller than the side noise: not a verdict
    assert verdict([1.0, 1.01, 1.02, 1.0], [0.99, 1.0, 1.01, 0.99], noise_pct=2.0)[0] == \
        "no detectable difference"
    assert verdict([1.0, 1.0], [0.5, 0.5], noise_pct=0.0)[0] == "n/a"
    make_rounds(tmp_path, 3, 0.05, 0.001, seed=4)
    r = cli("--ab-rounds", tmp_path, "--label", "relu")
    assert r.returncode == 0
    assert "underpowered" in r.stdout and "per-shape verdicts need >= 4 rounds" in r.stdout


def test_ab_rounds_cli_report_json_and_incomplete_round(tmp_path, cli):
    make_rounds(tmp_path, 4, 0.05, 0.002, seed=5)
    make_run(tmp_path / "r5_A", [table("relu", "torch.float16", [("SUCCESS", 0.01, SHAPES[0])])])
    out = tmp_path / "rounds.json"
    r = cli("--ab-rounds", tmp_path, "--label", "relu", "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "!!! [ab-rounds] relu: round 5: no run.log for side B (excluded)" in r.stdout
    assert "[ab-rounds] relu: 4 rounds x 3 shapes" in r.stdout and "95% bootstrap CI" in r.stdout
    data = json.loads(out.read_text())
    assert data["rounds"] == 4 and len(data["shapes"]) == 3
    assert len(data["per_round_median_pct"]) == 4
    assert all(s["verdict"] == "faster" for s in data["shapes"])
    assert all(len(s["deltas"]) == 4 and s["sign_stable"] for s in data["shapes"])


def test_ab_rounds_sign_unstable_and_shape_missing_in_one_round(tmp_path, cli):
    lat = {1: (0.010, 0.009), 2: (0.010, 0.011), 3: (0.010, 0.0099)}
    for k, (a, b) in lat.items():
        extra_a = [("SUCCESS", 0.05, SHAPES[1])] if k != 2 else []
        make_run(tmp_path / f"r{k}_A", [table("relu", "torch.float16", [("SUCCESS", a, SHAPES[0])] + extra_a)],
                 mode="record" if k == 1 else "replay")
        make_run(tmp_path / f"r{k}_B", [table("relu", "torch.float16",
                                              [("SUCCESS", b, SHAPES[0]), ("SUCCESS", 0.05, SHAPES[1])])])
    r = cli("--ab-rounds", tmp_path, "--label", "relu")
    assert "SIGN-UNSTABLE" in r.stdout
    assert "1/1 shape(s) changed the sign" in r.stdout
    assert "UNPAIRED relu torch.float16 [torch.Size([64, 64])]: r2_A missing" in r.stdout
    assert "INCOMPLETE" in r.stdout


def test_ab_rounds_caliber_refusal(tmp_path, cli):
    make_rounds(tmp_path, 2, 0.0, 0.001, seed=6)
    ident = json.loads((tmp_path / "r2_B" / "run_identity.json").read_text())
    ident["timer"] = "direct"
    (tmp_path / "r2_B" / "run_identity.json").write_text(json.dumps(ident))
    r = cli("--ab-rounds", tmp_path, "--label", "relu")
    assert r.returncode == 4 and "timer differs" in r.stdout and "per shape" not in r.stdout


# ---------------------------------------------------------------- summary.csv

def test_batch_summary_csv_with_ops_status(tmp_path, cli):
    batch = tmp_path / "batch"
    make_run(batch / "main" / "softmax", [], mode="record")
    (batch / "main" / "softmax" / "run.log").write_text((FIX / "softmax_gbps_two_dtypes.log").read_text())
    fail = batch / "main" / "gelu_backward"
    fail.mkdir(parents=True)
    (fail / "run.log").write_text((FIX / "gelu_backward_cudagraph_failed.log").read_text())
    with open(batch / "ops_status.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["repo", "op", "op_file", "run_name", "backend", "device",
                                           "gpu", "timer", "status", "notes"])
        w.writeheader()
        w.writerow({"repo": "main", "op": "softmax", "run_name": "softmax", "status": "PASS",
                    "notes": "no_cudagraph_rows=0"})
        w.writerow({"repo": "main", "op": "gelu_backward", "run_name": "gelu_backward",
                    "backend": "cuda", "device": "3", "timer": "cuda_graph", "status": "FAIL"})
    r = cli(batch)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(batch / "summary.csv")))
    assert list(rows[0]) == bs.SUMMARY_FIELDS
    sm = [x for x in rows if x["op"] == "softmax"]
    assert len(sm) == 6 and sm[0]["backend"] == "cuda" and sm[0]["timer"] == "cuda_graph"
    assert sm[0]["op_status"] == "PASS" and sm[0]["notes"] == "no_cudagraph_rows=0"
    assert [x["case_id"] for x in sm[:3]] == ["case_000", "case_001", "case_002"]
    assert sm[2]["gems_lat"] == "N/A"
    gb = [x for x in rows if x["op"] == "gelu_backward"]
    assert len(gb) == 1 and gb[0]["device"] == "3" and "previous error" in gb[0]["failures"]
    assert cli(tmp_path / "empty_batch").returncode == 2


def test_cell_stats_counts_failed_tests_and_markers(tmp_path, cli):
    d = tmp_path / "cell"
    d.mkdir()
    (d / "run.log").write_text((FIX / "relu_colour_markers.log").read_text())
    assert cli("--cell-stats", d).stdout.split() == ["1", "0", "1", "1", "0"]
    (d / "run.log").write_text((FIX / "gelu_backward_cudagraph_failed.log").read_text())
    assert cli("--cell-stats", d).stdout.split() == ["0", "1", "0", "0", "0"]


def test_real_cli_exit_codes_without_traceback(tmp_path):
    """The script as the drivers call it: exit 2 / 4 reach the shell, no traceback."""
    rows = [table("relu", "torch.float16", [("SUCCESS", 0.01, SHAPES[0])])]
    a = make_run(tmp_path / "a", rows, mode="record")
    b = make_run(tmp_path / "b", rows, mode="replay", timer="direct")
    r = cli_subprocess("--ab", a, b)
    assert r.returncode == 4 and "!!! [caliber]" in r.stdout and "Traceback" not in r.stderr
    r = cli_subprocess("--ab", tmp_path / "missing", b)
    assert r.returncode == 2 and "no run.log" in r.stderr and "Traceback" not in r.stderr
