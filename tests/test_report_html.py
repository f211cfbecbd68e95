"""batch_summary.py --html / --png: one self-contained page per result type, built from
committed real H200 logs (tests/harness/report_fixtures.py).

Each page must parse, name every shape it reports, carry a chart, fetch nothing from a
URL, and show only numbers that are also in --json (the page is a view of that dict).
"""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

import batch_summary as bs
from harness import report_fixtures as rf
from zl.report.views import shape_label

NUM_RE = re.compile(r"[-+]?\d+\.\d+")


class PageParser(HTMLParser):
    """Text outside <svg>/<script>/<style>, every src/href, and tag counts."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text, self.links, self.tags, self.svg_text = [], [], {}, []
        self._skip = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "action", "data") and v:
                self.links.append(v)
        if tag in ("svg", "script", "style"):
            self._skip.append(tag)

    def handle_endtag(self, tag):
        if self._skip and self._skip[-1] == tag:
            self._skip.pop()

    def handle_data(self, data):
        (self.svg_text if self._skip else self.text).append(data)


def parse_page(path: Path) -> PageParser:
    p = PageParser()
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    return p


def _json_values(obj, nums, strs):
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        nums.append(float(obj))
    elif isinstance(obj, str):
        strs.append(obj)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            strs.append(str(k))
            _json_values(v, nums, strs)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _json_values(v, nums, strs)


def assert_page(html: Path, js: Path, names=()):
    p = parse_page(html)
    text = " ".join(p.text)
    raw = html.read_text(encoding="utf-8")
    assert p.tags.get("svg", 0) >= 1, "no chart on the page"
    assert not [u for u in p.links if re.match(r"(?i)\s*(https?:)?//", u)], p.links
    assert not re.search(r"(?i)url\(\s*['\"]?(https?:)?//", raw) and "@import" not in raw
    assert "<link" not in raw and "<img src=\"http" not in raw
    for name in names:
        assert name in text, f"page does not name {name!r}"
    # Every decimal number shown outside the charts is a --json number (rounded as shown)
    # or part of a --json string (paths, versions).
    nums, strs = [], []
    _json_values(json.loads(js.read_text()), nums, strs)
    joined = "\n".join(strs)
    for tok in set(NUM_RE.findall(text)):
        if tok.lstrip("+-") in joined:
            continue
        places = len(tok.split(".")[1])
        v = float(tok)
        assert any(math.isclose(round(n, places), v, abs_tol=0.6 * 10 ** -places) for n in nums), \
            f"{tok} is on the page but in no --json value"
    return p, text


def run_bs(*argv) -> int:
    return bs.main([str(a) for a in argv])


def test_ab_page(tmp_path, capsys):
    runs = rf.ab_pair(tmp_path / "ab")
    html, js, png = tmp_path / "ab.html", tmp_path / "ab.json", tmp_path / "png"
    assert run_bs("--ab", runs["before"], runs["after"], "--json", js, "--html", html, "--png", png) == 0
    d = json.loads(js.read_text())
    assert d["identities"]["before"]["timer"] == "cuda_graph" and d["demo"] is None
    assert len(d["paired"]) == 5
    p, text = assert_page(html, js, [shape_label(x) for x in d["paired"]])
    assert "CPU DEMO" not in text and "autotune_mode" in text
    raw = html.read_text()
    # the order a reviewer decides in: results check, verdict counts, chart, per-shape
    # verdicts; the caliber table folds below them (a <details> element)
    order = [raw.index(x) for x in ('id="results-verdict"', 'id="verdict-counts"', "<svg",
                                    "<h2>Shapes</h2>", '<details id="caliber-table">')]
    assert order == sorted(order)
    assert "Caliber (run_identity.json)" in raw[order[-1]:]
    assert d["paired"][0]["aa_verdict"] == "UNCLEAR" and "no A/A control" in text
    assert sorted(x.name for x in png.iterdir()) == ["ab_speedup.png"]
    # bars are ordered by size inside a dtype: [64, 64] before [1048576] before [4096, 4096]
    i = [text.index(s) for s in ("[torch.Size([64, 64]), 1]", "[torch.Size([1048576])]",
                                  "[torch.Size([4096, 4096]), 1]")]
    assert i == sorted(i)


def test_ab_page_caliber_warning_red_at_top_and_mismatch_flag(tmp_path, capsys):
    runs = rf.ab_pair(tmp_path / "ab", timer="direct")
    log = (runs["after"] / "run.log").read_text()
    # drop side B's first shape row: a result present on one side only
    row = next(line for line in log.splitlines() if "torch.Size([64, 64])" in line and line.startswith("SUCCESS"))
    (runs["after"] / "run.log").write_text(log.replace(row + "\n", ""))
    html, js = tmp_path / "ab.html", tmp_path / "ab.json"
    assert run_bs("--ab", runs["before"], runs["after"], "--html", html, "--json", js) == 4
    assert not html.exists(), "a refused comparison must not produce a page"
    assert run_bs("--ab", runs["before"], runs["after"], "--html", html, "--json", js,
                  "--allow-caliber-mismatch") == 0
    raw = html.read_text()
    warn = raw.index('<div class="warn">[caliber] timer differs')
    assert warn < raw.index("<svg") and warn < raw.index("<h2>")
    assert "result mismatch: torch.float16 [torch.Size([64, 64]), 1]: only in before" in raw
    d = json.loads(js.read_text())
    assert any("timer differs" in x for x in d["caliber_problems"])
    assert_page(html, js, [shape_label(x) for x in d["paired"]])


def test_the_h200_rounds_archive_is_packed_deterministically(tmp_path):
    """rounds.tar.xz: the 12 round files with sorted names, mtime 0, uid/gid 0, mode 0644;
    pack_rounds run twice on its own members gives the same bytes and the same members."""
    import tarfile
    with tarfile.open(rf.ROUNDS_ARCHIVE, "r:xz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and len(rf.rounds_names(rf.SOFTMAX_ROUNDS)) == 10
    assert rf.rounds_names(rf.RELU_ROUNDS) == ["relu_rounds/r1_A.run.log", "relu_rounds/r1_B.run.log"]
    assert {(m.isfile(), m.mtime, m.uid, m.gid, m.mode) for m in members} == {(True, 0, 0, 0, 0o644)}
    for name in names:
        rf.rounds_file(name, tmp_path / "src" / name)
    rf.pack_rounds(tmp_path / "src", tmp_path / "a.tar.xz")
    rf.pack_rounds(tmp_path / "src", tmp_path / "b.tar.xz")
    assert (tmp_path / "a.tar.xz").read_bytes() == (tmp_path / "b.tar.xz").read_bytes()
    with tarfile.open(tmp_path / "a.tar.xz", "r:xz") as tar:
        assert {m.name: tar.extractfile(m).read() for m in tar.getmembers()} == rf._rounds()


def test_rounds_page(tmp_path, capsys):
    root = rf.rounds_root(tmp_path / "rounds")
    html, js, png = tmp_path / "r.html", tmp_path / "r.json", tmp_path / "png"
    assert run_bs("--ab-rounds", root, "--label", "softmax", "--json", js, "--html", html, "--png", png) == 0
    d = json.loads(js.read_text())
    assert d["rounds"] == 4 and len(d["shapes"]) == 5
    assert d["noise_band_pct"] == [-d["median_side_noise_pct"], d["median_side_noise_pct"]]
    # ab_repeat.sh's layout: the campaign's telemetry.tsv is one level above the op's root
    assert len(d["telemetry"]["rows"]) == 109
    assert d["telemetry"]["path"] == str(root.parent / "telemetry.tsv")
    p, text = assert_page(html, js, [shape_label(x) for x in d["shapes"]])
    unstable = [s for s in d["shapes"] if not s["sign_stable"]]
    assert unstable and all(s["flags"] == ["unstable sign"] for s in unstable)
    assert "unstable sign" in text and "95% CI" in text
    # the rank test's own faster/slower weighs the pair's own side noise, no A/A control: the
    # page shows its p, never its word (console and --json keep it)
    assert {s["verdict"] for s in d["shapes"]} >= {"slower", "faster"}
    assert not re.search(r"\b(slower|faster|no detectable difference)\b", text)
    assert "rank test p" in text and "0.029" in text
    assert p.tags["svg"] >= 3   # speedup bars, latency per round, telemetry
    assert sorted(x.name for x in png.iterdir()) == ["rounds_latency.png", "rounds_speedup.png", "telemetry.png"]


@pytest.mark.parametrize("layout", ["no_telemetry", "parent_not_a_campaign"])
def test_rounds_page_without_telemetry_has_no_telemetry_chart(tmp_path, capsys, layout):
    root = rf.rounds_root(tmp_path / "rounds", telemetry=layout != "no_telemetry")
    if layout == "parent_not_a_campaign":
        (root.parent / "status.tsv").unlink()   # a telemetry.tsv of something else
    html, js = tmp_path / "r.html", tmp_path / "r.json"
    assert run_bs("--ab-rounds", root, "--json", js, "--html", html) == 0
    assert json.loads(js.read_text())["telemetry"] is None
    assert "chart-telemetry" not in html.read_text()


def test_rounds_telemetry_in_the_root_itself(tmp_path, capsys):
    root = rf.rounds_root(tmp_path / "rounds", telemetry=False)
    (tmp_path / "rounds" / "status.tsv").unlink()
    rf.rounds_file(f"{rf.SOFTMAX_ROUNDS}/telemetry.tsv", root / "telemetry.tsv")
    js = tmp_path / "r.json"
    assert run_bs("--ab-rounds", root, "--json", js) == 0
    assert json.loads(js.read_text())["telemetry"]["path"] == str(root / "telemetry.tsv")


def test_screen_page(tmp_path, capsys):
    root = rf.screen_root(tmp_path / "screen")
    html, js = tmp_path / "s.html", tmp_path / "s.json"
    assert run_bs("--screen", root, "--json", js, "--html", html) == 0
    d = json.loads(js.read_text())
    by = {o["op"]: o for o in d["ops"]}
    assert by["softmax"]["paired"] == 5 and by["relu"]["paired"] == 5
    assert by["abs"]["note"] == "run directories not found"
    # softmax is NO_IR_DIFF: its range is the noise band
    assert d["noise_band_pct"] == [by["softmax"]["min_pct"], by["softmax"]["max_pct"]]
    p, text = assert_page(html, js, ["softmax", "relu", "abs", "IR_CHANGED", "NO_IR_DIFF"])
    assert 'class="sortable"' in html.read_text()


def test_screen_of_cells_from_two_gpu_models_says_mixed_hardware(tmp_path, capsys):
    """A screen whose cells ran on two models (a batch resumed on another GPU) says so on the
    terminal, in --json and on the page, as --batch does; one model says nothing."""
    root = rf.screen_root(tmp_path / "screen")
    html, js = tmp_path / "s.html", tmp_path / "s.json"
    assert run_bs("--screen", root, "--json", js) == 0
    d = json.loads(js.read_text())
    assert d["mixed_hardware"] is False and d["timing_warning"] is None
    assert "MIXED HARDWARE" not in capsys.readouterr().out
    for side in ("before", "after"):   # the relu cell measured on an H100, softmax on the H200
        ident = root / f"relu@float16_{side}" / "run_identity.json"
        ident.write_text(json.dumps(dict(json.loads(ident.read_text()), device_name="NVIDIA H100")))
    assert run_bs("--screen", root, "--json", js, "--html", html) == 0
    warning = ("MIXED HARDWARE: cells measured on NVIDIA H100 (arch 9.0), NVIDIA H200 (arch 9.0); compare "
               "latencies and speedups only within one device name/arch (each cell names its own)")
    assert f"!!! [screen] {warning}" in capsys.readouterr().out
    d = json.loads(js.read_text())
    assert d["mixed_hardware"] is True and d["timing_warning"] == warning
    p, text = assert_page(html, js, ["MIXED HARDWARE: cells measured on NVIDIA H100"])
    assert 'id="mixed-hardware"' in html.read_text()


def test_variants_differ_is_shown_verbatim_and_kept_out_of_the_noise_band(tmp_path, capsys):
    """VARIANTS_DIFFER: common code identical, but a side may have timed a
    specialisation the other never ran, so its range is not the A/A noise band."""
    root = rf.screen_root(tmp_path / "screen")
    tsv = root / "screen.tsv"
    lines = tsv.read_text().splitlines()
    assert lines[2].startswith("relu\t")
    lines[2] = lines[2].replace("\tIR_CHANGED\t", "\tVARIANTS_DIFFER\t")
    tsv.write_text("\n".join(lines) + "\n")
    html, js = tmp_path / "s.html", tmp_path / "s.json"
    assert run_bs("--screen", root, "--json", js, "--html", html) == 0
    d = json.loads(js.read_text())
    by = {o["op"]: o for o in d["ops"]}
    assert by["relu"]["verdict"] == "VARIANTS_DIFFER" and by["relu"]["paired"] == 5
    assert d["noise_band_pct"] == [by["softmax"]["min_pct"], by["softmax"]["max_pct"]]
    assert_page(html, js, ["VARIANTS_DIFFER", "NO_IR_DIFF"])


def test_ab_inside_a_screen_root_takes_its_noise_band(tmp_path, capsys):
    root = rf.screen_root(tmp_path / "screen")
    js, html = tmp_path / "ab.json", tmp_path / "ab.html"
    assert run_bs("--ab", root / "relu@float16_before", root / "relu@float16_after", "--json", js,
                  "--html", html) == 0
    d = json.loads(js.read_text())
    sj = tmp_path / "s.json"
    assert run_bs("--screen", root, "--json", sj) == 0
    band = json.loads(sj.read_text())["noise_band_pct"]
    assert band and d["noise_band_pct"] == band and "A/A operators of the screen" in d["noise_source"]
    assert d["code"]["verdict"] == "IR_CHANGED@llir" and not d["code"]["identical_everywhere"]
    assert "A/A noise band" in html.read_text()   # the chart's legend


def test_screen_failures_grouped_by_reason(tmp_path, capsys):
    root = rf.screen_root(tmp_path / "screen")
    tsv = root / "screen.tsv"
    lines = tsv.read_text().splitlines()
    # relu timed out on side B, abs measured nothing: two groups
    lines[2] = lines[2].replace("\t0\t0\tIR_CHANGED", "\t0\t124\tIR_CHANGED")
    lines[3] = lines[3].replace("\t0\t0\tIR_CHANGED", "\t0\t1\tNO_ROWS")
    tsv.write_text("\n".join(lines) + "\n")
    html, js = tmp_path / "s.html", tmp_path / "s.json"
    assert run_bs("--screen", root, "--json", js, "--html", html) == 0
    d = json.loads(js.read_text())
    assert {g["reason"]: g["ops"] for g in d["failures"]} == {
        "CELL_TIMEOUT": ["relu@float16"], "NO_ROWS (rc 0/1)": ["abs@float16"]}
    text = " ".join(parse_page(html).text)
    assert "CELL_TIMEOUT" in text and "NO_ROWS (rc 0/1)" in text


def test_batch_page(tmp_path, capsys):
    root = rf.batch_dir(tmp_path / "batch")
    html, js, png = tmp_path / "b.html", tmp_path / "b.json", tmp_path / "png"
    assert run_bs("--batch", root, "--json", js, "--html", html, "--png", png) == 0
    d = json.loads(js.read_text())
    by = {o["op"]: o for o in d["ops"]}
    # median of the log's nine Gems Speedup values (1.609 ... 13.270)
    assert by["softmax_folded"]["median_speedup"] == pytest.approx(2.372)
    assert [g["ops"] for g in d["failures"]] == [["gelu_backward_cudagraph"]]
    assert "CUDA error" in d["failures"][0]["reason"]
    assert_page(html, js, list(by))
    assert (png / "batch_hist.png").stat().st_size > 1000


def test_demo_identity_puts_the_banner_first(tmp_path, capsys):
    runs = rf.ab_pair(tmp_path / "ab")
    for side in runs.values():
        ident = json.loads((side / "run_identity.json").read_text())
        (side / "run_identity.json").write_text(json.dumps({**ident, "demo": "cpu-interpreter"}))
    html, js = tmp_path / "ab.html", tmp_path / "ab.json"
    assert run_bs("--ab", runs["before"], runs["after"], "--json", js, "--html", html) == 0
    assert json.loads(js.read_text())["demo"] == "cpu-interpreter"
    raw = html.read_text()
    assert raw.index('id="demo-banner"') < raw.index("<svg")
    assert "numbers mean nothing" in raw


@pytest.mark.parametrize("argv, msg", [
    (["--html", "x.html", "somedir"], "--html/--png go with"),
    (["--screen", "."], "no screen.tsv"),
])
def test_bad_input_exit_2(tmp_path, capsys, argv, msg):
    assert run_bs(*argv) == 2
    assert msg in capsys.readouterr().err


def test_screen_without_verdict_column_exit_2(tmp_path, capsys):
    (tmp_path / "screen.tsv").write_text("op\trows\nsoftmax\t5\n")
    assert run_bs("--screen", tmp_path) == 2
    assert "no rows with op and verdict columns" in capsys.readouterr().err


def test_batch_short_row_is_a_row_not_a_traceback(tmp_path, capsys):
    (tmp_path / "ops_status.csv").write_text("repo,op,status,notes\nFlagGems,abs\n")
    js = tmp_path / "b.json"
    assert run_bs("--batch", tmp_path, "--json", js) == 0
    op = json.loads(js.read_text())["ops"][0]
    assert op["op"] == "abs" and op["status"] == "" and op["failure_reason"].startswith("no status: unreadable run.log")


def test_batch_bad_csv_exit_2(tmp_path, capsys):
    (tmp_path / "ops_status.csv").write_text("name,value\nx,1\n")
    assert run_bs("--batch", tmp_path) == 2
    assert "expected columns" in capsys.readouterr().err


def test_missing_matplotlib_exit_2_with_pip_command(tmp_path, capsys, monkeypatch):
    runs = rf.ab_pair(tmp_path / "ab")
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib -> ImportError
    js = tmp_path / "ab.json"
    assert run_bs("--ab", runs["before"], runs["after"], "--json", js, "--html", tmp_path / "x.html") == 2
    assert "pip install matplotlib" in capsys.readouterr().err
    assert js.is_file() and not (tmp_path / "x.html").exists()


# ---------------------------------------------------------------- headless Chromium

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)


def screenshot(html: Path, png: Path, height: int = 1400) -> None:
    proc = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", f"--window-size=1200,{height}",
                           f"--screenshot={png}", html.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert png.is_file(), proc.stderr[-3000:]


@pytest.mark.parametrize("kind", ["ab", "ab-rounds", "screen", "batch"])
def test_chromium_renders_each_page(tmp_path, capsys, kind):
    if CHROMIUM is None:
        reason = ("headless Chromium not installed (Debian: apt-get install -y chromium); "
                  "the page render smoke test did not run")
        print(f"\nSKIPPED test_chromium_renders_each_page[{kind}]: {reason}", file=sys.__stderr__)
        pytest.skip(reason)
    import matplotlib.image as mpimg
    import numpy as np

    _page_of(kind, tmp_path)
    html = tmp_path / "page.html"
    png = tmp_path / "page.png"
    screenshot(html, png)
    img = mpimg.imread(str(png))[..., :3]
    non_white = (img < 0.95).any(axis=2).mean()
    assert non_white > 0.02, f"rendered page is blank ({non_white:.4f} non-white)"
    assert float(np.std(img)) > 0.05


def test_batch_pass_and_skip_are_not_failures_and_screen_ignores_per_operator_caliber(tmp_path):
    """Seen on the real H200 pages: PASS rows listed under failures, and a screen warned of mixed
    calibers because shape_source names each operator."""
    from zl.report import views
    batch = tmp_path / "batch"
    batch.mkdir()
    cols = ("repo,op,op_file,run_name,backend,device,gpu,timer,status,return_code,elapsed_ms,"
            "rows_total,rows_success,notes,out_dir")
    (batch / "ops_status.csv").write_text(
        cols + "\nmain,abs,abs,abs,cuda,0,0,cuda_graph,PASS,0,1000,5,5,,/nowhere/abs\n"
        "main,isnan,isnan,isnan,cuda,0,0,cuda_graph,SKIP,0,900,0,0,skipped=1,/nowhere/isnan\n"
        "main,mm,mm,mm,cuda,0,0,,FAIL,1,900,0,0,reason=boom,/nowhere/mm\n"
        "main,sum,sum,sum,cuda,0,0,,PENDING,,,,,,/nowhere/sum\n")
    result = views.batch_result(batch)
    reasons = {o["op"]: o["failure_reason"] for o in result["ops"]}
    assert reasons["abs"] is None and reasons["isnan"] is None and reasons["mm"].startswith("FAIL")
    assert reasons["sum"] == "PENDING: not finished (run_batch.py --resume)"
    screen = tmp_path / "screen"
    screen.mkdir()
    head = "op\top_file\tdtypes\trows_before\trows_after\trc_before\trc_after\tverdict\tbackend\tshape_source\n"
    (screen / "screen.tsv").write_text(head + "abs\tabs\tfloat16\t2\t2\t0\t0\tNO_IR_DIFF\tcuda\tabs=yaml\n"
                                       "relu\trelu\tfloat16\t2\t2\t0\t0\tNO_IR_DIFF\tcuda\trelu=yaml\n")
    assert views.screen_result(screen)["calibers_differ"] is False
    (screen / "screen.tsv").write_text(head + "abs\tabs\tfloat16\t2\t2\t0\t0\tNO_IR_DIFF\tcuda\tabs=yaml\n"
                                       "relu\trelu\tfloat16\t2\t2\t0\t0\tNO_IR_DIFF\tmusa\trelu=yaml\n")
    assert views.screen_result(screen)["calibers_differ"] is True


# ---------------------------------------------------------------- results, code, outputs

def test_ab_page_shows_the_results_verdict_first_and_a_mismatch_above_any_speedup(tmp_path, capsys):
    runs = rf.ab_pair(tmp_path / "ab")
    rf.write_results(runs["before"], "softmax")
    rf.write_results(runs["after"], "softmax")
    html, js = tmp_path / "ab.html", tmp_path / "ab.json"
    assert run_bs("--ab", runs["before"], runs["after"], "--json", js, "--html", html) == 0
    raw = html.read_text()
    table = raw[raw.index('id="results-verdict"'):]
    assert raw.index('id="results-verdict"') < raw.index('class="kpi"') < raw.index("<svg")
    for row in ("B vs A", "A vs torch", "B vs torch"):
        assert row in table[:table.index("</table>")]
    assert "WRONG RESULTS" not in raw
    # side B's outputs 1.5x side A's: the first thing on the page, above any speedup
    rf.write_results(runs["after"], "softmax", gems_scale=1.5)
    assert run_bs("--ab", runs["before"], runs["after"], "--json", js, "--html", html) == 0
    raw = html.read_text()
    wrong = raw.index('id="wrong-results"')
    assert wrong < raw.index("<h2>") and wrong < raw.index('class="kpi"') and wrong < raw.index("<svg")
    first = raw[wrong:raw.index("</div>", wrong)]
    assert "B vs A" in first and "MISMATCH" in first and "B vs torch" in first and "A vs torch" not in first
    d = json.loads(js.read_text())
    assert list(d)[0] == "results" and d["results"]["sides"]["b_vs_a"]["status"] == "mismatch"


def test_rounds_screen_and_batch_pages_put_wrong_results_first(tmp_path, capsys):
    root = rf.rounds_root(tmp_path / "rounds")
    rf.write_results(root / "r1_A", "softmax")
    for cell in ("r1_B", "r2_A", "r2_B", "r3_A", "r3_B", "r4_A", "r4_B"):
        rf.write_results(root / cell, "softmax", gems_scale=1.5 if cell == "r3_B" else 1.0)
    html = tmp_path / "r.html"
    assert run_bs("--ab-rounds", root, "--html", html) == 0
    raw = html.read_text()
    assert raw.index('id="wrong-results"') < raw.index('class="kpi"')
    assert "r3_B: MISMATCH" in raw[raw.index('id="wrong-results"'):raw.index('class="kpi"')]

    screen = rf.screen_root(tmp_path / "screen")
    tsv = screen / "screen.tsv"
    lines = tsv.read_text().splitlines()
    lines[0] += "\tresults\tresults_torch"
    cells = {"relu": "\tMISMATCH (1/1 shapes, worst error abs 0.5)\tA match; B match",
             "abs": "\tmatch\tA MISMATCH (1/1 shapes, worst error abs 0.2); B match"}
    lines[1:] = [ln + cells.get(ln.split("\t")[0], "\tmatch\tA match; B match") for ln in lines[1:]]
    lines[2] = lines[2].replace("\tIR_CHANGED\t", "\tWRONG_RESULTS\t")
    tsv.write_text("\n".join(lines) + "\n")
    html = tmp_path / "s.html"
    assert run_bs("--screen", screen, "--html", html) == 0
    raw = html.read_text()
    wrong = raw.index('id="wrong-results"')
    box = raw[wrong:raw.index("</div>", wrong)]
    assert "relu@float16: WRONG_RESULTS: MISMATCH" in box and "abs@float16 vs torch: A MISMATCH" in box
    assert "softmax" not in box
    assert wrong < raw.index("<svg") and "results B vs A" in raw
    assert "[screen] verdicts:" in capsys.readouterr().out

    batch = rf.batch_dir(tmp_path / "batch")
    rf.write_results(batch / "FlagGems" / "softmax_folded", "softmax", gems_scale=1.5)
    html = tmp_path / "b.html"
    assert run_bs("--batch", batch, "--html", html) == 0
    raw = html.read_text()
    wrong = raw.index('id="wrong-results"')
    assert "softmax_folded vs torch: MISMATCH" in raw[wrong:raw.index("</div>", wrong)]
    assert wrong < raw.index("<svg") and "results vs torch" in raw


def test_ab_page_states_the_every_level_code_verdict(tmp_path, capsys):
    root = rf.screen_root(tmp_path / "screen")   # relu: same TTGIR, LLVM IR differs
    html, js = tmp_path / "ab.html", tmp_path / "ab.json"
    assert run_bs("--ab", root / "relu@float16_before", root / "relu@float16_after", "--json", js,
                  "--html", html) == 0
    text = " ".join(parse_page(html).text)
    assert "IR_CHANGED@llir" in text and "this pair is an A/A" not in text
    assert "[ab] relu: IR: IR_CHANGED@llir" in capsys.readouterr().out


def test_screen_band_only_from_pairs_identical_at_every_level(tmp_path, capsys):
    """softmax is NO_IR_DIFF in screen.tsv; without a binary on both sides it is not shown
    identical, so it gives no noise band (the page says why)."""
    root = rf.screen_root(tmp_path / "screen")
    no_binary = {k: v for k, v in rf.SAME_CODE.items() if k != "binary"}
    for side in ("before", "after"):
        rf.write_fingerprints(root / f"softmax@float16_{side}", no_binary)
    js, html = tmp_path / "s.json", tmp_path / "s.html"
    assert run_bs("--screen", root, "--json", js, "--html", html) == 0
    d = json.loads(js.read_text())
    soft = next(o for o in d["ops"] if o["op"] == "softmax")
    assert d["noise_band_pct"] is None and soft["code"]["aa"] is False
    assert "no binary hash on both sides" in soft["code"]["reason"]
    assert "no binary hash on both sides" in " ".join(parse_page(html).text)
    # the run directories kept without their IR (a raw bundle), then gone: the row's own
    # columns decide (ir_levels, fp_* cells), its latencies still read from the run.logs
    import shutil as _sh
    tsv = root / "screen.tsv"
    lines = tsv.read_text().splitlines()
    lines[0] += "\tir_levels\tfp_ttgir\tfp_llir\tfp_asm\tfp_binary"
    lines[1] += "\tttgir,llir,ptx,binary\taa\tbb\tcc\tdd"
    lines[2:] = [ln + "\t-\t-\t-\t-\t-" for ln in lines[2:]]
    tsv.write_text("\n".join(lines) + "\n")
    for side in ("before", "after"):
        _sh.rmtree(root / f"softmax@float16_{side}" / "ttgir")
    assert run_bs("--screen", root, "--json", js) == 0
    soft = next(o for o in json.loads(js.read_text())["ops"] if o["op"] == "softmax")
    assert soft["code"]["aa"] is True and soft["code"]["source"] == "screen.tsv (the run directories hold no IR)"
    d = json.loads(js.read_text())
    assert soft["paired"] == 5 and d["noise_band_pct"] == [soft["min_pct"], soft["max_pct"]]
    assert d["verdicts"]["rule"]["controls"] == 5     # its shapes calibrate the verdicts too
    for side in ("before", "after"):
        _sh.rmtree(root / f"softmax@float16_{side}")
    assert run_bs("--screen", root, "--json", js) == 0
    soft = next(o for o in json.loads(js.read_text())["ops"] if o["op"] == "softmax")
    assert soft["code"]["aa"] is True and soft["code"]["source"] == "screen.tsv"
    lines[1] = lines[1].replace("\tdd", "\tdd/-").replace("ttgir,llir,ptx,binary", "ttgir,llir,ptx")
    tsv.write_text("\n".join(lines) + "\n")
    assert run_bs("--screen", root, "--json", js) == 0
    soft = next(o for o in json.loads(js.read_text())["ops"] if o["op"] == "softmax")
    assert soft["code"]["aa"] is False and "binary on side A only" in soft["code"]["reason"]


def test_a_shape_label_with_mathtext_draws_as_text(tmp_path, capsys):
    """`$...$` in a shape string is mathtext to matplotlib: drawn as a formula, or a parse
    error after --json already said ok."""
    runs = rf.ab_pair(tmp_path / "ab")
    label = r"'$x$ \q $a_b_c$'"
    for side in runs.values():
        log = side / "run.log"
        log.write_text(log.read_text().replace("[torch.Size([64, 64]), 1]", f"[torch.Size([64, 64]), {label}]"))
    html, js, png = tmp_path / "ab.html", tmp_path / "ab.json", tmp_path / "png"
    assert run_bs("--ab", runs["before"], runs["after"], "--json", js, "--html", html, "--png", png) == 0
    assert json.loads(js.read_text())["status"] == "ok"
    assert label in " ".join(parse_page(html).svg_text)   # the tick label, verbatim
    assert (png / "ab_speedup.png").is_file()


def _earlier_report(tmp_path):
    runs = rf.ab_pair(tmp_path / "ab")
    html, js, png = tmp_path / "ab.html", tmp_path / "ab.json", tmp_path / "png"
    assert run_bs("--ab", runs["before"], runs["after"], "--json", js, "--html", html, "--png", png) == 0
    (png / "notes.txt").write_text("not the report's")
    assert html.is_file() and (png / "ab_speedup.png").is_file()
    return runs, html, js, png


@pytest.mark.parametrize("failure, code", [("refused", 4), ("no report", 5), ("bad input", 2),
                                           ("drawing", 2)])
def test_a_failed_report_leaves_no_earlier_page_or_chart(tmp_path, capsys, monkeypatch, failure, code):
    runs, html, js, png = _earlier_report(tmp_path)
    if failure == "refused":
        ident = json.loads((runs["after"] / "run_identity.json").read_text())
        (runs["after"] / "run_identity.json").write_text(json.dumps({**ident, "timer": "direct"}))
    elif failure == "no report":
        log = runs["after"] / "run.log"
        log.write_text("\n".join(x for x in log.read_text().splitlines() if not x.startswith("SUCCESS")) + "\n")
    elif failure == "bad input":
        (runs["after"] / "run.log").write_text("garbage\n")
    else:
        from zl.report import charts

        def broken(*a, **k):
            raise ValueError("a chart that cannot be drawn")
        monkeypatch.setattr(charts, "speedup_bars", broken)
    assert run_bs("--ab", runs["before"], runs["after"], "--json", js, "--html", html, "--png", png) == code
    assert not html.exists() and not (png / "ab_speedup.png").exists()
    assert (png / "notes.txt").is_file()                  # only the report's own files go
    d = json.loads(js.read_text())
    assert d["status"] != "ok" and d["exit_code"] == code
    if failure == "drawing":
        assert "could not draw the page (ValueError: a chart that cannot be drawn)" in capsys.readouterr().err


def test_a_new_report_removes_charts_an_earlier_one_left(tmp_path, capsys):
    png = tmp_path / "png"
    root = rf.rounds_root(tmp_path / "rounds")
    assert run_bs("--ab-rounds", root, "--png", png) == 0
    assert (png / "telemetry.png").is_file()
    runs = rf.ab_pair(tmp_path / "ab")
    assert run_bs("--ab", runs["before"], runs["after"], "--png", png) == 0
    assert sorted(x.name for x in png.iterdir()) == ["ab_speedup.png"]


@pytest.mark.parametrize("mode", ["screen", "batch", "rounds"])
def test_a_page_inside_an_input_is_refused(tmp_path, capsys, mode):
    if mode == "screen":
        root = rf.screen_root(tmp_path / "screen")
        argv, target = ["--screen", root], root / "screen.tsv"
    elif mode == "batch":
        root = rf.batch_dir(tmp_path / "batch")
        argv, target = ["--batch", root], root / "FlagGems" / "softmax_folded" / "run.log"
    else:
        root = rf.rounds_root(tmp_path / "rounds")
        argv, target = ["--ab-rounds", root], root.parent / "telemetry.tsv"
    before = target.read_bytes()
    assert run_bs(*argv, "--html", target) == 2
    err = capsys.readouterr().err
    assert "is an input of this report" in err or "inside the input run directory" in err
    assert target.read_bytes() == before


def test_rounds_page_leads_with_calibrated_verdicts(tmp_path, capsys):
    """A/A-calibrated verdicts first, the chart's band the calibrated one (never the pair's
    own side noise), each shape's verdict and reason in the table, the caliber folded."""
    root = rf.rounds_root(tmp_path / "rounds")
    for cell in root.iterdir():
        if cell.is_dir():   # A cells one code, B cells another: cross-round A/A controls
            rf.write_fingerprints(cell, rf.SAME_CODE if cell.name.endswith("_A")
                                  else {**rf.SAME_CODE, "llir": "2d" * 32, "binary": "c2" * 32})
    html, js = tmp_path / "r.html", tmp_path / "r.json"
    assert run_bs("--ab-rounds", root, "--false-alarm", "0.1", "--json", js, "--html", html) == 0
    d = json.loads(js.read_text())
    p, text = assert_page(html, js, [shape_label(x) for x in d["shapes"]])
    raw = html.read_text()
    order = [raw.index(x) for x in ('id="results-verdict"', 'id="verdict-counts"', "<svg",
                                    "<h2>Shapes</h2>", '<details id="caliber-table">')]
    assert order == sorted(order)
    counts = raw[order[1]:raw.index("</div>", order[1])]
    assert "SLOWER <b class=\"down\">3</b>" in counts and "FASTER <b class=\"up\">1</b>" in counts
    assert "A/A noise band (calibrated" in raw and d["verdicts"]["band_pct"] != d["noise_band_pct"]
    assert "leave-one-out false-alarm rate 8.3%" in text
    shapes = raw[order[3]:order[4]]
    assert shapes.count(">SLOWER<") == 3 and "A/A threshold" in shapes


def _table_after(raw: str, heading: str):
    """The rows of the first table after `heading` as dicts by column name (cell text)."""
    import html as _html
    start = raw.index(heading)
    body = raw[start:raw.index("</table>", start)]
    cells = lambda row, tag: [_html.unescape(re.sub(r"<[^>]+>", "", c))
                              for c in re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", row, re.S)]
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    head = cells(rows[0], "th")
    return [dict(zip(head, cells(r, "td"))) for r in rows[1:]]


# Per page kind: the markers that must appear in this order (results check, verdict counts,
# chart, the per-shape or per-case table, the folded caliber table where the page has one).
ORDER = {"ab": ('id="results-verdict"', 'id="verdict-counts"', "<svg", "<h2>Shapes</h2>",
                '<details id="caliber-table">'),
         "ab-rounds": ('id="results-verdict"', 'id="verdict-counts"', "<svg", "<h2>Shapes</h2>",
                       '<details id="caliber-table">'),
         "screen": ('id="results-verdict"', 'id="verdict-counts"', "<svg", "<h2>Operators</h2>",
                    "<h2>Shapes</h2>", "<h2>Changed cells by change signature</h2>"),
         "batch": ('id="results-verdict"', 'id="verdict-counts"', "<svg", "<h2>Operators</h2>")}


def _page_of(kind: str, tmp_path: Path, *more) -> str:
    if kind == "ab":
        runs = rf.ab_pair(tmp_path / "d")
        argv = ["--ab", runs["before"], runs["after"]]
    elif kind == "ab-rounds":
        argv = ["--ab-rounds", rf.rounds_root(tmp_path / "d")]
    elif kind == "screen":
        argv = ["--screen", rf.screen_root(tmp_path / "d")]
    else:
        argv = ["--batch", rf.batch_dir(tmp_path / "d")]
    html = tmp_path / "page.html"
    assert run_bs(*argv, *more, "--html", html, "--json", tmp_path / "page.json") == 0
    return html.read_text()


@pytest.mark.parametrize("kind", list(ORDER))
def test_each_page_kind_reads_in_the_order_a_reviewer_decides(tmp_path, capsys, kind):
    raw = _page_of(kind, tmp_path)
    at = [raw.index(marker) for marker in ORDER[kind]]
    assert at == sorted(at), list(zip(ORDER[kind], at))
    if "caliber-table" in ORDER[kind][-1]:   # folded: a closed <details>, nothing below it
        tail = raw[at[-1]:]
        assert tail.startswith('<details id="caliber-table"><summary>') and "<h2>" not in tail


@pytest.mark.parametrize("kind", list(ORDER))
def test_every_verdict_shown_without_a_control_is_unclear_with_its_reason(tmp_path, capsys, kind):
    """None of these inputs has a calibrating A/A control for the judged shapes (the screen's
    only A/A cell calibrates the others, too few per class at 5 %): every verdict a page
    shows is UNCLEAR and says why; the rounds' rank-test words are not on the page."""
    raw = _page_of(kind, tmp_path)
    text = " ".join(parse_page(tmp_path / "page.html").text)
    if kind == "batch":
        line = raw[raw.index('id="verdict-counts"'):]
        line = line[:line.index("</div>")]
        assert "every case UNCLEAR" in line and "no A/A control" in line
        assert not re.search(r"\b(FASTER|SLOWER|SAME)\b", text)
        return
    rows = _table_after(raw, "<h2>Shapes</h2>")
    assert rows and {r["verdict"] for r in rows} == {"UNCLEAR"}
    assert all(r["why"].strip() for r in rows), rows
    if kind == "screen":   # too few controls per class, or none left once the cell is left out
        assert {r["why"].split(":")[0] for r in rows if r["cell"] == "softmax@float16"} == {"no A/A control"}
        assert all("the rule needs >= 19" in r["why"] for r in rows if r["cell"] == "relu@float16")
    assert not re.search(r"\b(slower|faster|no detectable difference)\b", text)


def test_screen_page_judges_each_shape_with_its_reason_change_and_the_calibrated_band(tmp_path, capsys):
    """With a 50 % false-alarm target the screen's A/A cell (softmax) calibrates relu: relu's
    shapes get FASTER/SLOWER/SAME with the threshold in the reason and relu's change signature;
    softmax, left out of its own calibration, stays UNCLEAR; the chart draws the calibrated
    band, not the A/A cells' range."""
    raw = _page_of("screen", tmp_path, "--false-alarm", "0.5")
    d = json.loads((tmp_path / "page.json").read_text())
    rows = _table_after(raw, "<h2>Shapes</h2>")
    relu = [r for r in rows if r["cell"] == "relu@float16"]
    soft = [r for r in rows if r["cell"] == "softmax@float16"]
    assert len(relu) == 5 and len(soft) == 5
    assert {r["verdict"] for r in relu} <= {"FASTER", "SLOWER", "SAME"}
    assert all("A/A threshold" in r["why"] for r in relu)
    assert {r["change"] for r in relu} == {"IR_CHANGED@llir"} and {r["change"] for r in soft} == {""}
    assert {r["verdict"] for r in soft} == {"UNCLEAR"} and all("no A/A control" in r["why"] for r in soft)
    band = d["verdicts"]["band_pct"]
    assert band and band != d["noise_band_pct"]
    assert "A/A noise band (calibrated: the largest class threshold)" in raw
    assert "range of the A/A cells, not calibrated" not in raw
    # without enough controls the chart falls back to the A/A cells' range, labelled so
    raw = _page_of("screen", tmp_path / "again")
    assert "A/A noise band (range of the A/A cells, not calibrated)" in raw
