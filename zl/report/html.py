"""One self-contained HTML page (inline CSS, inline SVG charts, a few lines of inline JS
for table sorting; no URL is fetched) for an --ab, --ab-rounds, --screen or --batch
result dict. The page only formats numbers already in that dict (views.py), so
`--json` holds every number it shows.

    write_report(result, html_path=None, png_dir=None)
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from zl import atomic
from zl.report import changes, charts, retune, rounds
from zl.report.page import DEMO_TEXT, Page, _cls, _numcell, esc, pct, table
from zl.report.run import code_text
from zl.report.views import IDENTITY_SHOWN, shape_label



RESULT_ROWS = (("b_vs_a", "B vs A (side B's outputs against side A's)"),
               ("a_vs_torch", "A vs torch"), ("b_vs_torch", "B vs torch"))


def _wrong_results(page: Page, lines: List[str]) -> None:
    """Every MISMATCH, first on the page: a speedup of a different answer is not a gain."""
    if lines:
        page.add('<div class="wrong" id="wrong-results">WRONG RESULTS: '
                 + "<br>".join(esc(x) for x in lines)
                 + "<br>every speedup on this page times a different answer</div>")


def _pair_results(page: Page, result: Dict) -> None:
    """--ab / --ab-rounds: the three results verdicts (zl/report/results.py `sides`)."""
    sides = (result.get("results") or {}).get("sides") or {}
    _wrong_results(page, [f"{label}: {sides[k]['value']}" for k, label in RESULT_ROWS
                          if sides.get(k, {}).get("status") == "mismatch"])


def _results_table(page: Page, result: Dict) -> None:
    res = result.get("results") or {}
    sides = res.get("sides") or {}
    if not sides:
        return
    rows = [[label, (sides[k]["status"], None, sides[k]["status"].replace("/", "")), sides[k]["value"]]
            for k, label in RESULT_ROWS if k in sides]
    replays = res.get("replays")
    if replays:
        rows.append(["A replays vs r1_A", (replays["status"], None, replays["status"].replace("/", "")),
                     replays["value"]])
    page.add('<div id="results-verdict"><h2>Results</h2>'
             + table(["outputs", "verdict", "detail"], rows) + "</div>")


def _top(page: Page, result: Dict) -> None:
    if result.get("demo"):
        page.add(f'<div class="demo" id="demo-banner">{esc(DEMO_TEXT)} (run identity: demo={esc(result["demo"])})</div>')
    for p in result.get("caliber_problems") or []:
        page.add(f'<div class="warn">[caliber] {esc(p)}</div>')
    for h in result.get("caliber_hazards") or []:
        page.add(f'<div class="warn">[caliber hazard] {esc(h)}</div>')
    for f in result.get("flags") or []:
        page.add(f'<div class="flag">{esc(f)}</div>')


VERDICT_CSS = {"FASTER": "up", "SLOWER": "down", "SAME": "", "UNCLEAR": ""}


def _verdict_block(page: Page, result: Dict) -> None:
    """The A/A-calibrated verdict counts, the expected false verdicts and the rule with its
    per-class thresholds (zl/report/verdicts.py): what a reviewer decides on, first."""
    v = result.get("verdicts")
    if not v:
        return
    s, rule = v["summary"], v["rule"]
    page.add('<div id="verdict-counts">' + "".join(
        f'<span class="kpi">{esc(k)} <b class="{VERDICT_CSS[k]}">{n}</b></span>'
        for k, n in s["counts"].items())
        + f'<span class="kpi">expected false FASTER/SLOWER <b>&le; {s["expected_false_verdicts"]:.2f}</b>'
        f' of {s["decided"]} decided</span>'
        + (f'<span class="kpi">Benjamini-Hochberg discoveries <b>{s["bh_discoveries"]}</b> at FDR '
           f'{s["bh_alpha"]}</span>' if "bh_discoveries" in s else "") + "</div>")
    if rule["unusable"]:
        page.add(f'<div class="flag">every shape UNCLEAR: {esc(rule["unusable"])}</div>')
    aa = v.get("aa_cells")
    if aa and aa["shapes"]:
        c = aa["counts"]
        page.add(f'<div class="sub" id="aa-false-alarms">the A/A cells, judged like the others: '
                 f'{c["FASTER"] + c["SLOWER"]} FASTER/SLOWER (false alarms) among {aa["decided"]} '
                 f'decided shapes, expected &le; {aa["expected_false_verdicts"]:.2f}</div>')
    loo = rule["loo_false_alarm_pct"]
    rows = [[c["class"], (str(c["controls"]), c["controls"]),
             _numcell(c["threshold_pct"], False), _numcell(c["false_alarm_bound_pct"], False),
             f"{c['loo_false_alarms']}/{c['loo_judged']}" if c["loo_judged"] else "n/a"]
            for c in rule["classes"]]
    page.add('<details id="verdict-rule"><summary>rule: ' + esc(rule["text"])
             + f" (controls: {rule['controls']} A/A shapes from {esc(rule['control_source'])}"
             + (f"; leave-one-out false-alarm rate {loo:.1f}%" if loo is not None else "")
             + ")</summary>" + table(["latency class", "A/A controls", "threshold |delta|",
                                      "false-alarm bound", "leave-one-out false alarms"], rows)
             + "".join(f'<div class="sub">not a control: {esc(x)}</div>' for x in v["rejected_controls"])
             + "</details>")


def _chart_band(result: Dict) -> Tuple[Optional[List[float]], str]:
    """The calibrated band (the largest class threshold) when the verdicts have one; else the
    --ab band (views.ab_noise_band: the pair's own range only when it is an every-level A/A,
    else a screen's A/A cells) or the --screen range of its every-level A/A cells, each
    labelled not calibrated; never a band of a judged pair's own spread (--ab-rounds' side
    noise is not an A/A)."""
    v = result.get("verdicts")
    if v is not None and v["band_pct"]:
        return v["band_pct"], "A/A noise band (calibrated: the largest class threshold)"
    band = result.get("noise_band_pct")
    if result.get("mode") == "ab" and band:
        own = (result.get("code") or {}).get("identical_everywhere")
        return band, ("A/A noise band (this pair's own range: an every-level A/A, not calibrated)"
                      if own else "A/A noise band (range of the A/A controls, not calibrated)")
    if result.get("mode") == "screen" and band:
        return band, "A/A noise band (range of the A/A cells, not calibrated)"
    return None, "A/A noise band"


def _verdict_cells(item: Dict) -> List:
    word = item.get("aa_verdict", "")
    return [(word, word, VERDICT_CSS.get(word, "")), item.get("aa_reason", "")]


def _identity_table(page: Page, identities: Dict[str, Dict[str, str]]) -> None:
    names = list(identities)
    if not names:
        return
    rows = []
    for k in IDENTITY_SHOWN:
        vals = [identities[n].get(k, "") for n in names]
        if any(vals):
            rows.append([k] + vals + (["differs"] if len(set(vals)) > 1 else [""]))
    differs = sum(1 for r in rows if r[-1])
    page.add(f'<details id="caliber-table"><summary><h2 style="display:inline">Caliber (run_identity.json)'
             f'</h2> {len(rows)} fields, {differs} differ</summary>' + table(["field"] + names + [""], rows)
             + '<div class="sub">the comparison tools refuse to pair runs whose caliber fields '
               '(backend ... direct_repeat) differ; autotune_mode is record on side A, replay on B</div>'
               '</details>')


def _code_line(result: Dict, what: str = "code") -> str:
    code = result.get("code")
    if not code:
        return f'<div class="flag" id="code-verdict">{esc(what)}: not judged (no r1_A and r1_B pair)</div>'
    text = code_text(code)
    css = "ok" if code.get("identical_everywhere") else "flag"
    return f'<div class="{css}" id="code-verdict">{esc(what)}: {esc(text)}; {esc(code["reason"])}</div>'


def _changes_block(name: str, ch: Optional[Dict]) -> str:
    """One node's collapsed "what changed": headline (signature), per-variant table, excerpts."""
    if not ch:
        return ""
    body = "".join(f'<div class="sub">{esc(title)}</div>'
                   + (f'<pre class="diff">{esc(chr(10).join(lines))}</pre>' if lines else "")
                   for title, lines in changes.excerpts(ch))
    if ch["kernels"] or ch["only"]:
        body = (table(list(changes.TABLE_HEADERS), changes.table_rows(ch)) + body
                + f'<div class="sub">variants matched by {esc(ch["matched_by"])}</div>')
    return (f'<details class="changes" id="changes-{esc(name)}"><summary>what changed in {esc(name)}: '
            f'{esc(changes.headline(ch))}</summary>{body}</details>')


def page_ab(result: Dict) -> Page:
    s = result["summary"]
    page = Page(f"A/B {result['label']}", f"before {result['before']}  after {result['after']}")
    _pair_results(page, result)
    _top(page, result)
    _results_table(page, result)
    _verdict_block(page, result)
    page.add(_code_line(result, "code (every IR level, binary included)"))
    page.add("<div>" + "".join(
        f'<span class="kpi">{esc(k)} <b class="{_cls(v)}">{esc(pct(v))}</b></span>'
        for k, v in (("geomean", s["geomean_pct"]), ("median", s["median_pct"]),
                     ("min", s["min_pct"]), ("max", s["max_pct"])))
        + f'<span class="kpi">paired <b>{s["paired"]}</b></span><span class="kpi">unpaired <b>{s["unpaired"]}</b></span></div>')
    if not s["complete"]:
        page.add('<div class="warn">INCOMPLETE: not every shape paired on both sides, or a run did not '
                 'finish (see the flags above)</div>')
    band = result.get("noise_band_pct")
    page.add('<div class="sub">noise band: '
             + (f"{pct(band[0])} ~ {pct(band[1])} ({esc(result['noise_source'])})" if band
                else f"unknown ({esc(result.get('noise_source'))})")
             + "</div>")
    if result["paired"]:
        cband, legend = _chart_band(result)
        page.chart("ab_speedup", charts.speedup_bars(result["paired"], "speedup_pct", cband,
                                                     "per-shape speedup, grouped by dtype, small to large",
                                                     band_label=legend))
    rows = [[p["dtype"], shape_label(p), (f"{p['before_lat']:.6f}", p["before_lat"]),
             (f"{p['after_lat']:.6f}", p["after_lat"]), _numcell(p["speedup_pct"]), *_verdict_cells(p),
             ", ".join(p.get("flags") or [])] for p in charts.ordered(result["paired"])]
    rows += [[u["dtype"], shape_label(u), "", "", "", "", "", f"UNPAIRED: {u['reason']}"]
             for u in result["unpaired"]]
    # Each shape's verdict, under the node's change summary (collapsed, per kernel).
    page.add("<h2>Shapes</h2>" + _changes_block(result["label"], result.get("changes"))
             + table(["dtype", "shape", "before (ms)", "after (ms)", "speedup", "verdict",
                      "why", "flags"], rows, sortable=True))
    _identity_table(page, result.get("identities") or {})
    return page


def page_rounds(result: Dict) -> Page:
    page = Page(f"Multi-round A/B {result['label']}", f"root {result['root']}")
    _pair_results(page, result)
    _top(page, result)
    _results_table(page, result)
    _verdict_block(page, result)
    page.add(_code_line(result, "code r1_A vs r1_B (every IR level, binary included)"))
    if result.get("status") != "ok":
        page.add(f'<div class="warn">no per-shape result: {esc(result.get("status"))} '
                 f'({result.get("rounds")} complete round(s))</div>')
    ci = result.get("geomean_ci95_pct")
    page.add("<div>" + f'<span class="kpi">geomean <b class="{_cls(result.get("geomean_speedup_pct"))}">'
             f'{esc(pct(result.get("geomean_speedup_pct")))}</b>'
             + (f' 95% CI [{esc(pct(ci[0]))}, {esc(pct(ci[1]))}]' if ci else "") + "</span>"
             f'<span class="kpi">median <b>{esc(pct(result.get("median_speedup_pct")))}</b></span>'
             f'<span class="kpi">rounds <b>{result.get("rounds")}</b></span>'
             f'<span class="kpi">median side noise <b>{esc(pct(result.get("median_side_noise_pct"), False))}</b></span>'
             f'<span class="kpi">sign-unstable <b>{result.get("sign_unstable", 0)}</b></span></div>')
    # The rank test's own faster/slower (stats.verdict) weighs the pair's own side noise, no
    # A/A control: the page shows its p only, inside the calibrated rule.
    if result.get("min_attainable_p") is not None and not result.get("verdicts_possible"):
        page.add(f'<div class="sub">{result["rounds"]} rounds cannot reach alpha 0.05 (smallest p '
                 f'{result["min_attainable_p"]:.3f}): FASTER/SLOWER need >= 4 rounds</div>')
    shapes = result.get("shapes") or []
    if shapes:
        cband, legend = _chart_band(result)
        page.chart("rounds_speedup", charts.speedup_bars(
            shapes, "speedup_pct", cband, "per-shape median speedup with the per-round range",
            err=("delta_min", "delta_max"), band_label=legend))
        page.add("<h2>Latency per round (drift is visible here)</h2>")
        page.chart("rounds_latency", charts.rounds_latency(shapes, result["round_numbers"]))
        rows = [[s["dtype"], shape_label(s), _numcell(s["speedup_pct"]), _numcell(s["delta_min"]),
                 _numcell(s["delta_max"]), (f"{s['a_median']:.6f}", s["a_median"]),
                 (f"{s['b_median']:.6f}", s["b_median"]), _numcell(s["a_spread_pct"], False),
                 _numcell(s["b_spread_pct"], False), *_verdict_cells(s),
                 ("n/a" if s["p_value"] is None else f"{s['p_value']:.3f}", s["p_value"]),
                 ", ".join(s.get("flags") or [])] for s in charts.ordered(shapes)]
        page.add("<h2>Shapes</h2>" + _changes_block(result["label"], result.get("changes")) + table(
            ["dtype", "shape", "median speedup", "round min", "round max", "A median (ms)",
             "B median (ms)", "A noise", "B noise", "verdict", "why", "rank test p", "flags"],
            rows, sortable=True))
    pr = result.get("per_round_median_pct") or []
    if pr:
        page.add("<h2>Per-round median speedup</h2>" + table(
            ["round"] + [str(k) for k in result["round_numbers"]], [["median"] + [_numcell(x) for x in pr]]))
    tel = result.get("telemetry")
    if tel and tel.get("rows"):
        page.add("<h2>Telemetry</h2>")
        page.chart("telemetry", charts.telemetry(tel))
    _identity_table(page, result.get("identities") or {})
    return page


def _failures(page: Page, result: Dict) -> None:
    page.add("<h2>Failures by reason</h2>")
    if not result["failures"]:
        page.add('<div class="ok">none</div>')
        return
    page.add(table(["reason", "count", "operators"],
                   [[g["reason"], (str(len(g["ops"])), len(g["ops"])), ", ".join(g["ops"])]
                    for g in result["failures"]]))


def _results_word(text: str) -> str:
    """A screen.tsv results cell's status word ("match", "MISMATCH", ...), "not recorded" if empty."""
    return (text or "").split("(")[0].split()[0] if (text or "").strip() else "not recorded"


def _counts_text(words) -> str:
    counts: Dict[str, int] = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    return ", ".join(f"{k}={n}" for k, n in sorted(counts.items())) or "none"


def _screen_shapes(page: Page, result: Dict) -> None:
    """Every measured shape of every cell: its A/A-calibrated verdict with the reason, and the
    cell's change signature where its code changed (verdicts.cell_signature)."""
    rows = [[o["cell"], s["dtype"], shape_label(s), (f"{s['before_lat']:.6f}", s["before_lat"]),
             _numcell(s["speedup_pct"]), *_verdict_cells(s), o.get("change_signature") or ""]
            for o in result["ops"] for s in charts.ordered(o.get("shapes") or [])]
    if rows:
        page.add('<h2>Shapes</h2>' + table(
            ["cell", "dtype", "shape", "before (ms)", "speedup", "verdict", "why", "change"],
            rows, sortable=True))


def _judge_first(page: Page, summary: Optional[Dict]) -> None:
    """A --judge-first batch's stage 1 (zl/report/screen.py): what every node was judged,
    the baseline and its check, and each node that could not be judged, with the reason."""
    if not summary:
        return
    s1, base = summary.get("stage1") or {}, summary.get("baseline") or {}
    page.add('<h2>Stage 1: every node judged untimed</h2><div class="sub">verdicts: '
             + esc(", ".join(f"{k}={v}" for k, v in (s1.get("counts") or {}).items()))
             + f"; timed below: {len(s1.get('changed') or [])} changed, "
               f"{len(s1.get('controls') or [])} A/A control(s)</div>")
    if base:
        check = base.get("check") or {}
        drift = check.get("drift") or {}
        page.add(f'<div class="{"warn" if drift else "sub"}">side A from the baseline {esc(base.get("dir"))}: '
                 f'{esc(base.get("linked"))} node(s) linked, {len(base.get("carried") or {})} carried unjudged '
                 f'(its SKIP or TIMEOUT), {len(base.get("fresh") or {})} run fresh; '
                 f'checked against a fresh side A on {len(check.get("checked") or [])} timed node(s)'
                 + (f'; DRIFT on {esc(", ".join(f"{n} ({v})" for n, v in drift.items()))}: stage 1 is void'
                    if drift else "") + "</div>")
    unjudged = s1.get("unjudged") or {}
    page.add(f"<details><summary>{len(unjudged)} node(s) not judged</summary>"
             + table(["node", "why"], [[n, why] for n, why in unjudged.items()]) + "</details>")


def page_screen(result: Dict) -> Page:
    page = Page(f"Screen {result['label']}", f"root {result['root']}")
    by_cell = {o["cell"]: o for o in result["ops"]}
    _wrong_results(page, [f"{c}: {by_cell[c]['verdict']}: {by_cell[c]['results']}"
                          for c in result.get("wrong_results") or []]
                   + [f"{c} vs torch: {by_cell[c]['results_torch']}"
                      for c in result.get("torch_mismatches") or []] + rounds.wrong_results_lines(result))
    _top(page, result)
    if result.get("timing_warning"):   # cells of more than one GPU model
        page.add(f'<div class="warn" id="mixed-hardware">{esc(result["timing_warning"])}</div>')
    if result.get("calibers_differ"):
        page.add('<div class="warn">[caliber] the operators were not all measured under one caliber '
                 '(see the caliber columns of screen.tsv)</div>')
    for o in result["ops"]:
        for p in o.get("caliber_problems") or []:
            page.add(f'<div class="warn">[caliber] {esc(o["cell"])}: {esc(p)}</div>')
    results = _counts_text(_results_word(o["results"]) for o in result["ops"])
    page.add(f'<div class="sub" id="results-verdict">results B vs A per cell: {esc(results)}; '
             'cells by screen verdict: '
             + esc(", ".join(f"{k}={v}" for k, v in result["verdict_counts"].items())) + "</div>")
    _judge_first(page, result.get("judge_first"))
    _verdict_block(page, result)
    band = result.get("noise_band_pct")
    if result["median_speedups_pct"]:
        cband, legend = _chart_band(result)
        page.chart("screen_hist", charts.histogram(
            result["median_speedups_pct"], "median speedup % per operator (before/after - 1)",
            "median speedup per operator", cband, band_label=legend))
    rows = [[o["op"], o["dtypes"], o["verdict"], o["results"] or "not recorded", o["results_torch"] or "",
             f"{code_text(o['code'])}{'; A/A' if o['code']['aa'] else ''} [from {o['code']['source']}]",
             (o["rows_before"], o["rows_before"]),
             (o["rows_after"], o["rows_after"]),
             " ".join(f"{k}={n}" for k, n in (o.get("aa_verdict_counts") or {}).items() if n),
             _numcell(o.get("median_pct")), _numcell(o.get("min_pct")),
             _numcell(o.get("max_pct")),
             "; ".join(x for x in (o.get("note") or o.get("failure_text") or "",
                                   o["code"]["reason"] if o["verdict"] == "NO_IR_DIFF" and not o["code"]["aa"]
                                   else "") if x)]
            for o in result["ops"]]
    page.add("<h2>Operators</h2>" + table(["op", "dtypes", "verdict", "results B vs A", "results vs torch",
                                            "code (every IR level)",
                                            "rows before", "rows after", "shape verdicts",
                                            "median speedup", "min", "max", "notes"], rows, sortable=True))
    _screen_shapes(page, result)
    groups = (result.get("verdicts") or {}).get("change_groups") or []
    if groups:
        page.add('<h2>Changed cells by change signature</h2>' + table(
            ["change", "cells", "shape verdicts", "which"],
            [[g["signature"], (str(len(g["cells"])), len(g["cells"])),
              " ".join(f"{k}={n}" for k, n in g["shape_verdicts"].items() if n), " ".join(g["cells"])]
             for g in groups]))
    changed = [o for o in result["ops"] if o.get("changes")]
    if changed:
        page.add("<h2>What changed, per changed cell</h2>"
                 + "".join(_changes_block(o["cell"], o["changes"]) for o in changed))
    page.add(retune.html_section(result, table, esc))   # A vs C beside A vs B: run_batch.py --retune
    page.add(rounds.html_section(result, table, esc))   # each node's rounds: run_batch.py --rounds
    if band:
        page.add(f'<div class="sub">noise band {pct(band[0])} ~ {pct(band[1])}: {esc(result["noise_source"])}</div>')
    _failures(page, result)
    return page


# A batch has one side and torch: no A/A control calibrates gems vs torch, so no shape or
# case gets a FASTER/SLOWER/SAME (verdicts.py needs every-level A/A pairs).
BATCH_NO_VERDICT = ("verdicts: every case UNCLEAR: a batch times one side against torch, with no "
                    "A/A control of that comparison; its speedups vs torch are upstream's numbers, "
                    "not verdicts (judge a switch with --ab, --ab-rounds or --screen)")


def page_batch(result: Dict) -> Page:
    page = Page(f"Batch {result['label']}", f"batch {result['root']}")
    by_op = {o["op"]: o for o in result["ops"]}
    _wrong_results(page, [f"{op} vs torch: {by_op[op]['results_torch']['value']}"
                          for op in result.get("wrong_results") or []])
    _top(page, result)
    page.add('<div class="sub" id="results-verdict">results vs torch per case: '
             + esc(_counts_text(o["results_torch"]["status"] for o in result["ops"])) + "; status: "
             + esc(", ".join(f"{k}={v}" for k, v in result["status_counts"].items())) + "</div>")
    page.add(f'<div class="flag" id="verdict-counts">{esc(BATCH_NO_VERDICT)}</div>')
    if result.get("timing_warning"):
        page.add('<div class="sub"><b>' + esc(result["timing_warning"]) + "</b></div>")
    if result["median_speedups"]:
        page.chart("batch_hist", charts.histogram(
            result["median_speedups"], "median Gems Speedup per operator (torch latency / gems latency, x)",
            "upstream speedup vs torch per operator", zero=1.0))
    rows = []
    for o in result["ops"]:
        ms = o["median_speedup"]
        rows.append([o["repo"], o["op"], o["status"], (o["return_code"], o["return_code"]),
                     ("" if o["rows_success"] is None else f"{o['rows_success']:g}", o["rows_success"]),
                     ("" if o["rows_total"] is None else f"{o['rows_total']:g}", o["rows_total"]),
                     ("n/a" if ms is None else f"{ms:.3f}x", ms, "" if ms is None else ("up" if ms > 1 else "down")),
                     ("" if o["elapsed_ms"] is None else f"{o['elapsed_ms']:g}", o["elapsed_ms"]),
                     o["results_torch"]["value"], o["backend"], o["timer"], o["notes"] or o["failure_text"]])
    page.add("<h2>Operators</h2>" + table(["repo", "op", "status", "rc", "rows ok", "rows", "median speedup",
                                            "elapsed (ms)", "results vs torch", "backend", "timer", "notes"],
                                           rows, sortable=True))
    _failures(page, result)
    return page


PAGES = {"ab": page_ab, "ab-rounds": page_rounds, "screen": page_screen, "batch": page_batch}


def render_report(result: Dict, with_png: bool = False) -> Tuple[str, Dict[str, bytes]]:
    """(page HTML, {chart name: PNG bytes} when `with_png`) for result['mode'], in memory:
    nothing is written until every part of the page was drawn."""
    page = PAGES[result["mode"]](result)
    text = page.render()
    pngs = {name: charts.png_bytes(fig) for name, fig in page.figures.items()} if with_png else {}
    return text, pngs


def write_report(result: Dict, html_path: Optional[Path] = None, png_dir: Optional[Path] = None) -> None:
    """Render the page, then write the HTML and/or each chart as <png_dir>/<name>.png; a
    chart an earlier report left in png_dir that this page does not have is removed."""
    text, pngs = render_report(result, png_dir is not None)
    if html_path is not None:
        atomic.write_text(html_path, text)
    if png_dir is not None:
        for name, data in pngs.items():
            atomic.write_bytes(Path(png_dir) / f"{name}.png", data)
        _remove_charts(Path(png_dir), keep=set(pngs))


def _remove_charts(png_dir: Path, keep=frozenset()) -> List[Path]:
    gone = []
    for name in charts.CHART_NAMES:
        path = png_dir / f"{name}.png"
        if name not in keep and path.is_file():
            path.unlink()
            gone.append(path)
    return gone


def clear_report(html_path: Optional[Path], png_dir: Optional[Path]) -> List[Path]:
    """A refused or failed report leaves no page: remove the HTML at html_path and every
    chart a report writes into png_dir (other files there are not the report's). Returns
    what was removed."""
    gone = []
    if html_path is not None and Path(html_path).is_file():
        Path(html_path).unlink()
        gone.append(Path(html_path))
    if png_dir is not None and Path(png_dir).is_dir():
        gone += _remove_charts(Path(png_dir))
    return gone
