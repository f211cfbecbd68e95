"""Per-shape FASTER/SLOWER/SAME/UNCLEAR verdicts (zl/report/verdicts.py) on recorded H200 data.

The controls are real: the softmax DISABLE_LLVM_OPT campaign's same-side cells across its 4
rounds (r<i>_A vs r<j>_A, r<i>_B vs r<j>_B: the same code, 60 A/A shape deltas) and relu's
A/A round. Those runs kept no IR, so each cell gets a fingerprint record: the A cells one
code, the B cells another (the switch changed LLVM IR onwards).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import batch_summary as bs
from harness import report_fixtures as rf
from zl.report import verdicts as vd
from zl.report.run import Runs

B_CODE = {**rf.SAME_CODE, "llir": "2d" * 32, "ptx": "8f" * 32, "binary": "c2" * 32}


def rounds(tmp_path: Path, **identity) -> Path:
    root = rf.rounds_root(tmp_path / "campaign")
    for cell in root.iterdir():
        if cell.is_dir():
            rf.write_fingerprints(cell, rf.SAME_CODE if cell.name.endswith("_A") else B_CODE)
            if identity:
                path = cell / "run_identity.json"
                path.write_text(json.dumps({**json.loads(path.read_text()), **identity}))
    return root


def relu_aa(tmp_path: Path) -> Path:
    """relu's recorded A/A round as a pair with every level identical."""
    for side, log, mode in (("before", "r1_A", "record"), ("after", "r1_B", "replay")):
        rf.write_fingerprints(rf.run_dir(tmp_path / "relu" / side, f"{rf.RELU_ROUNDS}/{log}.run.log",
                                         mode, "relu"), rf.SAME_CODE)
    return tmp_path / "relu"


def run_json(tmp_path: Path, *argv) -> dict:
    js = tmp_path / "out.json"
    assert bs.main([str(a) for a in argv] + ["--json", str(js)]) == 0
    return json.loads(js.read_text())


def test_threshold_is_the_conformal_order_statistic():
    vals = [float(i) for i in range(1, 20)]          # 19 controls, |delta| 1..19 %
    assert vd.min_controls(0.05) == 19 and vd.min_controls(0.1) == 9
    assert vd.threshold(vals, 0.05) == (19.0, 1 / 20)   # k = ceil(20 * 0.95) = 19: the largest
    assert vd.threshold(vals[:18], 0.05) == (None, None)
    thr, bound = vd.threshold([-x for x in vals], 0.1)  # k = 18: signs do not matter
    assert thr == 18.0 and bound == pytest.approx(2 / 20)
    assert [vd.latency_class(ms) for ms in (0.001, 0.01, 0.05, 0.5, 1.0, 10.0)] == [0, 1, 1, 2, 3, 3]
    with pytest.raises(vd.BadFalseAlarm):
        vd.check_false_alarm(0.0)


def test_a_shape_below_one_microsecond_is_unclear_and_no_control():
    """A graph with no kernel in it (unbind, resize_as_ on the H200: 0.000000-0.000010 ms)
    is never FASTER/SLOWER, and its wild A/A ratios never widen a class's threshold."""
    key = ("cuda_graph",)
    real = [{"latency_ms": 0.005, "delta_pct": float(i % 5) / 10, "caliber": key, "pair": f"p{i}",
             "source": "s"} for i in range(40)]
    views = [{"latency_ms": 0.000002, "delta_pct": 900.0, "caliber": key, "pair": f"v{i}",
              "source": "s"} for i in range(40)]
    cal = vd.Calibration(real + views, key, "recorded", 0.05)
    assert cal.classes[0]["controls"] == 40 and cal.classes[0]["threshold_pct"] == pytest.approx(0.4)
    tiny = cal.judge(-150.0, 0.000001)
    assert tiny["verdict"] == "UNCLEAR" and "below 1 us" in tiny["reason"]
    assert cal.judge(-150.0, 0.001)["verdict"] == "SLOWER" and cal.judge(0.3, 0.002)["verdict"] == "SAME"
    assert "below 1 us on side A" in cal.rule()["text"]


def test_real_change_is_slower_where_its_slowdown_exceeds_the_aa_noise(tmp_path, capsys):
    d = run_json(tmp_path, "--ab-rounds", rounds(tmp_path), "--false-alarm", "0.1")
    v = d["verdicts"]
    rule = v["rule"]
    assert rule["controls"] == 60 and not rule["unusable"] and not v["rejected_controls"]
    assert rule["alpha"] == 0.05 and "Mann-Whitney p < 0.05" in rule["text"]
    thr = {c["class"]: c["threshold_pct"] for c in rule["classes"]}
    by = {s["size_detail"]: s for s in d["shapes"]}
    big = by["[torch.Size([1048576])]"]
    assert big["speedup_pct"] < -10 and big["aa_verdict"] == "SLOWER"
    for s in d["shapes"]:
        noise = thr[s["latency_class"]]
        exceeds = abs(s["speedup_pct"]) > noise and s["p_value"] < 0.05
        assert (s["aa_verdict"] in ("SLOWER", "FASTER")) == exceeds, s
        assert s["aa_verdict"] != "SLOWER" or s["speedup_pct"] < -noise
    assert v["summary"]["counts"]["SLOWER"] == 3 and v["summary"]["counts"]["UNCLEAR"] == 0
    bounds = {c["class"]: c["false_alarm_bound"] for c in rule["classes"]}
    assert v["summary"]["expected_false_verdicts"] == pytest.approx(
        sum(bounds[s["latency_class"]] for s in d["shapes"]))
    # scipy's Benjamini-Hochberg over the per-shape p-values: 4 of 5 at p = 0.029
    assert v["summary"]["bh_discoveries"] == 4
    out = capsys.readouterr().out
    assert "verdicts (A/A-calibrated): FASTER=1, SLOWER=3, SAME=1, UNCLEAR=0" in out


def test_too_few_controls_in_a_class_is_unclear_with_the_reason(tmp_path):
    d = run_json(tmp_path, "--ab-rounds", rounds(tmp_path))          # default 5 %: 19 per class
    by = {s["size_detail"]: s for s in d["shapes"]}
    big = by["[torch.Size([1048576])]"]
    assert big["aa_verdict"] == "UNCLEAR" and "12 A/A control(s) in class 100 us-1 ms" in big["aa_reason"]
    assert {s["aa_verdict"] for s in d["shapes"]} <= {"UNCLEAR", "SLOWER"}


def test_false_alarm_rate_on_the_aa_controls_is_within_its_bound(tmp_path):
    root = rounds(tmp_path)
    with_relu = relu_aa(tmp_path)
    runs = Runs()
    controls, rejected = vd.rounds_controls("softmax", {
        (int(c.name[1]), c.name[-1]): runs.get(c) for c in root.iterdir() if c.is_dir()})
    more, why = vd.pair_controls("relu", runs.get(with_relu / "before"), runs.get(with_relu / "after"))
    assert len(controls) == 60 and len(more) == 5 and not rejected and why is None
    key = vd.pair_key(runs.get(with_relu / "before"), runs.get(with_relu / "after"))
    for fa in (0.05, 0.1, 0.2):
        rule = vd.Calibration(controls + more, key, "recorded", fa).rule()
        assert rule["loo_judged"] > 0
        assert rule["loo_false_alarm_rate"] <= fa, (fa, rule)
        for c in rule["classes"]:
            assert c["false_alarm_bound"] is None or c["false_alarm_bound"] <= fa


def test_borderline_delta_at_the_threshold_is_same(tmp_path):
    runs = Runs()
    root = rounds(tmp_path)
    controls, _ = vd.rounds_controls("softmax", {
        (int(c.name[1]), c.name[-1]): runs.get(c) for c in root.iterdir() if c.is_dir()})
    cal = vd.Calibration(controls, controls[0]["caliber"], "recorded", 0.05)
    thr = cal.judge(0.0, 0.03)["threshold_pct"]                       # 10-100 us: 24 controls
    assert thr and cal.judge(-thr, 0.03)["verdict"] == "SAME"           # at it: within it
    assert cal.judge(-thr * 1.01, 0.03)["verdict"] == "SLOWER"
    assert cal.judge(thr * 1.01, 0.03, p=0.029, alpha=0.05)["verdict"] == "FASTER"
    undecided = cal.judge(-thr * 1.01, 0.03, p=0.2, alpha=0.05)
    assert undecided["verdict"] == "UNCLEAR" and "rank test does not agree" in undecided["reason"]
    weak = cal.judge(-thr * 2, 0.03, underpowered="3 rounds cannot reach alpha")
    assert weak["verdict"] == "UNCLEAR" and weak["reason"] == "3 rounds cannot reach alpha"


def test_aa_pair_gets_same_or_unclear_only(tmp_path, capsys):
    pair = relu_aa(tmp_path)
    d = run_json(tmp_path, "--ab", pair / "before", pair / "after", "--controls", rounds(tmp_path))
    got = {p["aa_verdict"] for p in d["paired"]}
    assert got <= {"SAME", "UNCLEAR"} and "SAME" in got
    # without controls: the pair never calibrates itself
    d = run_json(tmp_path, "--ab", pair / "before", pair / "after")
    assert {p["aa_verdict"] for p in d["paired"]} == {"UNCLEAR"}
    assert "no A/A control" in d["paired"][0]["aa_reason"]


def test_controls_of_another_caliber_are_not_used(tmp_path):
    pair = relu_aa(tmp_path)
    d = run_json(tmp_path, "--ab", pair / "before", pair / "after", "--controls",
                 rounds(tmp_path, l2="cold"))
    assert {p["aa_verdict"] for p in d["paired"]} == {"UNCLEAR"}
    assert d["verdicts"]["rule"]["controls_other_caliber"] == 60
    assert "60 measured with another caliber" in d["paired"][0]["aa_reason"]


def test_screen_aa_cell_is_judged_without_its_own_shapes(tmp_path, capsys):
    root = rf.screen_root(tmp_path / "screen")
    d = run_json(tmp_path, "--screen", root)
    by = {o["op"]: o for o in d["ops"]}
    assert by["softmax"]["code"]["aa"] and by["softmax"]["shapes"]
    # the only A/A cell is the one judged: nothing left to calibrate it, so UNCLEAR
    assert {s["aa_verdict"] for s in by["softmax"]["shapes"]} == {"UNCLEAR"}
    assert d["verdicts"]["rule"]["controls"] == 5
    assert d["verdicts"]["summary"]["counts"]["FASTER"] == 0


@pytest.mark.parametrize("argv", [["--false-alarm", "0"], ["--false-alarm", "0.7"]])
def test_bad_verdict_options_exit_2(tmp_path, argv, capsys):
    root = rf.screen_root(tmp_path / "screen")
    assert bs.main(["--screen", str(root)] + argv) == 2
    assert "batch_summary.py: --" in capsys.readouterr().err


def test_controls_go_with_a_comparison_only(tmp_path, capsys):
    batch = rf.batch_dir(tmp_path / "batch")
    assert bs.main(["--batch", str(batch), "--controls", str(tmp_path)]) == 2
    assert "--controls goes with --ab, --ab-rounds or --screen" in capsys.readouterr().err


def test_switch_screen_judged_against_an_aa_screen_of_the_same_nodes(tmp_path, capsys):
    """The evidence layout: an A/A screen gives the controls, the switch's screen (no A/A
    cell of its own) is judged against them with --controls."""
    aa = rf.screen_root(tmp_path / "aa")
    switch = rf.screen_root(tmp_path / "switch")
    tsv = switch / "screen.tsv"
    tsv.write_text(tsv.read_text().replace("\tNO_IR_DIFF\tcuda", "\tIR_CHANGED\tcuda"))
    rf.write_fingerprints(switch / "softmax@float16_after", B_CODE)
    alone = run_json(tmp_path, "--screen", switch)
    assert alone["verdicts"]["rule"]["controls"] == 0
    assert "no A/A control" in alone["verdicts"]["rule"]["unusable"]
    d = run_json(tmp_path, "--screen", switch, "--controls", aa, "--false-alarm", "0.5")
    assert d["verdicts"]["rule"]["controls"] == 5 and "--controls" in d["verdicts"]["rule"]["control_source"]
    relu = {s["size_detail"]: s for s in next(o for o in d["ops"] if o["op"] == "relu")["shapes"]}
    assert relu["[torch.Size([64, 64])]"]["threshold_pct"] is not None


def test_controls_dir_of_unknown_layout_exits_2(tmp_path, capsys):
    pair = relu_aa(tmp_path)
    (tmp_path / "empty").mkdir()
    assert bs.main(["--ab", str(pair / "before"), str(pair / "after"), "--controls",
                    str(tmp_path / "empty")]) == 2
    assert "neither a screen root" in capsys.readouterr().err


def test_leave_one_out_matches_its_definition():
    """The one-sort leave-one-out equals judging each control by the others' threshold."""
    import random
    rng = random.Random(7)
    for _ in range(300):
        fa = rng.choice([0.05, 0.1, 0.3, 0.5])
        vals = [round(rng.gauss(0, 1), rng.choice([0, 1, 3])) for _ in range(rng.randint(0, 45))]
        judged = exceeded = 0
        for i, v in enumerate(vals):
            thr, _ = vd.threshold(vals[:i] + vals[i + 1:], fa)
            if thr is not None:
                judged, exceeded = judged + 1, exceeded + (abs(v) > thr)
        assert vd._leave_one_out(vals, fa) == (judged, exceeded), (vals, fa)


def test_screen_cells_calibrate_each_other_never_themselves(tmp_path, capsys):
    """Two A/A cells: each is judged by the other's shapes only (F = 0.5: one control per
    class is enough, so the threshold is the other cell's |delta| in that class)."""
    root = rf.screen_root(tmp_path / "screen")
    rf.write_fingerprints(root / "relu@float16_after", rf.SAME_CODE)
    tsv = root / "screen.tsv"
    tsv.write_text(tsv.read_text().replace("\tIR_CHANGED\tcuda", "\tNO_IR_DIFF\tcuda", 1))
    d = run_json(tmp_path, "--screen", root, "--false-alarm", "0.5", "--html", tmp_path / "s.html")
    by = {o["op"]: o for o in d["ops"]}
    assert by["softmax"]["code"]["aa"] and by["relu"]["code"]["aa"]
    assert 'id="aa-false-alarms"' in (tmp_path / "s.html").read_text()
    small = {op: next(s for s in by[op]["shapes"] if "[64, 64]" in s["size_detail"])
             for op in ("softmax", "relu")}
    for op, other in (("softmax", "relu"), ("relu", "softmax")):
        assert small[op]["latency_class"] == "< 10 us"
        assert small[op]["threshold_pct"] == pytest.approx(abs(small[other]["speedup_pct"]))
    assert d["verdicts"]["rule"]["controls"] == 10
    assert d["verdicts"]["summary"]["decided"] > 0
    # both cells are A/A: each FASTER/SLOWER among them is a measured false alarm
    aa = d["verdicts"]["aa_cells"]
    shapes = by["softmax"]["shapes"] + by["relu"]["shapes"]
    alarms = sum(s["aa_verdict"] in ("FASTER", "SLOWER") for s in shapes)
    assert aa["shapes"] == 10 and aa["counts"]["FASTER"] + aa["counts"]["SLOWER"] == alarms
    assert aa["expected_false_verdicts"] == pytest.approx(
        sum(s["false_alarm_bound"] for s in shapes if s["aa_verdict"] != "UNCLEAR"))
    assert f"A/A cells judged like the others: {alarms} FASTER/SLOWER" in capsys.readouterr().out


def test_the_screens_caliber_lines_name_each_problem_once_with_its_cells():
    from zl.report.screen import caliber_lines
    ops = [{"cell": f"op{i}", "caliber_problems": ["before: shared"] + (["timer differs"] if i == 3 else [])}
           for i in range(12)] + [{"cell": "clean", "caliber_problems": []}]
    assert caliber_lines(ops) == [
        "!!! [caliber] op0, op1, op2, op3, op4, op5, op6, op7, op8, op9 and 2 more: before: shared",
        "!!! [caliber] op3: timer differs"]


@pytest.mark.parametrize("field", [{"device_share": 4}, {"timer": "direct"}])
def test_a_screen_cell_the_caliber_guard_refuses_is_neither_judged_nor_a_control(tmp_path, capsys, field):
    """Two A/A cells, relu's side B measured otherwise: relu gets no speed verdict and is not
    softmax's control, its problem printed before any speed; allowed, it is judged (still
    not a control: its spread is not this caliber's noise)."""
    root = rf.screen_root(tmp_path / "screen")
    rf.write_fingerprints(root / "relu@float16_after", rf.SAME_CODE)
    tsv = root / "screen.tsv"
    tsv.write_text(tsv.read_text().replace("\tIR_CHANGED\tcuda", "\tNO_IR_DIFF\tcuda", 1))
    ident = root / "relu@float16_after" / "run_identity.json"
    ident.write_text(json.dumps({**json.loads(ident.read_text()), **field}))
    capsys.readouterr()
    d = run_json(tmp_path, "--screen", root, "--false-alarm", "0.5")
    out = capsys.readouterr().out
    by = {o["op"]: o for o in d["ops"]}
    problem = next(iter(field))
    assert f"!!! [caliber] relu@float16: {problem}" in out
    assert out.index("!!! [caliber]") < out.index("[screen] noise band")
    assert {s["aa_verdict"] for s in by["relu"]["shapes"]} == {"UNCLEAR"}
    assert all(s["aa_reason"].startswith("not judged: the caliber guard refuses this pair")
               for s in by["relu"]["shapes"])
    assert d["verdicts"]["rule"]["controls"] == 5          # softmax's shapes only
    assert {s["aa_verdict"] for s in by["softmax"]["shapes"]} == {"UNCLEAR"}   # no control left
    assert "relu" not in d["noise_source"] and d["noise_band_pct"] == [by["softmax"]["min_pct"],
                                                                       by["softmax"]["max_pct"]]
    d = run_json(tmp_path, "--screen", root, "--false-alarm", "0.5", "--allow-caliber-mismatch")
    by = {o["op"]: o for o in d["ops"]}
    assert not any(s["aa_reason"].startswith("not judged") for s in by["relu"]["shapes"])
    assert d["verdicts"]["summary"]["decided"] > 0 and d["verdicts"]["rule"]["controls"] == 5


def test_screen_groups_changed_cells_by_change_signature(tmp_path, capsys):
    import shutil
    root = rf.screen_root(tmp_path / "screen")
    tsv = root / "screen.tsv"
    lines = tsv.read_text().splitlines()
    cols = lines[0].split("\t")
    relu = lines[2].split("\t")
    relu[cols.index("cvt_after")] = "1"                        # one more ttg.convert_layout
    gelu = list(relu)
    gelu[cols.index("op")] = gelu[cols.index("op_file")] = "gelu"
    for side in ("before", "after"):
        shutil.copytree(root / f"relu@float16_{side}", root / f"gelu@float16_{side}")
    tsv.write_text("\n".join(lines[:2] + ["\t".join(relu), lines[3], "\t".join(gelu)]) + "\n")
    html = tmp_path / "s.html"
    d = run_json(tmp_path, "--screen", root, "--html", html)
    groups = d["verdicts"]["change_groups"]
    assert [g["signature"] for g in groups] == ["IR_CHANGED@llir, +1 convert_layout"]
    assert groups[0]["cells"] == ["relu@float16", "gelu@float16"]
    assert sum(groups[0]["shape_verdicts"].values()) == 10      # 5 shapes per cell
    assert "change IR_CHANGED@llir, +1 convert_layout: 2 cell(s)" in capsys.readouterr().out
    assert "Changed cells by change signature" in html.read_text()


def test_console_and_json_lead_with_the_verdicts(tmp_path, capsys):
    """The verdict counts come before the per-shape lines (only a results MISMATCH, printed
    first, precedes them), and `verdicts` is the JSON's first key after mode and label."""
    d = run_json(tmp_path, "--ab-rounds", rounds(tmp_path), "--false-alarm", "0.1")
    assert list(d)[:3] == ["mode", "label", "verdicts"]
    out = capsys.readouterr().out
    counts = out.index("verdicts (A/A-calibrated): FASTER=1, SLOWER=3")
    assert counts < out.index("per shape: A/A-calibrated verdict")
    assert "  SLOWER   torch.float16     -10.38%" in out
    pair = relu_aa(tmp_path)
    d = run_json(tmp_path, "--ab", pair / "before", pair / "after", "--controls", rounds(tmp_path / "c"))
    assert list(d)[:3] == ["mode", "label", "verdicts"]
    out = capsys.readouterr().out
    assert out.index("verdicts (A/A-calibrated)") < out.index("gems latency (ms) before -> after")


def test_an_output_inside_a_controls_run_exits_2_before_anything_runs(tmp_path, capsys):
    pair = relu_aa(tmp_path)
    controls = rounds(tmp_path)
    js = controls / "r1_A" / "out.json"
    assert bs.main(["--ab", str(pair / "before"), str(pair / "after"), "--controls", str(controls),
                    "--json", str(js)]) == 2
    assert not js.exists()


def test_run_batch_switch_layout_gets_shape_verdicts(tmp_path, capsys):
    """run_batch.py --switch keeps a pair in before|after/<repo>/<run_name> and names repo and
    run_name in screen.tsv: its cells get shapes, controls and verdicts too."""
    import shutil
    root = rf.screen_root(tmp_path / "screen")
    tsv = root / "screen.tsv"
    lines = tsv.read_text().splitlines()
    rows = [lines[0] + "\trepo\trun_name"] + [f"{x}\tFlagGems\t{x.split(chr(9))[0]}" for x in lines[1:]]
    tsv.write_text("\n".join(rows) + "\n")
    for op in ("softmax", "relu"):
        for side in ("before", "after"):
            (root / side / "FlagGems").mkdir(parents=True, exist_ok=True)
            shutil.move(str(root / f"{op}@float16_{side}"), str(root / side / "FlagGems" / op))
    d = run_json(tmp_path, "--screen", root, "--false-alarm", "0.5")
    by = {o["op"]: o for o in d["ops"]}
    assert len(by["relu"]["shapes"]) == 5 and by["softmax"]["code"]["aa"]
    assert d["verdicts"]["rule"]["controls"] == 5
    assert {s["aa_verdict"] for s in by["softmax"]["shapes"]} == {"UNCLEAR"}   # never itself
    relu = [root / side / "FlagGems" / "relu" for side in ("before", "after")]
    d = run_json(tmp_path, "--ab", *relu, "--false-alarm", "0.5")
    assert d["verdicts"]["rule"]["controls"] == 5 and "screen" in d["verdicts"]["rule"]["control_source"]
    assert {p["aa_verdict"] for p in d["paired"]} - {"UNCLEAR"}


def test_three_rounds_are_underpowered_not_slower(tmp_path):
    """3 rounds cannot reach p < 0.05 (smallest Mann-Whitney p 0.100): the -10 % shape is
    UNCLEAR with that reason, however far it is beyond the A/A threshold."""
    import shutil
    root = rounds(tmp_path)
    for side in "AB":
        shutil.rmtree(root / f"r4_{side}")
    d = run_json(tmp_path, "--ab-rounds", root, "--false-alarm", "0.2")
    big = next(s for s in d["shapes"] if s["size_detail"] == "[torch.Size([1048576])]")
    assert abs(big["speedup_pct"]) > big["threshold_pct"]
    assert big["aa_verdict"] == "UNCLEAR" and "underpowered" in big["aa_reason"]
    assert d["verdicts"]["summary"]["counts"]["SLOWER"] == 0


# ---------------------------------------------------------------- codegen vs re-tuning (side C)

KERNEL = "fg.ops.k_kernel"
SIZES = ("[torch.Size([1024])]", "[torch.Size([2048])]", "[torch.Size([4096])]", "[torch.Size([8192])]")
A_LAT = (0.020, 0.030, 0.040, 0.050)                    # 10-100 us, one latency class


def _log(run: Path, op: str, lats, extra: str = "") -> None:
    head = (f"{'Status':<10} {'Torch Latency (ms)':>20} {'Gems Latency (ms)':>20} "
            f"{'Gems Speedup':>20} {'Size Detail':>20}")
    rows = [f"{'SUCCESS':<10}{0.05:>20.6f}{lat:>20.6f}{0.05 / lat:>20.3f}" + " " * 10 + size
            for lat, size in zip(lats, SIZES)]
    run.mkdir(parents=True, exist_ok=True)
    (run / "run.log").write_text("collected 1 item\n" + extra + "\n".join(
        [f"Operator: {op}  Performance Test (dtype=torch.float16, mode=kernel,level=core)", head, "-" * 95]
        + rows) + "\n====== 1 passed in 1.00s ======\n")


def _record(run: Path, op: str, blocks) -> str:
    """autotune_records/<op>.json as the record plugin writes it; returns its digest."""
    from zl.autotune import records
    doc = {KERNEL: {key: {"kwargs": {"BLOCK": b}, "num_warps": 4, "num_stages": 2, "pre_hook": False}
                    for key, b in zip(("1024", "4096"), blocks)}}
    records.write_records(str(run / "autotune_records"), op, doc, "cuda")
    return records.digest(doc)


def _ident(run: Path, **fields) -> None:
    (run / "run_identity.json").write_text(json.dumps({**rf.H200_IDENTITY, **fields}))


def retune_screen(root: Path) -> Path:
    """A run_batch.py --switch --retune screen, handbuilt: two A/A cells (controls, every level
    identical, +-0.25..1 %), and three changed nodes with side C. `other`: B 10 % slower at A's
    configs, C re-tuned one key to another config and is 20 % faster; `failed`: A's config of
    key 4096 did not rebuild under the switch (B fell back, pre_hook_lost), C picked another;
    `same`: C picked A's configs, +0.3 %."""
    nodes = {   # op: (B's latency factor, C's, A's blocks, C's blocks, B's extra run.log, B's identity)
        "ctl1": (1.0025, None, (64, 128), None, "", {}),
        "ctl2": (0.99, None, (64, 128), None, "", {}),
        "other": (1 / 0.9, 1 / 1.2, (64, 128), (64, 256), "", {}),
        "failed": (1.0, 1 / 1.05, (64, 128), (64, 512),
                   f"AUTOTUNE_REPLAY_FALLBACK op=failed kernel={KERNEL} key=4096 reason=pre_hook_lost\n",
                   {"autotune_mode": "replay_fallback", "replay_fallback_scope": "keys",
                    "replay_fallback_keys": 1, "replay_replayed_keys": 1}),
        "same": (1.0, 1 / 1.003, (64, 128), (64, 128), "", {}),
    }
    lines, status = ["op\top_file\tdtypes\trows_before\trows_after\trc_before\trc_after\tverdict\trepo\trun_name"], []
    for op, (fb, fc, ab, cb, extra, bident) in nodes.items():
        a, b, c = (root / side / "main" / op for side in ("before", "after", "retuned"))
        _log(a, op, A_LAT)
        digest = _record(a, op, ab)
        _ident(a, autotune_mode="record", run_id=f"{op:a>32}"[:32], autotune_record_digest=digest)
        rf.write_fingerprints(a, rf.SAME_CODE)
        _log(b, op, [x * fb for x in A_LAT], extra)
        _ident(b, **{"autotune_mode": "replay", "replay_source_run_id": f"{op:a>32}"[:32],
                     "replay_record_digest": digest, "replay_source_record_digest": digest,
                     "replay_source_dir": str(a), **bident})
        (b / "autotune_records").mkdir(parents=True)
        (b / "autotune_records" / f"{op}.used.json").write_text(
            (a / "autotune_records" / f"{op}.json").read_text())
        aa = fc is None
        rf.write_fingerprints(b, rf.SAME_CODE if aa else B_CODE)
        lines.append(f"{op}\t{op}\t<all>\t4\t4\t0\t0\t{'NO_IR_DIFF' if aa else 'IR_CHANGED@llir'}\tmain\t{op}")
        if not aa:
            _log(c, op, [x * fc for x in A_LAT])
            _ident(c, autotune_mode="record", run_id=f"{op:c>32}"[:32], autotune_record_digest=_record(c, op, cb))
            status.append(f"main,{op},{op},PASS,0,")
    lines.append("amax\tamax\t<all>\t0\t0\t1\t\tNO_ROWS\tmain\tamax")   # side A failed: B and C NOT_RUN
    status.append("main,amax,amax,NOT_RUN,,side before ended FAIL")
    (root / "screen.tsv").write_text("\n".join(lines) + "\n")
    (root / "retuned" / "ops_status.csv").write_text("repo,op,run_name,status,return_code,notes\n"
                                                     + "\n".join(status) + "\n")
    return root


def test_retune_reports_a_vs_c_beside_a_vs_b_with_one_rule_and_the_picks_per_key(tmp_path, capsys):
    root = retune_screen(tmp_path / "screen")
    capsys.readouterr()
    d = run_json(tmp_path, "--screen", root, "--false-alarm", "0.2")
    out = capsys.readouterr().out
    by = {o["op"]: o for o in d["ops"]}
    assert set(d["retune"]["which"]) == {"a_vs_b", "a_vs_c"}
    assert "replays side A's autotune picks" in d["retune"]["which"]["a_vs_b"]
    assert "tunes live" in d["retune"]["which"]["a_vs_c"]
    assert d["retune"]["nodes"] == ["other", "failed", "same"]
    assert "retune" not in by["ctl1"] and "retune" not in by["ctl2"]   # no side C: nothing new
    other = by["other"]["retune"]
    # the same statistics as A vs B, each shape judged by the same rule, threshold and controls
    assert other["a_vs_b"]["median_pct"] == by["other"]["median_pct"] == pytest.approx(-10.0, abs=0.01)
    assert other["a_vs_c"]["median_pct"] == pytest.approx(20.0, abs=0.01)
    assert other["a_vs_c"]["geomean_pct"] == pytest.approx(20.0, abs=0.01) and other["a_vs_c"]["paired"] == 4
    for ab, ac in zip(by["other"]["shapes"], other["a_vs_c"]["shapes"]):
        assert ac["threshold_pct"] == ab["threshold_pct"] == pytest.approx(1.01, abs=0.01)   # ctl2: 1/0.99
        assert (ab["aa_verdict"], ac["aa_verdict"]) == ("SLOWER", "FASTER")
    assert other["a_vs_c"]["aa_verdict_counts"]["FASTER"] == 4 and not other["a_vs_c"]["caliber_problems"]
    same = by["same"]["retune"]
    assert same["a_vs_c"]["aa_verdict_counts"]["SAME"] == 4
    assert d["retune"]["summary"]["counts"] == {"FASTER": 8, "SLOWER": 0, "SAME": 4, "UNCLEAR": 0}
    # per key: C's pick against A's, and what B's replay made of A's under the switch
    keys = {(o, k["key"]): k for o in ("other", "failed", "same") for k in by[o]["retune"]["picks"]["keys"]}
    assert keys[("other", "4096")]["c_pick"] == "other" and keys[("other", "1024")]["c_pick"] == "same"
    assert keys[("other", "4096")]["a_under_switch"] == "replayed"
    assert keys[("other", "4096")]["c_config"] == "BLOCK=256 num_stages=2 num_warps=4"
    assert (keys[("failed", "4096")]["a_under_switch"], keys[("failed", "4096")]["reason"]) == ("failed", "pre_hook_lost")
    assert keys[("failed", "1024")]["a_under_switch"] == "replayed"
    assert by["same"]["retune"]["picks"]["counts"]["same"] == 2
    assert {k["a_under_switch"] for k in by["same"]["retune"]["picks"]["keys"]} == {"replayed"}
    assert d["retune"]["picks"] == {"same": 4, "other": 2, "only_a": 0, "only_c": 0, "neither": 0}
    assert d["retune"]["under_switch"]["failed"] == 1
    assert by["amax"]["retune"]["side_c"]["status"] == "NOT_RUN" and "a_vs_c" not in by["amax"]["retune"]
    assert d["retune"]["side_c_not_run"] == {"amax": "NOT_RUN"}
    assert "[screen] retune: A vs C = after re-tuning" in out
    assert ("[screen] retune failed:   fg.ops.k_kernel 4096: A BLOCK=128 num_stages=2 num_warps=4 -> C "
            "BLOCK=512 num_stages=2 num_warps=4 (other); A's under the switch: failed (pre_hook_lost)") in out
    assert "[screen] retune same:   " not in out              # nothing differs: no key line
    from zl.report.html import render_report
    page, _ = render_report(d)
    section = page.split('<div id="retune">', 1)[1]
    assert "Codegen vs re-tuning (side C)" in section and "pre_hook_lost" in section
    nodes, keys = re.findall(r"<table.*?</table>", section)[:2]
    assert nodes.count("<tr>") == 1 + 4 and ">NOT_RUN<" in nodes          # header + other, failed, same, amax
    assert keys.count("<tr>") == 1 + 2 and "BLOCK=512" in keys              # header + the two keys that differ


def test_retune_names_a_record_that_is_not_its_runs_and_a_screen_without_side_c_has_none(tmp_path, capsys):
    root = retune_screen(tmp_path / "screen")
    rec = root / "retuned" / "main" / "same" / "autotune_records" / "same.json"
    rec.write_text(rec.read_text().replace("128", "64"))
    d = run_json(tmp_path, "--screen", root, "--false-alarm", "0.2")
    same = {o["op"]: o for o in d["ops"]}["same"]["retune"]["picks"]
    assert "is not the record its run wrote" in same["problems"][0]
    assert "!!! [screen] retune same: " in capsys.readouterr().out
    from zl.report import retune   # a node whose runs tuned nothing (relu on the fake tree)
    assert retune.picks({}, {}, None)["keys"] == [] and retune._picks_text(retune.picks({}, {}, None)) == "no autotuned key"
    (root / "retuned" / "ops_status.csv").unlink()
    d = run_json(tmp_path, "--screen", root, "--false-alarm", "0.2")
    assert "retune" not in d and not any("retune" in o for o in d["ops"])
    from zl.report.html import render_report
    assert 'id="retune"' not in render_report(d)[0]


def test_a_pair_timed_on_the_direct_fallback_is_calibrated_only_with_such_pairs(tmp_path):
    """The host is in the loop of the direct fallback timer: on an H100 at overlap 8 two such
    nodes read A/A 9-15 % and widened a graph-timed class's threshold. A pair with a
    BENCHMARK_DIRECT_NO_CUDAGRAPH event neither calibrates graph-timed pairs nor is judged by
    them; the run.log's mention of the marker in a configure line does not count."""
    root, relu = rounds(tmp_path), relu_aa(tmp_path)
    runs = Runs()
    graph, _ = vd.rounds_controls("softmax", {
        (int(c.name[1]), c.name[-1]): runs.get(c) for c in root.iterdir() if c.is_dir()})
    log = relu / "before" / "run.log"
    log.write_text(log.read_text() + "[timing-plugin] timer=cuda_graph (fallback to do_bench with "
                   "BENCHMARK_DIRECT_NO_CUDAGRAPH)\n")
    assert vd.timing_of(Runs().get(relu / "before")) == "graph"      # a mention, not an event
    log.write_text(log.read_text() + "BENCHMARK_DIRECT_NO_CUDAGRAPH op=relu phase=capture "
                   "reason=AcceleratorError host_share=15%\n")
    runs = Runs()
    direct, why = vd.pair_controls("relu", runs.get(relu / "before"), runs.get(relu / "after"))
    assert why is None and len(direct) == 5
    relu_key = vd.pair_key(runs.get(relu / "before"), runs.get(relu / "after"))
    graph_key = graph[0]["caliber"]
    assert dict(relu_key)["timing"] == "direct" and dict(graph_key)["timing"] == "graph"
    assert relu_key[:-1] == graph_key[:-1]                            # the same caliber otherwise
    on_graph = vd.Calibration(graph + direct, graph_key, "recorded")
    assert len(on_graph.controls) == 60 and on_graph.other_caliber == 5
    on_direct = vd.Calibration(graph, relu_key, "recorded")
    j = on_direct.judge(50.0, 0.05)
    assert j["verdict"] == "UNCLEAR" and "caliber and timing (a shape on the direct fallback timer)" in j["reason"]
    assert "(60 measured with another caliber or timing)" in j["reason"]
