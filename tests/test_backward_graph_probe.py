"""benchmarks/backward_graph_probe.py --compare: the between-run table (no GPU)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "backward_graph_probe.py"


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _row(shape, variant, ms, n_repeat=100, pool_mb=10.0, capture=0):
    return {"estimate_ms": 0.1, "n_repeat": n_repeat, "capture_s": 0.5, "pool_mb": pool_mb,
            "ms_median": ms, "ms_spread_pct": 0.1, "shape": shape, "variant": variant,
            "capture": capture}


def _compare(*paths):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--compare", *map(str, paths)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return {tuple(c.strip() for c in line.strip("|").split("|")[:2]): [c.strip() for c in line.strip("|").split("|")]
            for line in proc.stdout.splitlines()[2:]}


def test_between_run_delta_uses_the_median_capture_and_within_run_the_worst_run(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write(a, [_row("64x64", "autograd_side", ms, n_repeat=n, pool_mb=p, capture=k)
               for k, (ms, n, p) in enumerate([(0.004, 2000, 50.0), (0.005, 2200, 80.0),
                                               (0.0042, 2100, 60.0)])]
           + [_row("64x64", "aten_direct", 0.002)])
    _write(b, [_row("64x64", "autograd_side", ms, capture=k)
               for k, ms in enumerate([0.0050, 0.0051, 0.0049])]
           + [_row("64x64", "aten_direct", 0.002)])
    table = _compare(a, b)
    side = table[("autograd_side", "64x64")]
    # medians 4.2 us -> 5.0 us: +19.05 %; run 1's captures spread 0.004..0.005: 25 %
    assert side[5:9] == ["4.20", "5.00", "25.00", "+19.05"]
    assert side[2] == "2100/100" and side[3] == "80"
    assert table[("aten_direct", "64x64")][8] == "+0.00"


def test_a_key_missing_from_one_run_is_left_out(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write(a, [_row("64x64", "aten_direct", 0.002), _row("8x8", "aten_direct", 0.001)])
    _write(b, [_row("64x64", "aten_direct", 0.002)])
    assert set(_compare(a, b)) == {("aten_direct", "64x64")}


def test_a_compare_file_that_is_no_probe_output_exits_2_named(tmp_path):
    good = tmp_path / "good.jsonl"
    _write(good, [_row("64x64", "aten_direct", 0.002)])
    (tmp_path / "list.jsonl").write_text("[1]\n")
    (tmp_path / "cut.jsonl").write_text('{"shape": "64x64"\n')
    (tmp_path / "fields.jsonl").write_text('{"shape": "64x64"}\n')
    for name, says in (("none.jsonl", "No such file"), ("list.jsonl", "no capture record"),
                       ("cut.jsonl", "cut.jsonl:1: not JSON"), ("fields.jsonl", "fields.jsonl:1: not a capture record")):
        proc = subprocess.run([sys.executable, str(SCRIPT), "--compare", str(good), str(tmp_path / name)],
                              capture_output=True, text=True)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, (name, proc.stderr)
