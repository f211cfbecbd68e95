"""batch_summary.py: caliber guard, --ab pairing, --ab-rounds statistics, summary.csv."""

import csv
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

import batch_summary as bs
from harness.identity_links import link_fields
from harness.report_fixtures import synthetic_log
from zl.runlog import caliber
from zl.runlog.stats import analyse_rounds, load_rounds, min_mwu_p, verdict

REPO = Path(__file__).resolve().parents[1]

IDENT = {"backend": "cuda", "device": "0", "timer": "cuda_graph", "bench_level": "core",
         "shape_mode": "inline", "tuner_cache": "isolated", "direct_repeat": 1,
         "use_flagtune": 0, "seed": 0, "shape_source": "softmax=yaml",
         "graph_warmup_ms": "25", "l2": "warm"}
# The caliber, pinned here and not read from zl.runlog.caliber: a field dropped from the
# implementation must fail a test, not delete the test that checked it.
CALIBER_EXPECTED = ("backend", "device", "device_name", "device_arch", "timer", "bench_level",
                    "shape_mode", "tuner_cache", "direct_repeat", "use_flagtune", "seed",
                    "shape_source", "graph_warmup_ms", "l2", "cold_clock", "device_share",
                    "device_overlap", "overlap_protocol", "time_torch", "dtype_fallback",
                    "ir_collection", "mm_cluster_fix")
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
    (d / "run_identity.json").write_text(json.dumps({**IDENT, "autotune_mode": mode,
                                                     **link_fields(mode), **ident}))
    return d


ONE_ROW = [table("relu", "torch.float16", [("SUCCESS", 0.01, SHAPES[0])])]
ONE_ROW_B = [table("relu", "torch.float16", [("SUCCESS", 0.009, SHAPES[0])])]


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

def test_the_caliber_is_the_pinned_list():
    assert caliber.CALIBER_FIELDS == CALIBER_EXPECTED


@pytest.mark.parametrize("field", CALIBER_EXPECTED)
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
    a = make_run(tmp_path / "a", [table("relu", "torch.float16", [("SUCCESS", 0.01, SHAPES[0])])],
                 mode="record")
    b = make_run(tmp_path / "b", [table("relu", "torch.float16", [("SUCCESS", 0.02, SHAPES[0])])],
                 mode="record")
    r = cli("--ab", a, b)
    assert r.returncode == 4 and "no run replayed recorded autotune configs" in r.stdout
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
    assert cli("--caliber-header").stdout.strip().split("\t") == list(CALIBER_EXPECTED)
    # a solo run has no device_share: its cell is empty (present only when the device was shared)
    assert cli("--caliber", a).stdout.rstrip("\n").split("\t") == [str(IDENT.get(k, "")) for k in CALIBER_EXPECTED]
    assert "device_share" not in IDENT
    assert cli("--caliber", tmp_path / "nope").returncode == 2


@pytest.mark.parametrize("modes", [("record", None), (None, None), ("record", "record")])
def test_no_replaying_side_refuses(tmp_path, cli, modes):
    a = make_run(tmp_path / "a", ONE_ROW, mode=modes[0])
    b = make_run(tmp_path / "b", ONE_ROW_B, mode=modes[1])
    if modes[0] is None:
        for d in (a, b):
            ident = json.loads((d / "run_identity.json").read_text())
            del ident["autotune_mode"]
            (d / "run_identity.json").write_text(json.dumps(ident))
    r = cli("--ab", a, b)
    assert r.returncode == 4 and "no run replayed recorded autotune configs" in r.stdout


@pytest.mark.parametrize("reason", ["unreadable_record", "backend_mismatch"])
def test_replay_that_could_not_use_its_record_refuses(tmp_path, cli, reason):
    a = make_run(tmp_path / "a", ONE_ROW, mode="record")
    b = make_run(tmp_path / "b", ONE_ROW_B, mode="replay_fallback",
                 extra=f"AUTOTUNE_REPLAY_FALLBACK op=relu kernel=* key=* reason={reason}\n")
    r = cli("--ab", a, b, "--label", "relu")
    assert r.returncode == 4, r.stdout
    assert "!!! [caliber] relu: after could not use the recorded autotune configs" in r.stdout
    assert "paired rows" not in r.stdout
    r = cli("--ab", a, b, "--label", "relu", "--allow-caliber-mismatch")
    assert r.returncode == 0 and "warning [caliber] relu: after could not use" in r.stdout
    assert f"REPLAY_FALLBACK after: kernel=* key=* reason={reason}" in r.stdout


def test_partial_replay_fallback_is_listed_per_key_not_refused(tmp_path, cli):
    a = make_run(tmp_path / "a", ONE_ROW, mode="record")
    b = make_run(tmp_path / "b", ONE_ROW_B, mode="replay", replay_fallback_keys=1,
                 extra="AUTOTUNE_REPLAY_FALLBACK op=relu kernel=relu_k key=(1024, 'fp16') "
                       "reason=key_missing\n")
    out = tmp_path / "ab.json"
    r = cli("--ab", a, b, "--label", "relu", "--json", out)
    assert r.returncode == 0, r.stdout
    assert "REPLAY_FALLBACK after: kernel=relu_k key=(1024, 'fp16') reason=key_missing" in r.stdout
    assert "[ab] relu: after: identity replay_fallback_keys=1" in r.stdout
    fb = json.loads(out.read_text())["replay_fallbacks"]
    assert fb["after"]["events"] == [{"op": "relu", "kernel": "relu_k", "key": "(1024, 'fp16')",
                                      "reason": "key_missing"}]
    assert fb["before"]["events"] == []


@pytest.mark.parametrize("scope,code", [("keys", 0), ("all", 4)])
def test_plugin_written_replay_fallback_refused_only_for_the_whole_run(tmp_path, cli, scope, code):
    """The autotune plugin writes autotune_mode=replay_fallback for both a partial and a
    whole-run fallback; replay_fallback_scope tells them apart, and only `all` is refused."""
    a = make_run(tmp_path / "a", ONE_ROW, mode="record")
    b = make_run(tmp_path / "b", ONE_ROW_B, mode="replay_fallback", replay_fallback_scope=scope,
                 replay_fallback_keys=1)
    r = cli("--ab", a, b, "--label", "relu")
    assert r.returncode == code, r.stdout
    assert ("could not use the recorded autotune configs" in r.stdout) == (scope == "all")


@pytest.mark.parametrize("field,a_val,b_val", [("use_flagtune", 0, 1), ("seed", 0, 7),
                                               ("use_flagtune", None, 0), ("seed", 3, None)])
def test_use_flagtune_and_seed_are_caliber_fields(tmp_path, cli, field, a_val, b_val):
    """Different values, or present on one side only: refused."""
    a = make_run(tmp_path / "a", ONE_ROW, mode="record", **{field: a_val})
    b = make_run(tmp_path / "b", ONE_ROW_B, **{field: b_val})
    for d, v in ((a, a_val), (b, b_val)):
        if v is None:
            ident = json.loads((d / "run_identity.json").read_text())
            del ident[field]
            (d / "run_identity.json").write_text(json.dumps(ident))
    r = cli("--ab", a, b, "--label", "relu")
    assert r.returncode == 4 and f"!!! [caliber] relu: {field} differs" in r.stdout
    if None in (a_val, b_val):
        assert "<missing>" in r.stdout


def test_fields_missing_on_both_sides_and_switch_spellings_match(tmp_path, cli):
    a = make_run(tmp_path / "a", ONE_ROW, mode="record", use_flagtune=" 1")
    b = make_run(tmp_path / "b", ONE_ROW_B, use_flagtune="on")
    for d in (a, b):
        ident = json.loads((d / "run_identity.json").read_text())
        del ident["seed"]
        (d / "run_identity.json").write_text(json.dumps(ident))
    r = cli("--ab", a, b)
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("how", ["same_dir", "dir_and_log", "copy"])
def test_a_run_compared_with_itself_is_refused(tmp_path, cli, how):
    a = make_run(tmp_path / "a", ONE_ROW, mode="record")
    other = {"same_dir": a, "dir_and_log": a / "run.log"}.get(how)
    if other is None:
        import shutil
        other = tmp_path / "copy"
        shutil.copytree(a, other)
    r = cli("--ab", a, other)
    assert r.returncode == 2 and "are the same run" in r.stderr
    assert "+0.00%" not in r.stdout and "Traceback" not in r.stderr


def test_malformed_legend_exit_2_names_file_and_line(tmp_path, cli):
    a = make_run(tmp_path / "a", ONE_ROW, mode="record")
    b = make_run(tmp_path / "b", ONE_ROW_B)
    lines = (b / "run.log").read_text().splitlines()
    rule = next(i for i, ln in enumerate(lines) if ln.startswith("-----"))
    lines.insert(rule + 1, '  [same for all rows] {"n": 2, "fixed": {"1": ')
    (b / "run.log").write_text("\n".join(lines) + "\n")
    r = cli("--ab", a, b)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{b / 'run.log'}: line {rule + 2}: malformed legend line" in r.stderr


@pytest.mark.parametrize("mode", ["ab", "rounds", "caliber"])
def test_unwritable_json_fails_before_the_report(tmp_path, cli, mode):
    a = make_run(tmp_path / "a", ONE_ROW, mode="record")
    b = make_run(tmp_path / "b", ONE_ROW_B)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    args = {"ab": ["--ab", a, b], "rounds": ["--ab-rounds", tmp_path],
            "caliber": ["--caliber", a]}[mode]
    for target in (blocker / "out.json", tmp_path):       # under a file; a directory
        r = cli(*args, "--json", target)
        assert r.returncode == 2 and "--json" in r.stderr, r.stdout + r.stderr
        assert r.stdout == "" and "Traceback" not in r.stderr


def test_json_for_every_mode(tmp_path, cli):
    a = make_run(tmp_path / "a", ONE_ROW, mode="record")
    out = tmp_path / "o.json"
    assert cli("--caliber", a, "--json", out).returncode == 0
    data = json.loads(out.read_text())
    assert data["mode"] == "caliber" and data["caliber"]["timer"] == "cuda_graph"
    assert cli("--caliber-header", "--json", out).returncode == 0
    assert json.loads(out.read_text())["fields"] == list(CALIBER_EXPECTED)
    assert cli("--cell-stats", a, "--json", out).returncode == 0
    assert json.loads(out.read_text())["success"] == 1


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
    synthetic_log("gelu_backward_cudagraph_failed.log", after / "run.log")
    (after / "run_identity.json").write_text(json.dumps({**IDENT, "autotune_mode": "replay",
                                                         **link_fields("replay")}))
    r = cli("--ab", before, after, "--label", "gelu_backward")
    assert r.returncode == 5       # diagnostics printed, but no report: never exit 0
    assert "!!! [no report] gelu_backward: no row succeeded on both sides" in r.stdout
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
    synthetic_log("softmax_gbps_two_dtypes.log", batch / "main" / "softmax" / "run.log")
    fail = batch / "main" / "gelu_backward"
    fail.mkdir(parents=True)
    synthetic_log("gelu_backward_cudagraph_failed.log", fail / "run.log")
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
    synthetic_log("relu_colour_markers.log", d / "run.log")
    assert cli("--cell-stats", d).stdout.split() == ["1", "0", "1", "1", "0"]
    synthetic_log("gelu_backward_cudagraph_failed.log", d / "run.log")
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


# ---------------------------------------------------------------- campaigns / no report

def _set_campaign(root: Path, cells, cid):
    for name in cells:
        path = root / name / "run_identity.json"
        ident = json.loads(path.read_text())
        if cid is None:
            ident.pop("campaign_id", None)
        else:
            ident["campaign_id"] = cid
        path.write_text(json.dumps(ident))


def test_ab_rounds_counts_only_the_newest_campaign_and_says_so(tmp_path, cli):
    """A second campaign (2 rounds) in the root of an older one (3 rounds, +10 %)."""
    import os
    make_rounds(tmp_path, 3, 0.10, 0.001, seed=7)
    old = [f"r{k}_{s}" for k in (1, 2, 3) for s in "AB"]
    _set_campaign(tmp_path, old, "old-campaign")
    for name in old:                       # the old campaign finished an hour ago
        os.utime(tmp_path / name / "run.log", (1e9, 1e9))
    make_rounds(tmp_path, 2, 0.0, 0.001, seed=8)      # overwrites r1, r2
    _set_campaign(tmp_path, [f"r{k}_{s}" for k in (1, 2) for s in "AB"], "new-campaign")
    out = tmp_path / "o.json"
    r = cli("--ab-rounds", tmp_path, "--label", "relu", "--json", out)
    assert r.returncode == 0, r.stdout
    assert "campaign new-campaign; cells used: r1_A r1_B r2_A r2_B" in r.stdout
    assert "IGNORED cells of campaign old-campaign: r3_A r3_B" in r.stdout
    assert "2 rounds x 3 shapes" in r.stdout
    data = json.loads(out.read_text())
    assert data["campaign_id"] == "new-campaign" and data["cells_ignored"] == {
        "r3_A": "old-campaign", "r3_B": "old-campaign"}
    # the old campaign on request: its one remaining round is not a report
    r = cli("--ab-rounds", tmp_path, "--campaign", "old-campaign")
    assert r.returncode == 5 and "need at least 2 complete rounds" in r.stdout
    assert cli("--ab-rounds", tmp_path, "--campaign", "nope").returncode == 2


def test_ab_rounds_refuses_cells_without_id_next_to_a_campaign(tmp_path, cli):
    make_rounds(tmp_path, 3, 0.0, 0.001, seed=9)
    _set_campaign(tmp_path, ["r1_A", "r1_B", "r2_A", "r2_B"], "c1")
    r = cli("--ab-rounds", tmp_path, "--label", "relu")
    assert r.returncode == 4
    assert "!!! [caliber] relu: cells r3_A r3_B have no campaign_id" in r.stdout
    assert "per shape" not in r.stdout


def test_ab_rounds_without_any_campaign_id_uses_all_and_says_so(tmp_path, cli):
    make_rounds(tmp_path, 2, 0.0, 0.001, seed=10)
    r = cli("--ab-rounds", tmp_path, "--label", "relu")
    assert r.returncode == 0 and "no campaign_id in any cell" in r.stdout


def test_ab_rounds_one_round_or_no_shape_is_no_report(tmp_path, cli):
    make_rounds(tmp_path / "one", 1, 0.0, 0.001, seed=11)
    out = tmp_path / "one.json"
    r = cli("--ab-rounds", tmp_path / "one", "--label", "relu", "--json", out)
    assert r.returncode == 5 and "need at least 2 complete rounds" in r.stdout
    assert json.loads(out.read_text())["status"] == "too_few_rounds"
    root = tmp_path / "none"
    for k in (1, 2):
        make_run(root / f"r{k}_A", [table("relu", "torch.float16", [("SUCCESS", 0.01, SHAPES[k - 1])])],
                 mode="record" if k == 1 else "replay")
        make_run(root / f"r{k}_B", [table("relu", "torch.float16", [("FAILED", None, SHAPES[k - 1])])])
    r = cli("--ab-rounds", root, "--label", "relu")
    assert r.returncode == 5 and "no shape succeeded in every round" in r.stdout
    assert "geomean" not in r.stdout


def test_ab_rounds_replay_fallback_cell_refuses(tmp_path, cli):
    make_rounds(tmp_path, 2, 0.0, 0.001, seed=12)
    ident = json.loads((tmp_path / "r2_B" / "run_identity.json").read_text())
    (tmp_path / "r2_B" / "run_identity.json").write_text(
        json.dumps({**ident, "autotune_mode": "replay_fallback"}))
    r = cli("--ab-rounds", tmp_path, "--label", "relu")
    assert r.returncode == 4 and "r2_B could not use the recorded autotune configs" in r.stdout


def test_ab_rounds_without_scipy_exit_2_with_install_command(tmp_path, cli, monkeypatch):
    make_rounds(tmp_path, 2, 0.0, 0.001, seed=13)
    monkeypatch.setitem(sys.modules, "scipy", None)       # `import scipy...` -> ImportError
    monkeypatch.setitem(sys.modules, "scipy.stats", None)
    r = cli("--ab-rounds", tmp_path, "--label", "relu")
    assert r.returncode == 2 and "pip install scipy" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("script", ["batch_summary.py", "telemetry.py"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_usage_and_starts_nothing(tmp_path, script, flag):
    """Also with a mode's arguments before it: nothing is read, written or sampled."""
    import os
    marker = tmp_path / "sampler_ran"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (fake / "nvidia-smi").chmod(0o755)
    args = {"batch_summary.py": ["--ab-rounds", str(tmp_path / "root"), "--json",
                                 str(tmp_path / "o.json")],
            "telemetry.py": [str(tmp_path / "t.tsv"), "--interval", "0.01"]}[script]
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    r = subprocess.run([sys.executable, str(REPO / script), *args, flag], capture_output=True,
                       text=True, cwd=str(tmp_path), env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("usage:"), r.stdout + r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


def test_refused_or_failed_report_replaces_an_earlier_json(tmp_path, cli):
    """ab_repeat.sh reruns into the same ab_rounds.json: an old valid report must not remain."""
    a = make_run(tmp_path / "a", ONE_ROW, mode="record")
    b = make_run(tmp_path / "b", ONE_ROW_B)
    out = tmp_path / "ab.json"
    assert cli("--ab", a, b, "--json", out).returncode == 0
    assert json.loads(out.read_text())["status"] == "ok"
    ident = json.loads((b / "run_identity.json").read_text())
    (b / "run_identity.json").write_text(json.dumps({**ident, "timer": "direct"}))
    assert cli("--ab", a, b, "--json", out).returncode == 4
    data = json.loads(out.read_text())
    assert data["status"] == "refused" and data["exit_code"] == 4
    assert any("timer differs" in p for p in data["caliber_problems"])
    (b / "run.log").write_text("garbage\n")
    assert cli("--ab", a, b, "--json", out, "--allow-caliber-mismatch").returncode == 2
    assert json.loads(out.read_text())["status"] == "error"


# ---------------------------------------------------------------- code verdict, completion, finite JSON

def _strict_json(path: Path):
    """json.loads that fails on Infinity/NaN (not JSON; other readers reject them)."""
    def bad(token):
        raise AssertionError(f"{path} holds {token}: not standard JSON")
    return json.loads(path.read_text(), parse_constant=bad)


def _code_pair(tmp_path: Path, a_levels, b_levels):
    from harness import report_fixtures as rf
    a = rf.write_fingerprints(make_run(tmp_path / "a", ONE_ROW, mode="record"), a_levels)
    b = rf.write_fingerprints(make_run(tmp_path / "b", ONE_ROW_B), b_levels)
    return a, b


def test_ab_identical_ttgir_different_llir_is_the_screens_verdict_not_an_aa(tmp_path, cli):
    """The report's IR word was a TTGIR-only compare: identical TTGIR read as 'an A/A, its
    range is the noise' while the screen said IR_CHANGED@llir for the same pair."""
    from harness import report_fixtures as rf
    from zl import screen_verdict
    a, b = _code_pair(tmp_path, rf.SAME_CODE, {**rf.SAME_CODE, "llir": "ee" * 32})
    out = tmp_path / "ab.json"
    r = cli("--ab", a, b, "--json", out, "--label", "relu")
    assert r.returncode == 0, r.stdout + r.stderr
    d = _strict_json(out)
    assert d["code"]["verdict"] == "IR_CHANGED@llir" == screen_verdict.judge(1, 1, "0", "0", a, b)["verdict"]
    assert d["code"]["identical_everywhere"] is False and d["noise_band_pct"] is None
    assert "[ab] relu: IR: IR_CHANGED@llir (levels compared: ttgir,llir)" in r.stdout
    assert "its range is the noise" not in r.stdout + out.read_text()


@pytest.mark.parametrize("b_levels, verdict, aa, why", [
    ({}, "NO_IR_DIFF", True, "every recorded level identical on both sides (ttgir,llir,ptx,binary)"),
    ({"ptx": "ee" * 32}, "IR_CHANGED@ptx", False, "the code differs (IR_CHANGED@ptx)"),
    ({"binary": "ee" * 32}, "BINARY_CHANGED", False, "the code differs (BINARY_CHANGED)"),
    ({"binary": None}, "NO_IR_DIFF", False, "binary on side A only: not compared"),
])
def test_ab_is_an_aa_only_when_every_recorded_level_binary_included_is_identical(
        tmp_path, cli, b_levels, verdict, aa, why):
    from harness import report_fixtures as rf
    b_code = {k: v for k, v in {**rf.SAME_CODE, **b_levels}.items() if v is not None}
    a, b = _code_pair(tmp_path, rf.SAME_CODE, b_code)
    out = tmp_path / "ab.json"
    r = cli("--ab", a, b, "--json", out)
    d = _strict_json(out)
    assert (d["code"]["verdict"], d["code"]["identical_everywhere"]) == (verdict, aa)
    assert why in d["code"]["reason"] and why in r.stdout
    if aa:
        assert d["noise_band_pct"] == [d["summary"]["min_pct"], d["summary"]["max_pct"]]
        assert "this pair is an A/A" in d["noise_source"]
    else:
        assert d["noise_band_pct"] is None and "not an A/A" in d["noise_source"]


def test_ab_without_a_binary_on_either_side_says_so_instead_of_claiming_identity(tmp_path, cli):
    from harness import report_fixtures as rf
    levels = {k: v for k, v in rf.SAME_CODE.items() if k != "binary"}
    a, b = _code_pair(tmp_path, levels, levels)
    out = tmp_path / "ab.json"
    assert cli("--ab", a, b, "--json", out).returncode == 0
    d = _strict_json(out)
    assert d["code"]["verdict"] == "NO_IR_DIFF" and d["noise_band_pct"] is None
    assert "no binary hash on both sides" in d["code"]["reason"]


def _cut_before_final_line(run: Path) -> None:
    log = run / "run.log"
    text = log.read_text()
    log.write_text(text[:text.index("====== 1 passed")])


@pytest.mark.parametrize("how", ["cut log", "interrupted", "identity running", "identity error"])
def test_a_run_that_did_not_finish_is_reported_incomplete(tmp_path, cli, how):
    a = make_run(tmp_path / "a", ONE_ROW, mode="record", finished={"status": "complete", "exitstatus": 0})
    b = make_run(tmp_path / "b", ONE_ROW_B, finished={"status": "complete", "exitstatus": 0})
    out = tmp_path / "ab.json"
    assert cli("--ab", a, b, "--json", out).returncode == 0
    assert _strict_json(out)["summary"]["complete"] is True
    if how == "cut log":
        _cut_before_final_line(b)
    elif how == "interrupted":
        log = b / "run.log"
        log.write_text(log.read_text().replace("====== 1 passed", "!!!!! KeyboardInterrupt !!!!!\n"
                                               "====== no tests ran"))
    else:
        ident = json.loads((b / "run_identity.json").read_text())
        ident["finished"] = {"status": "running"} if how == "identity running" else \
            {"status": "interrupted", "exitstatus": 2}
        (b / "run_identity.json").write_text(json.dumps(ident))
    r = cli("--ab", a, b, "--json", out, "--label", "relu")
    assert r.returncode == 0, r.stdout + r.stderr
    d = _strict_json(out)
    assert d["summary"]["complete"] is False and list(d["summary"]["unfinished"]) == ["after"]
    assert "!!! [ab] relu: INCOMPLETE: after did not finish" in r.stdout
    assert any(f.startswith("INCOMPLETE: after did not finish") for f in d["flags"])


def test_ab_rounds_round_with_a_cut_cell_is_excluded(tmp_path, cli):
    make_rounds(tmp_path, 4, 0.05, 0.002, seed=5)
    _cut_before_final_line(tmp_path / "r3_B")
    out = tmp_path / "rounds.json"
    r = cli("--ab-rounds", tmp_path, "--label", "relu", "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "!!! [ab-rounds] relu: round 3: r3_B did not finish: run.log ends before pytest's final" in r.stdout
    d = _strict_json(out)
    assert d["rounds"] == 3 and d["round_numbers"] == [1, 2, 4]


def _tiny_latency_run(d: Path, mode: str, tiny: bool) -> Path:
    """Two shapes; with `tiny` the second one's gems latency is 1e-320 ms."""
    rows = [("SUCCESS", 0.01, SHAPES[0]), ("SUCCESS", 0.02, SHAPES[1])]
    text = table("relu", "torch.float16", rows)
    if tiny:
        line = next(x for x in text.splitlines() if x.endswith(SHAPES[1]))
        text = text.replace(line, f"SUCCESS   {0.01:>20.6f}{'1e-320':>20}{'inf':>20}          {SHAPES[1]}")
    return make_run(d, [text], mode=mode)


def test_a_latency_whose_ratio_overflows_is_unpaired_and_the_json_stays_standard(tmp_path, cli):
    a = _tiny_latency_run(tmp_path / "a", "record", tiny=False)
    b = _tiny_latency_run(tmp_path / "b", "replay", tiny=True)
    out = tmp_path / "ab.json"
    r = cli("--ab", a, b, "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    d = _strict_json(out)
    assert [p["size_detail"] for p in d["paired"]] == [SHAPES[0]]
    (u,) = d["unpaired"]
    assert u["size_detail"] == SHAPES[1] and u["reason"].startswith("latency ratio not a finite number")
    assert all(math.isfinite(v) for v in (d["summary"]["min_pct"], d["summary"]["geomean_pct"]))
    # --ab-rounds: the shape is unpaired with the reason, the other one is analysed
    for k in (1, 2):
        _tiny_latency_run(tmp_path / "rounds" / f"r{k}_A", "record" if k == 1 else "replay", tiny=False)
        _tiny_latency_run(tmp_path / "rounds" / f"r{k}_B", "replay", tiny=k == 2)
    r = cli("--ab-rounds", tmp_path / "rounds", "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    d = _strict_json(out)
    assert len(d["shapes"]) == 1 and "latency ratio not a finite number" in d["unpaired"][0]["reason"]


def test_json_text_turns_a_non_finite_number_into_null_and_names_it():
    text = bs.json_text({"a": [1.0, float("inf")], "b": {"c": float("nan")}, "d": 2})
    d = json.loads(text, parse_constant=lambda t: pytest.fail(t))
    assert d["a"] == [1.0, None] and d["b"]["c"] is None and d["d"] == 2
    assert d["non_finite_values"] == [".a[1]=inf", ".b.c=nan"]


@pytest.mark.parametrize("flag, where", [("--json", "b/report.json"), ("--json", "a/run.log"),
                                         ("--json", "a"), ("--html", "a/run.log"),
                                         ("--png", "b"), ("--png", "b/charts")])
def test_an_output_inside_an_input_run_is_refused_before_anything_is_written(tmp_path, cli, flag, where):
    a = make_run(tmp_path / "a", ONE_ROW, mode="record")
    b = make_run(tmp_path / "b", ONE_ROW_B)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    elsewhere = tmp_path / "elsewhere.json"
    r = cli("--ab", a / "run.log", b, flag, tmp_path / where,
            *(["--json", elsewhere] if flag != "--json" else []))
    assert r.returncode == 2 and "inside the input run directory" in r.stderr, r.stdout + r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "b" / "charts").exists()


def test_ab_rounds_json_in_its_root_is_allowed_inside_a_cell_is_not(tmp_path, cli):
    """ab_repeat.sh writes <root>/ab_rounds.json: the root holds runs, it is not one."""
    make_rounds(tmp_path, 2, 0.0, 0.001, seed=6)
    assert cli("--ab-rounds", tmp_path, "--json", tmp_path / "ab_rounds.json").returncode == 0
    r = cli("--ab-rounds", tmp_path, "--json", tmp_path / "r2_B" / "x.json")
    assert r.returncode == 2 and "inside the input run directory" in r.stderr


def test_ab_rounds_states_the_code_verdict_of_r1_a_against_r1_b(tmp_path, cli):
    from harness import report_fixtures as rf
    make_rounds(tmp_path, 2, 0.0, 0.001, seed=6)
    for k in (1, 2):      # every round compiled its side's code (a round that did not is left out)
        rf.write_fingerprints(tmp_path / f"r{k}_A", rf.SAME_CODE)
        rf.write_fingerprints(tmp_path / f"r{k}_B", {**rf.SAME_CODE, "binary": "ee" * 32})
    out = tmp_path / "rounds.json"
    r = cli("--ab-rounds", tmp_path, "--label", "relu", "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _strict_json(out)["code"]["verdict"] == "BINARY_CHANGED"
    assert "[ab-rounds] relu: IR r1_A vs r1_B: BINARY_CHANGED" in r.stdout


def test_two_outputs_at_one_path_and_a_png_folder_that_is_a_file_are_refused(tmp_path, cli):
    a = make_run(tmp_path / "a", ONE_ROW, mode="record")
    b = make_run(tmp_path / "b", ONE_ROW_B)
    same = tmp_path / "out" / "report"
    r = cli("--ab", a, b, "--json", same, "--html", same)
    assert r.returncode == 2 and "--json and --html are the same path" in r.stderr
    assert not (tmp_path / "out").exists()
    (tmp_path / "afile").write_text("")
    r = cli("--ab", a, b, "--png", tmp_path / "afile")
    assert r.returncode == 2 and "--png" in r.stderr and "is not a directory" in r.stderr


def test_batch_speedups_and_telemetry_keep_only_finite_numbers(tmp_path, cli):
    from zl.report import views
    assert [views.finite(x) for x in ("1.5", "inf", "-inf", "nan", "", None, "x")] == \
        [1.5, None, None, None, None, None, None]
    batch = tmp_path / "batch"
    run = make_run(batch / "main" / "relu", [table("relu", "torch.float16", [
        ("SUCCESS", 0.01, SHAPES[0]), ("SUCCESS", 0.02, SHAPES[1])])], mode="record")
    log = run / "run.log"
    log.write_text(log.read_text().replace(f"{0.01 / 0.02:.3f}", "inf"))
    (batch / "ops_status.csv").write_text("repo,op,status,out_dir\nmain,relu,PASS," + str(run) + "\n")
    out = tmp_path / "b.json"
    assert cli("--batch", batch, "--json", out).returncode == 0
    assert _strict_json(out)["ops"][0]["median_speedup"] == pytest.approx(1.0)


def test_ab_rounds_json_carries_the_caliber_hazards_the_console_prints(tmp_path, cli):
    make_rounds(tmp_path, 4, 0.05, 0.002, seed=6)
    for ident in tmp_path.glob("r*_*/run_identity.json"):
        data = json.loads(ident.read_text())
        ident.write_text(json.dumps({**data, "tuner_cache": "shared(/root/.flaggems)"}))
    out = tmp_path / "rounds.json"
    r = cli("--ab-rounds", tmp_path, "--label", "relu", "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    hazards = json.loads(out.read_text())["caliber_hazards"]
    assert len(hazards) == 1 and "r1_A recorded on a shared tuner cache" in hazards[0]
    assert hazards[0] in r.stdout


def test_a_screen_stopped_in_its_first_cell_reads_incomplete_not_unreadable(tmp_path, cli):
    root = tmp_path / "screen"
    root.mkdir()
    (root / "screen.tsv").write_text("op\top_file\tdtypes\tverdict\n")
    (root / "screen.requested.tsv").write_text("cell\top\nrelu\trelu\nabs\tabs\n")
    out = tmp_path / "screen.json"
    r = cli("--screen", root, "--json", out)
    assert r.returncode == 5, r.stdout + r.stderr
    assert "!!! [screen] INCOMPLETE" in r.stdout and "relu abs" in r.stdout
    assert "the screen judged no cell" in r.stdout
    d = json.loads(out.read_text())
    assert d["completion"]["never_judged"] == ["relu", "abs"] and d["exit_code"] == 5
    # without the requested list a header-only table is still unusable input
    (root / "screen.requested.tsv").unlink()
    assert cli("--screen", root).returncode == 2


# ---------------------------------------------------------------- a corrupt ops_status.csv

CORRUPT_OPS_STATUS = {
    "not_utf8": (b"repo,op,status\nFlagGems,softmax\xff\xfe,PASS\n", "UnicodeDecodeError"),
    "no_status_column": (b"garbage line\nmore,stuff\n", "no rows with op and repo and status columns"),
    "header_only": (b"repo,op,status\n", "got no rows"),
    "extra_cells": (b"repo,op,status\nFlagGems,softmax,PASS,x,y\n", "data row 1 has more cells"),
    "open_quote": (b'repo,op,status\nFlagGems,"softmax,PASS\n', "unexpected end of data"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT_OPS_STATUS))
def test_a_corrupt_ops_status_is_refused_by_both_batch_modes(tmp_path, cli, case):
    """BATCH_DIR used to read it with errors="replace" and no column check: `20 row(s)`, exit
    0, every op_status empty. Both modes now refuse it (exit 2, the table named) and write
    nothing; --batch crashed on a row with more cells than its header."""
    from harness.report_fixtures import batch_dir
    batch = batch_dir(tmp_path / "b")
    data, why = CORRUPT_OPS_STATUS[case]
    (batch / "ops_status.csv").write_bytes(data)
    for args in ((batch, "-o", tmp_path / "s.csv"), ("--batch", batch, "--json", tmp_path / "b.json")):
        r = cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert f"{batch / 'ops_status.csv'}" in r.stderr and why in r.stderr, r.stderr
    assert not (tmp_path / "s.csv").exists() and not (tmp_path / "b.json").exists()


def test_a_sound_ops_status_still_summarises_and_batch_prints_only_warnings(tmp_path, cli):
    """The docstring's contract: --batch's report is --json/--html/--png, stdout holds only its
    `!!!` lines (none for this batch)."""
    from harness.report_fixtures import batch_dir
    batch = batch_dir(tmp_path / "b")
    r = cli(batch, "-o", tmp_path / "s.csv")
    assert r.returncode == 0 and "row(s) ->" in r.stdout, r.stderr
    rows = list(csv.DictReader(open(tmp_path / "s.csv")))
    assert rows and all(x["op_status"] in ("success", "failed") for x in rows)
    r = cli("--batch", batch, "--json", tmp_path / "b.json")
    assert r.returncode == 0 and r.stdout == "" and (tmp_path / "b.json").is_file(), r.stderr
    assert "--batch prints only its `!!!` lines, its report is --json/--html/--png" \
        in " ".join(bs.__doc__.split())
