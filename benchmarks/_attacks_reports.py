"""Helper, not a tool (report_attacks.py): attacks on what a report claims and on the
provenance it pairs, each on copies of the shared runs A (record), B and C (replays of A),
R (A recorded again), E (replay of an edited record), F (replay that misses every key)."""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path

from _attack_kit import OP, PY, Judge, attack, huge_numbers, quote_line, strict_json, tree

from harness import report_fixtures as rf


def _set_identity(run: Path, **fields) -> None:
    path = run / "run_identity.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}, indent=2))


def _pair(ctx, d: Path, a: str = "A", b: str = "B"):
    return ctx.copy(a, d / a), ctx.copy(b, d / b)


def _order(j: Judge, page: str, first: str, *later: str) -> None:
    """`first` appears on the page, before every marker in `later` that the page holds."""
    if not j.want(first in page, f"the page lacks {first!r}"):
        return
    at = page.index(first)
    for marker in later:
        if marker in page:
            j.want(at < page.index(marker), f"{first!r} comes after {marker!r} on the page")


# ------------------------------------------------------------------ what a report claims

@attack("llir_only_change_reported_as_aa", needs=("A", "C"))
def llir_only_change(ctx, d):
    """`--ab A C` whose fingerprints are equal at TTGIR and differ from LLVM IR on"""
    a, c = _pair(ctx, d, "A", "C")
    rf.write_fingerprints(a, rf.SAME_CODE)
    rf.write_fingerprints(c, {**rf.SAME_CODE, "llir": "2d" * 32, "ptx": "8f" * 32, "binary": "c2" * 32})
    js, page = d / "ab.json", d / "ab.html"
    r = ctx.bs(d, "--ab", a, c, "--label", OP, "--json", js, "--html", page)
    j = Judge("--ab A C, identical TTGIR, LLVM IR/PTX/cubin differ")
    j.saw(r, "IR:")
    if not j.rc(r, 0):
        return j
    data = strict_json(js)
    code = data.get("code") or {}
    j.want(code.get("verdict") == "IR_CHANGED@llir", f"code verdict {code.get('verdict')!r}, not IR_CHANGED@llir")
    j.want(data.get("noise_band_pct") is None, f"a noise band {data.get('noise_band_pct')} from a changed pair")
    text = page.read_text()
    for where, body in (("the console", r.out), ("the JSON", js.read_text()), ("the page", text)):
        j.lacks(body, "its range is the noise", where)
        j.lacks(body, "this pair is an A/A", where)
    j.has(text, "IR_CHANGED@llir", "the page")
    return j


@attack("page_without_the_results_verdict", needs=("A", "B"))
def page_results_verdict(ctx, d):
    """`--ab A B --html`: does the page say whether B's outputs matched A's and torch's"""
    a, b = _pair(ctx, d)
    js, page = d / "ab.json", d / "ab.html"
    r = ctx.bs(d, "--ab", a, b, "--label", OP, "--json", js, "--html", page)
    j = Judge("--ab A B --html on the real runs' recorded outputs")
    j.saw(r, "results")
    if not j.rc(r, 0):
        return j
    raw = page.read_text()
    _order(j, raw, 'id="results-verdict"', 'class="kpi"', "<svg")
    if 'id="results-verdict"' in raw:
        table = raw[raw.index('id="results-verdict"'):]
        table = table[:table.find("</table>")]
        for row in ("B vs A", "A vs torch", "B vs torch"):
            j.has(table, row, "the page's results table")
    j.did = "exit 0: page results table: " + _cells(raw, 'id="results-verdict"')
    return j


def _cells(raw: str, anchor: str, width: int = 140) -> str:
    if anchor not in raw:
        return "(none)"
    part = raw[raw.index(anchor):]
    part = part[:part.find("</table>") if "</table>" in part else part.find("</div>")]
    text = re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", " ", part.split(">", 1)[-1]))).strip()
    return text if len(text) <= width else text[:width - 3] + "..."


@attack("wrong_results_below_the_speedup", needs=("A", "B"))
def wrong_results_first(ctx, d):
    """side B's outputs 1.5x side A's: does the page open with it, above any speedup"""
    a, b = _pair(ctx, d)
    rf.write_results(a, OP)
    rf.write_results(b, OP, gems_scale=1.5)
    js, page = d / "ab.json", d / "ab.html"
    r = ctx.bs(d, "--ab", a, b, "--label", OP, "--json", js, "--html", page)
    j = Judge("--ab A B --html, B's outputs 1.5x A's")
    j.saw(r, "MISMATCH")
    if not j.rc(r, 0):
        return j
    raw = page.read_text()
    _order(j, raw, 'id="wrong-results"', "<h2>", 'class="kpi"', "<svg")
    box = _cells(raw, 'id="wrong-results"')
    j.has(box, "MISMATCH", "the page's first box")
    j.has(box, "B vs A", "the page's first box")
    j.did = f"exit 0: page opens with: {box}"
    return j


@attack("near_zero_torch_reference_ratio", needs=("A", "B"))
def near_zero_reference(ctx, d):
    """float16 outputs 0.002 off a torch reference of ~0 on both sides: no ratio against ~0"""
    import torch
    from zl.results import capture
    a, b = _pair(ctx, d)
    ref = torch.zeros(64, dtype=torch.float16)
    ref[::8] = 6e-8                              # float16 subnormals: a reference of ~0
    for run in (a, b):
        doc = capture.ResultsFile(run, OP)
        label = "[torch.Size([64])]"
        doc.add(doc.key("torch", "torch.float16", label), "torch", [ref])
        doc.add(doc.key("gems", "torch.float16", label), "gems", [ref + 0.002])
    cmp_ = ctx.run([PY, "-m", "zl.results.compare", a, b, "--tsv"], d, ctx.env())
    js, page = d / "ab.json", d / "ab.html"
    r = ctx.bs(d, "--ab", a, b, "--label", OP, "--json", js, "--html", page)
    j = Judge("results vs torch where torch's float16 output is ~0 and FlagGems' 0.002 off")
    j.did = f"compare --tsv: {quote_line(cmp_.out, 'vs torch', 'A ') or cmp_.err.strip()[:120]}"
    j.want(cmp_.rc in (0, 10, 1), f"zl.results.compare exit {cmp_.rc}: {quote_line(cmp_.text)}")
    j.rc(r, 0)
    bodies = [("zl.results.compare", cmp_.text), ("the console", r.text)]
    bodies += [(n, p.read_text()) for n, p in (("the JSON", js), ("the page", page)) if p.is_file()]
    for where, body in bodies:
        big = huge_numbers(body)
        j.want(not big, f"{where} prints {big[:3]}: a ratio against ~0")
    j.want("MISMATCH" in cmp_.out or "within_tol" in cmp_.out, "zl.results.compare names no verdict vs torch")
    return j


@attack("latency_of_1e-320", needs=("A", "B"))
def tiny_latency(ctx, d):
    """one of B's latencies set to 1e-320 ms: an infinite speedup, Infinity in the JSON"""
    a, b = _pair(ctx, d)
    log = b / "run.log"
    lines = log.read_text().splitlines(keepends=True)
    last = [i for i, x in enumerate(lines) if x.startswith("SUCCESS")][-1]
    shape = lines[last].split(None, 5)[-1].strip()
    # Status, torch latency, gems latency: the third column becomes 1e-320.
    lines[last] = re.sub(r"^(SUCCESS\s+\S+\s+)\S+", lambda m: m.group(1) + "1e-320", lines[last])
    log.write_text("".join(lines))
    js = d / "ab.json"
    r = ctx.bs(d, "--ab", a, b, "--label", OP, "--json", js)
    j = Judge(f"--ab A B with B's gems latency of {shape} = 1e-320 ms")
    j.saw(r, "not a finite", "unpaired")
    if not j.rc(r, 0):
        return j
    try:
        data = strict_json(js)
    except ValueError as exc:
        j.want(False, str(exc))
        return j
    un = [u for u in data.get("unpaired", []) if "latency ratio not a finite number" in str(u.get("reason"))]
    j.want(bool(un), "the 1e-320 row is not unpaired with 'latency ratio not a finite number'")
    j.want(all(shape not in json.dumps(p) for p in data.get("paired", [])), f"{shape} is paired")
    j.did = f"exit 0: JSON standard; unpaired: {un[0]['reason'][:90] if un else '-'}"
    return j


@attack("mathtext_in_a_shape_label", needs=("A", "B"))
def mathtext_label(ctx, d):
    """`$x$ \\q $a_b_c$` in a shape label: matplotlib mathtext crashed the page after an ok JSON"""
    a, b = _pair(ctx, d)
    label = r"'$x$ \q $a_b_c$'"
    for run in (a, b):
        log = run / "run.log"
        text = log.read_text()
        row = next(x for x in text.splitlines() if x.startswith("SUCCESS"))
        log.write_text(text.replace(row, row[:row.rindex("]")] + f", {label}]"))
    js, page, png = d / "ab.json", d / "ab.html", d / "png"
    r = ctx.bs(d, "--ab", a, b, "--label", OP, "--json", js, "--html", page, "--png", png)
    j = Judge(f"--ab A B --html --png with {label} in a Size Detail")
    j.saw(r, "Error", "paired")
    if not j.rc(r, 0):
        return j
    j.want(strict_json(js).get("status") == "ok", "the JSON does not say ok")
    raw = page.read_text() if page.is_file() else ""
    j.want(label in html_lib.unescape(raw), "the page does not show the label verbatim")
    j.want((png / "ab_speedup.png").is_file(), "no ab_speedup.png")
    j.no_traceback(r)
    j.did = "exit 0: page and chart drawn, the label verbatim as text"
    return j


@attack("report_output_inside_an_input_run", needs=("A", "B"))
def output_inside_input(ctx, d):
    """--html A/run.log, --json B/run_identity.json, --png A, and through symlinks into A"""
    a, b = _pair(ctx, d)
    (d / "link_to_A").symlink_to(a, target_is_directory=True)
    (d / "page.html").symlink_to(a / "run.log")
    j = Judge("--ab A B with --html A/run.log, --json B/run_identity.json, --png A, --html link_to_A/run.log, "
              "--html page.html (a symlink to A/run.log)")
    before = {**tree(a), **{f"B/{k}": v for k, v in tree(b).items()}}
    said = []
    for flag, target in (("--html", a / "run.log"), ("--json", b / "run_identity.json"), ("--png", a),
                         ("--html", d / "link_to_A" / "run.log"), ("--html", d / "page.html")):
        r = ctx.bs(d, "--ab", a, b, flag, target)
        j.rc(r, 2)
        j.has(r.err, "inside the input run directory", f"{flag} {target.relative_to(d)}'s refusal")
        said.append(f"{flag} exit {r.rc}")
    after = {**tree(a), **{f"B/{k}": v for k, v in tree(b).items()}}
    j.want(after == before, "an input run's files changed: "
           + ", ".join(sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)))[:200])
    j.did = "; ".join(said) + ": " + quote_line(r.err, "inside the input")
    return j


@attack("stale_page_after_a_failed_report", needs=("A", "B"))
def stale_page(ctx, d):
    """a good report's page, then a refused, an empty and a failed one to the same outputs"""
    j = Judge("the same --html/--png/--json after a caliber refusal, no paired rows, a garbage run.log")
    said = []
    for failure, code in (("timer", 4), ("no rows", 5), ("garbage", 2)):
        a, b = _pair(ctx, d / failure.replace(" ", "_"))
        js, page, png = d / "ab.json", d / "ab.html", d / "png"
        args = ("--ab", a, b, "--label", OP, "--json", js, "--html", page, "--png", png)
        first = ctx.bs(d, *args)
        if not j.want(first.rc == 0 and page.is_file(), f"the honest report failed (exit {first.rc})"):
            return j
        log = b / "run.log"
        if failure == "timer":
            _set_identity(b, timer="direct")
        elif failure == "no rows":
            log.write_text("".join(x for x in log.read_text().splitlines(True) if not x.startswith("SUCCESS")))
        else:
            log.write_text("garbage\n")
        r = ctx.bs(d, *args)
        j.rc(r, code)
        j.want(not page.exists(), f"after the {failure} failure the earlier page is still there")
        j.want(not (png / "ab_speedup.png").exists(), f"after the {failure} failure the earlier chart is still there")
        data = json.loads(js.read_text())
        j.want(data.get("status") != "ok" and data.get("exit_code") == code,
               f"after the {failure} failure the JSON says status={data.get('status')!r} "
               f"exit_code={data.get('exit_code')!r}")
        gone = not page.exists() and not (png / "ab_speedup.png").exists() and data.get("status") != "ok"
        said.append(f"{failure}: exit {r.rc}, " + ("page, chart and ok JSON gone" if gone else "earlier outputs left"))
    j.did = "; ".join(said)
    return j


# ------------------------------------------------------------------ provenance

@attack("replay_paired_with_a_run_it_did_not_replay", needs=("B", "R"))
def other_record_run(ctx, d):
    """`--ab C B` where C is another record run and B replayed A"""
    c = ctx.copy("R", d / "C", skip_prev=True)
    b = ctx.copy("B", d / "B")
    r = ctx.bs(d, "--ab", c, b, "--label", OP)
    j = Judge("--ab C B, C another record run of mm, B a replay of A")
    j.saw(r, "autotune record link")
    j.rc(r, 4)
    j.has(r.out, "autotune record link: after replayed record", "the console")
    j.lacks(r.out, "paired rows", "the console")
    return j


@attack("side_a_recorded_again_after_b_replayed_it", needs=("B", "R"))
def rerecorded_a(ctx, d):
    """A's directory recorded again after B replayed it, then `--ab A B`"""
    a = ctx.copy("R", d / "A")
    b = ctx.copy("B", d / "B")
    r = ctx.bs(d, "--ab", a, b, "--label", OP)
    j = Judge("--ab A B after a new record run in A's directory (A's first run under prev-*)")
    j.saw(r, "autotune record link")
    j.rc(r, 4)
    j.has(r.out, "autotune record link", "the console")
    j.lacks(r.out, "paired rows", "the console")
    return j


@attack("ab_rounds_cell_replayed_an_edited_record", needs=("A", "B", "C", "E"))
def rounds_edited(ctx, d):
    """--ab-rounds over r1_A=A, r1_B=B, r2_A=C, r2_B=a replay of an edited record"""
    root = d / OP
    for cell, name in (("r1_A", "A"), ("r1_B", "B"), ("r2_A", "C"), ("r2_B", "E")):
        ctx.copy(name, root / cell)
    r = ctx.bs(d, "--ab-rounds", root, "--label", OP)
    j = Judge("--ab-rounds where r2_B replayed an edited copy of r1_A's record")
    j.saw(r, "r2_B replayed record", "autotune record link")
    j.rc(r, 4)
    j.has(r.out, "r2_B replayed record", "the console")
    j.has(r.out, "edited", "the console")
    return j


@attack("replayed_config_outside_the_tuners_candidates", needs=("A", "E"))
def foreign_config(ctx, d):
    """a record edited to a config the tuner does not list, replayed, then `--ab A E`"""
    a, e = _pair(ctx, d, "A", "E")
    ident = json.loads((e / "run_identity.json").read_text())
    r = ctx.bs(d, "--ab", a, e, "--label", OP)
    j = Judge("--ab A E, E replayed A's record edited to BLOCK_M=64 (not a candidate)")
    j.saw(r, "edited", "autotune record link")
    j.rc(r, 4)
    j.has(r.out, "the record was edited or rewritten", "the console")
    j.has((e / "run.log").read_text(), "AUTOTUNE_REPLAY_FOREIGN_CONFIG", "E's run.log")
    foreign = ident.get("replay_foreign_configs") or []
    j.want(any(x.get("reason") == "not_a_candidate" for x in foreign if isinstance(x, dict)),
           f"E's identity replay_foreign_configs={foreign!r} names no not_a_candidate key")
    w = ctx.bs(d, "--ab", a, e, "--label", OP, "--allow-caliber-mismatch")
    j.has(w.out, "its tuner does not list", "the report with --allow-caliber-mismatch")
    return j


@attack("replay_whose_every_key_fell_back", needs=("A", "F"))
def every_key_fell_back(ctx, d):
    """a replay that found none of its keys in the record (tuned live), paired as a replay"""
    a, f = _pair(ctx, d, "A", "F")
    ident = json.loads((f / "run_identity.json").read_text())
    r = ctx.bs(d, "--ab", a, f, "--label", OP)
    j = Judge(f"--ab A F, F replayed A's float16 record for float32 "
              f"(replay_replayed_keys={ident.get('replay_replayed_keys')})")
    j.saw(r, "replayed no recorded config", "record vs record")
    j.rc(r, 4)
    j.has(r.out, "replayed no recorded config (replay_replayed_keys=0", "the console")
    return j


@attack("runs_on_two_gpu_models", needs=("A", "B"))
def two_gpu_models(ctx, d):
    """A on an H200, B on an H100, both device 0 and arch 9.0"""
    a, b = _pair(ctx, d)
    _set_identity(a, device="0", device_name="NVIDIA H200", device_arch="9.0")
    _set_identity(b, device="0", device_name="NVIDIA H100 80GB HBM3", device_arch="9.0")
    r = ctx.bs(d, "--ab", a, b, "--label", OP)
    j = Judge("--ab A B with device_name H200 vs H100 (device 0, arch 9.0 on both)")
    j.saw(r, "device_name differs")
    j.rc(r, 4)
    j.has(r.out, "device_name differs", "the console")
    return j


@attack("interpreter_run_paired_with_a_gpu_run", needs=("A", "B"))
def interpreter_vs_gpu(ctx, d):
    """A ran in Triton's interpreter, B's identity says an H200"""
    a, b = _pair(ctx, d)
    _set_identity(b, device_name="NVIDIA H200", device_arch="9.0")
    r = ctx.bs(d, "--ab", a, b, "--label", OP)
    j = Judge("--ab A B, A device_arch=triton-interpreter, B an H200 (9.0)")
    j.saw(r, "device_arch differs")
    j.rc(r, 4)
    j.has(r.out, "device_arch differs", "the console")
    j.has(r.out, "triton-interpreter", "the console")
    return j


def _incomplete(ctx, d, j: Judge, a: Path, b: Path) -> Judge:
    js = d / "ab.json"
    r = ctx.bs(d, "--ab", a, b, "--label", OP, "--json", js)
    j.saw(r, "INCOMPLETE")
    if not j.rc(r, 0):
        return j
    j.has(r.out, f"!!! [ab] {OP}: INCOMPLETE: after did not finish", "the console")
    summary = strict_json(js).get("summary") or {}
    j.want(summary.get("complete") is False, f"the JSON says complete={summary.get('complete')!r}")
    return j


@attack("run_log_cut_before_pytests_final_line", needs=("A", "B"))
def cut_log(ctx, d):
    """B's run.log ends before pytest's final line (its identity still says complete)"""
    a, b = _pair(ctx, d)
    log = b / "run.log"
    text = log.read_text()
    m = re.search(r"^=+ .*\b(passed|failed)\b.* =+$", text, re.M)
    log.write_text(text[:m.start()] if m else text)
    j = Judge("--ab A B with B's run.log cut before pytest's final line")
    j.want(m is not None, "B's run.log has no pytest final line to cut")
    return _incomplete(ctx, d, j, a, b)


@attack("identity_says_the_run_never_finished", needs=("A", "B"))
def still_running(ctx, d):
    """B's identity says finished=running (killed mid-run), its log intact"""
    a, b = _pair(ctx, d)
    _set_identity(b, finished={"status": "running"})
    return _incomplete(ctx, d, Judge("--ab A B with B's identity finished={status: running}"), a, b)
