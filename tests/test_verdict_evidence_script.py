"""benchmarks/verdict_evidence.py on the batch stub: two A/A screens and a switch screen of the
same nodes (or, with --held-out nodes and --retune-ops, one A/A screen, the switch screen and a
side-C screen of one node), a known slowdown planted on two nodes under the switch only, a
deterministic per-side jitter as A/A noise; the report's figures checked against the rule
recomputed here from the run.logs the batches wrote."""

import json
import subprocess
import sys
from statistics import median

import pytest

from harness.runner import REPO_ROOT, base_env
from test_batch import STUB
from zl.report import verdicts as vd
from zl.runlog.parse import read_run_log

TOOL = REPO_ROOT / "benchmarks" / "verdict_evidence.py"
NODES = ["abs", "amax", "exp", "pad", "relu", "softmax"]
PLANTED = {"relu", "softmax"}   # B 30 % slower under the switch; softmax's re-tune wins it back
F = 0.2


def run(tmp_path, *args):
    e = base_env(tmp_path, ZL_RUN_PYTEST=str(STUB), ZL_STUB_STATE=str(tmp_path), ZL_RUNS_ROOT=str(tmp_path / "runs"),
                 ZL_STUB_SWITCH="DISABLE_LLVM_OPT", ZL_STUB_BINARY="1", ZL_STUB_JITTER="0.01",
                 ZL_STUB_IR_MAP="abs=same,amax=same,exp=same,pad=same", ZL_STUB_B_SCALE="relu=1.3,softmax=1.3",
                 ZL_STUB_C_SCALE="softmax=1.02", ZL_STUB_PICKS="softmax=other")
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], env=e, capture_output=True, text=True,
                          timeout=300)


def deltas(bd):
    """{node: [(side A latency ms, speedup %)]} of a screen batch, from its run.logs."""
    out = {}
    for n in NODES:
        a, b = (read_run_log(bd / side / "main" / n) for side in ("before", "after"))
        la = {r.size_detail: r.gems_lat for r in a.success_rows()}
        out[n] = [(la[r.size_detail], (la[r.size_detail] / r.gems_lat - 1) * 100) for r in b.success_rows()]
    return out


def judged(pool, node, lat, pct):
    """|pct| over the threshold of lat's class among the A/A deltas of `pool` but `node`'s own."""
    cls = vd.latency_class(lat)
    vals = [p for (src, n), shapes in pool.items() if (src, n) != node for l, p in shapes
            if vd.latency_class(l) == cls]
    return abs(pct) > vd.threshold(vals, F)[0]


def test_the_report_matches_the_rule_recomputed_from_the_batches(tmp_path):
    out = tmp_path / "ve"
    r = run(tmp_path, "--ops", *NODES, "--devices", "0", "--false-alarm", F, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((out / "verdict_evidence.json").read_text())
    aa1, aa2, sw = (deltas(out / s) for s in ("aa1", "aa2", "switch"))
    assert any(p != 0 for shapes in aa2.values() for _, p in shapes)   # the jitter is A/A noise
    # (a) aa2 judged by aa1 and aa2's other cells (each of them an every-level A/A)
    pool = {**{("aa1", n): v for n, v in aa1.items()}, **{("aa2", n): v for n, v in aa2.items()}}
    alarms = sum(judged(pool, ("aa2", n), lat, p) for n, v in aa2.items() for lat, p in v)
    fa = rep["false_alarm"]
    assert (fa["shapes"], fa["decided"], fa["false_alarms"]) == (12, 12, alarms)
    assert (fa["held_out"], fa["screen"], rep["retune_ops"]) == ("aa2", "aa2", [])
    assert fa["share"] == alarms / 12 and fa["within_bound"] == (alarms / 12 <= F) and fa["bound"] == F
    assert fa["aa_cells_only"]["false_alarms"] == alarms
    assert fa["controls"] == 24 and not fa["rejected_controls"]   # aa1's 12 shapes and aa2's 12
    assert sum(c["false_alarms"] for c in fa["per_class"].values()) == alarms and len(fa["per_class"]) == 2
    # (b) SLOWER nodes: the planted ones, plus any unplanted node the rule reads SLOWER by chance
    pool = {**{("aa1", n): v for n, v in aa1.items()},
            **{("switch", n): v for n, v in sw.items() if n not in PLANTED}}
    chance = {n for n, v in sw.items() if n not in PLANTED
              for lat, p in v if p < 0 and judged(pool, ("switch", n), lat, p)}
    b = rep["switch"]
    assert set(b["slower_nodes"]) == PLANTED | chance and b["exceeds_noise_nodes"] == sorted(PLANTED)
    assert b["symmetric_difference"] == sorted(chance) and b["agree"] == (not chance)
    thr = {}
    for cls in (0, 1):
        thr[cls] = vd.threshold([p for v in aa1.values() for l, p in v if vd.latency_class(l) == cls], F)[0]
    for n, v in sw.items():
        node = b["nodes"][n]
        assert node["noise_pct"] == pytest.approx(median(thr[vd.latency_class(l)] for l, _ in v))
        assert node["median_slowdown_pct"] == pytest.approx(median(-p for _, p in v))
    assert b["counts"]["SLOWER"] >= 4
    assert b["slower_shapes_off_median"] == sum(b["nodes"][n]["slower_shapes"] for n in chance)
    # the pace of the three screens run here: every node's two sides ended, all finished
    assert sorted(rep["pace"]) == ["aa1", "aa2", "switch"]
    for st, p in rep["pace"].items():
        walls = json.loads((out / f"walls-{st}.json").read_text())
        assert (p["side_runs"], p["nodes_finished"], p["overlap"]) == (12, 6, 1)
        assert p["wall_s"] == round(sum(walls), 3) and p["side_runs_per_hour"] == round(12 / p["wall_s"] * 3600, 1)
    assert "| switch | 1 | " in r.stdout
    # (c) relu stays slow after re-tuning; softmax's re-tune (another pick) wins the slowdown back
    c = rep["retune"]
    assert "softmax" in c["split_nodes"] and c["picks"]["other"] == 1
    relu, soft = c["nodes"]["relu"], c["nodes"]["softmax"]
    assert soft["c_picks"] == {"same": 1, "other": 1, "only_a": 0, "only_c": 0, "neither": 0}
    assert soft["a_vs_b_median_pct"] == pytest.approx(-100 * 0.3 / 1.3, abs=2.5)
    assert soft["a_vs_c_median_pct"] == pytest.approx(-100 * 0.02 / 1.02, abs=2.5)
    assert relu["a_vs_c_median_pct"] == pytest.approx(relu["a_vs_b_median_pct"], abs=2.5)
    assert soft["retune_minus_codegen_pct"] == pytest.approx(soft["a_vs_c_median_pct"] - soft["a_vs_b_median_pct"])
    assert "## (a) false alarms on aa2 (--held-out aa2:" in r.stdout and "| softmax | PASS |" in r.stdout
    assert (out / "switch" / "retuned" / "main" / "relu").is_dir() and c["stage"] == "switch"
    # called again: every stage resumes, nothing reruns; the walls add up
    r = run(tmp_path, "--ops", *NODES, "--devices", "0", "--false-alarm", F, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6 reused, 0 to run" in (out / "console-switch.log").read_text().split("[batch] backend=")[-1]
    assert len(json.loads((out / "walls-aa2.json").read_text())) == 2
    again = json.loads((out / "verdict_evidence.json").read_text())
    assert again["false_alarm"] == rep["false_alarm"] and again["switch"] == rep["switch"]
    # the report of a moved bundle, running nothing: the same figures
    moved = tmp_path / "bundle"
    out.rename(moved)
    r = run(tmp_path, "--report-only", "--false-alarm", F, "--out", moved)
    assert r.returncode == 0, r.stdout + r.stderr
    redo = json.loads((moved / "verdict_evidence.json").read_text())
    assert redo["nodes"] == NODES and redo["aa1"] == str(moved / "aa1") and redo["rc"] == {}
    assert redo["false_alarm"] == rep["false_alarm"] and redo["switch"] == rep["switch"]
    assert redo["retune"] == again["retune"] and redo["walls_s"] == again["walls_s"]
    # another node set on the same folder; --aa1 that is not an A/A screen (the switch stage)
    r = run(tmp_path, "--ops", "relu", "--out", moved)
    assert r.returncode == 2 and "holds another node set or switch" in r.stderr
    r = run(tmp_path, "--ops", "relu", "--aa1", moved / "switch", "--out", tmp_path / "x")
    assert r.returncode == 2 and "not an A/A screen batch" in r.stderr


def test_held_out_nodes_and_retune_ops_drop_aa2_and_side_c_of_the_others(tmp_path):
    out = tmp_path / "ve"
    args = ("--ops", *NODES, "--devices", "0", "--false-alarm", F, "--held-out", "nodes", "--retune-ops", "softmax")
    r = run(tmp_path, *args, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((out / "verdict_evidence.json").read_text())
    saved = json.loads((out / "verdict_evidence.args.json").read_text())
    assert (saved["held_out"], saved["retune_ops"]) == ("nodes", ["softmax"])
    assert not (out / "aa2").exists() and sorted(rep["walls_s"]) == ["aa1", "retune", "switch"]
    # (a) each aa1 node judged by the threshold of aa1's other nodes' A/A shapes, every shape of
    # its own pair left out
    aa1 = deltas(out / "aa1")
    pool = {("aa1", n): v for n, v in aa1.items()}
    alarms = sum(judged(pool, ("aa1", n), lat, p) for n, v in aa1.items() for lat, p in v)
    fa = rep["false_alarm"]
    assert (fa["held_out"], fa["screen"]) == ("nodes", "aa1") and "its own pair left out" in fa["controls_text"]
    assert (fa["shapes"], fa["decided"], fa["false_alarms"]) == (12, 12, alarms) and fa["share"] == alarms / 12
    assert fa["controls"] == 12 and sum(c["false_alarms"] for c in fa["per_class"].values()) == alarms
    assert ("## (a) false alarms on aa1 (--held-out nodes: each node of aa1 judged against aa1's other A/A "
            "nodes, its own pair left out") in r.stdout
    # (b) as without the options; (c) side C of softmax only, from the retune stage
    assert rep["switch"]["exceeds_noise_nodes"] == sorted(PLANTED)
    assert not (out / "switch" / "retuned").exists()
    assert [d.name for d in (out / "retune" / "retuned" / "main").iterdir()] == ["softmax"]
    c = rep["retune"]
    assert c["stage"] == "retune" and list(c["nodes"]) == ["softmax"] and c["picks"]["other"] == 1
    assert c["nodes"]["softmax"]["a_vs_b_median_pct"] == pytest.approx(-100 * 0.3 / 1.3, abs=2.5)
    assert c["nodes"]["softmax"]["a_vs_c_median_pct"] == pytest.approx(-100 * 0.02 / 1.02, abs=2.5)
    assert "## (c) codegen (A vs B) vs after re-tuning (A vs C), stage retune" in r.stdout
    # the report of the folder, running nothing, needs no aa2 screen
    r = run(tmp_path, "--report-only", "--false-alarm", F, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    redo = json.loads((out / "verdict_evidence.json").read_text())
    assert redo["false_alarm"] == rep["false_alarm"] and redo["retune"] == rep["retune"]
    # (a) alone, of the A/A screen only, into an empty folder: the same figures, (b) and (c) unmeasured
    only = tmp_path / "aa_only"
    r = run(tmp_path, "--report-only", "--held-out", "nodes", "--aa1", out / "aa1", "--false-alarm", F, "--out", only)
    assert r.returncode == 0, r.stdout + r.stderr
    alone = json.loads((only / "verdict_evidence.json").read_text())
    assert alone["false_alarm"] == rep["false_alarm"] and alone["nodes"] == sorted(NODES)
    assert "not measured" in alone["switch"]["note"] and "not measured" in alone["retune"]["note"]
    assert "not measured: --report-only of (a) alone" in r.stdout and not (only / "aa1").exists()
    # the same folder with another --held-out (also left out: the default aa2) or other --retune-ops
    for other in (("--held-out", "aa2", "--retune-ops", "softmax"), ("--retune-ops", "softmax")):
        r = run(tmp_path, "--ops", *NODES, *other, "--out", out)
        assert r.returncode == 2 and "holds another --held-out (nodes" in r.stderr, r.stderr
    r = run(tmp_path, "--ops", *NODES, "--held-out", "nodes", "--retune-ops", "relu", "--out", out)
    assert r.returncode == 2 and "holds other --retune-ops (softmax" in r.stderr, r.stderr
    r = run(tmp_path, "--ops", *NODES, "--held-out", "nodes", "--out", out)
    assert r.returncode == 2 and "holds other --retune-ops (softmax" in r.stderr, r.stderr
    r = run(tmp_path, "--report-only", "--held-out", "aa2", "--out", out)
    assert r.returncode == 2 and "holds another --held-out (nodes" in r.stderr, r.stderr
    assert json.loads((out / "verdict_evidence.args.json").read_text()) == saved and not (out / "aa2").exists()


def test_bad_arguments_exit_2(tmp_path):
    r = run(tmp_path, "--ops", "relu", "--false-alarm", "0.7", "--out", tmp_path / "o")
    assert r.returncode == 2 and "--false-alarm must be in (0, 0.5]" in r.stderr
    r = run(tmp_path, "--ops", "relu", "--overlap", "0", "--out", tmp_path / "o")
    assert r.returncode == 2 and "--overlap must be >= 1" in r.stderr
    r = run(tmp_path, "--out", tmp_path / "o")
    assert r.returncode == 2 and "no nodes" in r.stderr
    r = run(tmp_path, "--report-only", "--out", tmp_path / "o")
    assert r.returncode == 2 and "holds no aa2 and switch screens" in r.stderr
    r = run(tmp_path, "--ops", "relu", "abs", "--retune-ops", "relu", "mm", "--out", tmp_path / "o")
    assert r.returncode == 2 and "--retune-ops mm: not among the 2 node(s): relu abs" in r.stderr
    r = run(tmp_path, "--ops", "relu", "--held-out", "aa3", "--out", tmp_path / "o")
    assert r.returncode == 2 and "--held-out: invalid choice" in r.stderr
    assert not (tmp_path / "o").exists()
    assert "--aa1" in run(tmp_path, "--help").stdout


def load_tool():
    import importlib.util
    spec = importlib.util.spec_from_file_location("verdict_evidence", TOOL)
    tool = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(TOOL.parent))
    try:
        spec.loader.exec_module(tool)
    finally:
        sys.path.remove(str(TOOL.parent))
    return tool


def shape(lat_ms, speedup, verdict, cls="< 10 us"):
    return {"before_lat": lat_ms, "speedup_pct": speedup, "aa_verdict": verdict, "latency_class": cls}


def test_shapes_below_the_floor_have_no_noise_and_one_slower_shape_is_counted_beside_the_bound():
    """(b) on a recorded-shaped document: a view with no kernel (every shape below 1 us, as
    unbind measured on the H100) is undetermined and in neither set; a node with one sub-1 us
    shape is judged on its other shapes; a node with one SLOWER shape of three stays under
    its median and is counted beside the rule's allowance."""
    tool = load_tool()
    aa1 = {"verdicts": {"rule": {"classes": [{"class": "< 10 us", "threshold_pct": 5.0},
                                             {"class": "10-100 us", "threshold_pct": 4.0}]}}}
    ops = [("view", "NO_TRITON", [shape(1e-6, -50.0, "UNCLEAR"), shape(2e-6, 75.0, "UNCLEAR")]),
           ("fill", "IR_CHANGED@llir", [shape(1e-6, -90.0, "UNCLEAR"), shape(0.004, -1.0, "SAME"),
                                        shape(0.02, -0.5, "SAME", "10-100 us")]),
           ("slow", "IR_CHANGED@llir", [shape(0.004, -9.0, "SLOWER"), shape(0.005, -8.0, "SLOWER"),
                                        shape(0.006, -2.0, "SAME")]),
           ("one", "IR_CHANGED@llir", [shape(0.03, -7.0, "SLOWER", "10-100 us"), shape(0.004, 0.5, "SAME"),
                                       shape(0.005, -0.2, "SAME")])]
    doc = {"ops": [{"op": n, "dirs": {"before": f"/b/before/main/{n}"}, "verdict": v, "shapes": sh}
                   for n, v, sh in ops],
           "verdicts": {"summary": {"counts": {"SLOWER": 3}, "expected_false_verdicts": 0.45}}}
    b = tool.switch_part(doc, aa1)
    view, fill, slow, one = (b["nodes"][n] for n in ("view", "fill", "slow", "one"))
    assert view["median_slowdown_pct"] is None and view["noise_pct"] is None and view["exceeds_noise"] is None
    assert fill["median_slowdown_pct"] == pytest.approx(0.75) and fill["noise_pct"] == pytest.approx(4.5)
    assert slow["median_slowdown_pct"] == pytest.approx(8.0) and slow["exceeds_noise"] is True
    assert one["median_slowdown_pct"] == pytest.approx(0.2) and one["exceeds_noise"] is False
    assert (b["undetermined"], b["exceeds_noise_nodes"], b["slower_nodes"]) == (["view"], ["slow"], ["one", "slow"])
    assert b["slower_shapes_off_median"] == 1 and b["agree"] is False
    doc["ops"] = doc["ops"][:3]   # without "one": the view is in neither set, so they agree
    assert tool.switch_part(doc, aa1)["agree"] is True


def test_a_node_in_one_set_only_is_checked_against_the_retune_stages_own_pair():
    """(b): a node with SLOWER shapes under a median within the noise (linear on the H100: its
    two small shapes -28.9 % and -24.7 %) is looked up in the retune stage's A vs B, another
    sitting of the same switch; each SLOWER shape reads its verdict there. Nodes in both sets,
    nodes the retune stage did not run, and a report without a retune stage get nothing."""
    tool = load_tool()
    aa1 = {"verdicts": {"rule": {"classes": [{"class": "< 10 us", "threshold_pct": 5.0}]}}}

    def sh(size, speedup, verdict):
        return {**shape(0.004, speedup, verdict), "dtype": "torch.float16", "size_detail": size, "occurrence": 0}

    def doc(ops):
        return {"ops": [{"op": n, "dirs": {"before": f"/b/before/main/{n}"}, "verdict": "IR_CHANGED@llir",
                         "shapes": s} for n, s in ops],
                "verdicts": {"summary": {"counts": {}, "expected_false_verdicts": 0.3}}}

    sw = doc([("lin", [sh("384", -28.9, "SLOWER"), sh("1024", -24.7, "SLOWER"), sh("4096", -0.1, "SAME"),
                       sh("2048", 0.2, "SAME"), sh("8192", 0.1, "SAME")]),
              ("mv", [sh("256", -20.0, "SLOWER"), sh("64", 0.1, "SAME"), sh("1024", 0.2, "SAME")]),
              ("slow", [sh("1", -9.0, "SLOWER"), sh("2", -8.0, "SLOWER")])])
    rt = doc([("lin", [sh("384", -28.5, "SLOWER"), sh("1024", -3.0, "SAME"), sh("4096", 0.9, "SAME")]),
              ("slow", [sh("1", -9.0, "SLOWER")])])
    b = tool.switch_part(sw, aa1)
    assert b["symmetric_difference"] == ["lin", "mv"]
    again = tool.checked_again(b, sw, rt)
    assert list(again) == ["lin"]   # mv was not run again; slow is in both sets
    assert [(x["shape"], x["again_verdict"], x["again_pct"]) for x in again["lin"]] == \
        [("384", "SLOWER", -28.5), ("1024", "SAME", -3.0)]
    rt["ops"][0]["shapes"] = rt["ops"][0]["shapes"][2:]   # a shape the second pair lacks
    assert [x["again_verdict"] for x in tool.checked_again(b, sw, rt)["lin"]] == ["not measured"] * 2
    assert tool.checked_again(b, sw, sw) == {} and tool.checked_again(b, sw, None) == {}
