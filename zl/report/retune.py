"""Codegen versus re-tuning: side C of `run_batch.py --switch NAME --retune` beside A and B.

Two deltas per node, both side A (NAME=0, tuned live, recorded) against a run with the
switch on:
- A vs B, the screen's own pair: the code change at equal configs (B replays A's picks);
- A vs C: what a user gets after re-tuning (C tunes live and records its own picks), so it
  is record vs record by design: the delta holds the code change and the tuner's new picks.
Both are judged by one rule (zl/report/verdicts.py): the same statistics (zl.runlog.stats),
the same A/A controls and caliber key (side A's), the node's own pair left out.

Per autotune key (kernel, key): C's pick against A's from the records each run wrote
(`autotune_records/<op>.json`, checked against the identity's `autotune_record_digest`):
same, other, or on one side only; and what became of A's pick when B replayed it under the
switch: replayed, failed (an AUTOTUNE_REPLAY_FALLBACK line in B's run.log: the config could
not be rebuilt, e.g. pre_hook_lost, or the whole record was unusable), pruned (B's identity
`replay_foreign_configs`: the switch's tuner no longer lists that config), no_a_config (B met
a key A never recorded: reason key_missing), not_met (B never looked the key up) or
unflagged (no marker names it and B left no `<op>.used.json` to confirm the replay).

A screen without `retuned/ops_status.csv` (no --retune) gets nothing from this module.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from zl.autotune import records as store
from zl.batch.screen import RETUNED, SIDES
from zl.report import verdicts as vd
from zl.report.run import LoadedRun, Runs
from zl.runlog import caliber as cal
from zl.runlog.parse import RunLogError
from zl.runlog.stats import pair_logs

WHICH = {
    "a_vs_b": ("codegen: side B (the switch on) replays side A's autotune picks, so the delta is "
               "the code change at equal configs (the screen's own pair: verdict, shapes, median_pct)"),
    "a_vs_c": ("after re-tuning: side C (the switch on) tunes live and records its own picks, so the "
               "delta is what a user gets, the code change plus the tuner's new picks (record vs "
               "record by design); judged by the same rule and controls as A vs B"),
}
PICKS = ("same", "other", "only_a", "only_c", "neither")
UNDER_SWITCH = ("replayed", "failed", "pruned", "no_a_config", "not_met", "unflagged")


def _side_c_rows(root: Path) -> Optional[Dict[Tuple[str, str], Dict[str, str]]]:
    """retuned/ops_status.csv by (repo, run_name); None when the screen ran no side C."""
    path = root / RETUNED / "ops_status.csv"
    if not path.is_file():
        return None
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        return {(r.get("repo") or "", r.get("run_name") or ""): r for r in csv.DictReader(fh)}


def record_of(run: LoadedRun) -> Tuple[Optional[store.Records], List[str]]:
    """(the autotune record the run wrote, problems): `autotune_records/<op>.json`, the op from
    meta.json, checked against the identity's `autotune_record_digest`."""
    rec_dir = run.dir / "autotune_records"
    try:
        op = json.loads((rec_dir / store.META_NAME).read_text(encoding="utf-8")).get("op") or ""
    except (OSError, ValueError, AttributeError):
        op = ""
    if not op or not store.record_path(str(rec_dir), op).is_file():
        return None, [f"{run.dir}: no autotune record (autotune_records/<op>.json with meta.json)"]
    try:
        doc = store.load_records(str(rec_dir), op)
    except store.RecordUnusable as exc:
        return None, [str(exc)]
    want = (run.identity or {}).get("autotune_record_digest")
    problems = [] if want == store.digest(doc) else [
        f"{store.record_path(str(rec_dir), op)} is not the record its run wrote (identity "
        f"autotune_record_digest {want or '<missing>'}, file {store.digest(doc)})"]
    return doc, problems


def config_text(cfg: Optional[Dict]) -> str:
    """`BLOCK=64 num_warps=4 num_stages=2`: the kwargs, then every other field set."""
    if cfg is None:
        return "-"
    parts = [f"{k}={v}" for k, v in sorted((cfg.get("kwargs") or {}).items())]
    parts += [f"{k}={v}" for k, v in sorted(cfg.items())
              if k not in ("kwargs", "pre_hook") and v not in (None, "", [], {})]
    return " ".join(parts + (["pre_hook"] if cfg.get("pre_hook") else [])) or "{}"


def _under_switch(b: Optional[LoadedRun]) -> Tuple[Dict[Tuple[str, str], Tuple[str, str]], str, bool]:
    """({(kernel, key): (what, reason)}, whole-run fallback reason or "", B itemised its keys)."""
    if b is None:
        return {}, "", False
    ident = b.identity or {}
    found: Dict[Tuple[str, str], Tuple[str, str]] = {}
    whole = ident.get("replay_fallback_reason", "") if ident.get("replay_fallback_scope") == "all" else ""
    try:
        events = list(b.parsed.replay_fallbacks)
    except RunLogError:
        events = []
    for e in events:
        if e["kernel"] == "*":
            whole = whole or e["reason"]
        else:
            found[(e["kernel"], e["key"])] = ("no_a_config" if e["reason"] == "key_missing" else "failed",
                                              e["reason"])
    for f in ident.get("replay_foreign_configs") or []:
        found.setdefault((str(f.get("kernel")), str(f.get("key"))), ("pruned", str(f.get("reason", ""))))
    try:
        used = store.load_used(str(b.dir / "autotune_records"))
    except store.RecordUnusable:
        used = {}
    for kernel, keys in used.items():
        for key in keys:
            found.setdefault((kernel, key), ("replayed", ""))
    return found, whole, bool(used)


def picks(a_rec: Optional[store.Records], c_rec: Optional[store.Records],
          b: Optional[LoadedRun]) -> Dict:
    """Per (kernel, key): A's config, C's, C's pick against A's, and A's pick under the switch."""
    a_rec, c_rec = a_rec or {}, c_rec or {}
    under, whole, itemised = _under_switch(b)
    keys = sorted({(k, key) for rec in (a_rec, c_rec) for k, v in rec.items() for key in v} | set(under))
    rows = []
    for kernel, key in keys:
        a, c = a_rec.get(kernel, {}).get(key), c_rec.get(kernel, {}).get(key)
        pick = (("same" if store.canonical(a) == store.canonical(c) else "other") if a is not None and c is not None
                else "only_a" if a is not None else "only_c" if c is not None else "neither")
        if whole and a is not None:
            what, why = "failed", f"whole record: {whole}"
        else:
            what, why = under.get((kernel, key)) or (("not_met" if itemised else "unflagged"), "")
        rows.append({"kernel": kernel, "key": key, "a": a, "c": c, "c_pick": pick,
                     "a_config": config_text(a), "c_config": config_text(c),
                     "a_under_switch": what, "reason": why})
    return {"keys": rows, "counts": {p: sum(r["c_pick"] == p for r in rows) for p in PICKS},
            "under_switch": {u: sum(r["a_under_switch"] == u for r in rows) for u in UNDER_SWITCH},
            "whole_record_fallback": whole or None}


def _caliber_problems(a: LoadedRun, c: LoadedRun) -> List[str]:
    """The caliber guard's complaints about A vs C, less autotune pinning (record vs record is
    this pair's point); plus a side C that did not tune and record."""
    out = cal.unpinned_complaints_of([("A", a.identity), ("C", c.identity)])
    mode = (c.identity or {}).get("autotune_mode")
    if mode != "record":
        out.append(f"side C's autotune_mode is {mode or '<missing>'}, not record: it did not tune "
                   "live and record its picks")
    return out


def _a_vs_c(a: LoadedRun, c: LoadedRun) -> Dict:
    try:
        rep = pair_logs(a.parsed, c.parsed)
    except RunLogError as exc:
        return {"note": f"unreadable: {exc}", "shapes": []}
    rep.before_unfinished, rep.after_unfinished = a.unfinished, c.unfinished
    return {**rep.summary(), "caliber_problems": _caliber_problems(a, c),
            "shapes": [{"dtype": p["key"][1], "size_detail": p["key"][2], "occurrence": p["key"][3],
                        "before_lat": p["before_lat"], "after_lat": p["after_lat"],
                        "speedup_pct": p["speedup_pct"]} for p in rep.paired]}


def add_to_screen(result: Dict, runs: Runs, false_alarm: float = vd.DEFAULT_FALSE_ALARM,
                  more: Sequence = ()) -> Optional[Dict]:
    """Each node of a run_batch.py --retune screen gets `retune` (side C's status, A vs B and
    A vs C side by side, the picks); the result gets `retune` (which delta is which, counts
    over nodes). Call after verdicts.judge_screen. None, and nothing added, without side C."""
    root = Path(result["root"])
    c_rows = _side_c_rows(root)
    if c_rows is None:
        return None
    controls, _ = vd.screen_controls(root, result["ops"], runs)
    if more:
        controls += vd.dir_controls(more, runs)[0]
    where = ("the A-vs-B rule's controls: the screen's A/A cells (every level identical, binary "
             "included)" + (f" and --controls {' '.join(map(str, more))}" if more else "")
             + ", this node's pair left out")
    judged, nodes, not_run = [], [], {}
    for o in result["ops"]:
        a_dir = Path(o["dirs"]["before"])
        try:
            repo, run_name = a_dir.relative_to(root / SIDES[0]).parts
        except ValueError:
            continue
        row = c_rows.get((repo, run_name))
        if row is None:
            continue
        a, b = runs.get(a_dir), runs.get(Path(o["dirs"]["after"]))
        c = runs.get(root / RETUNED / repo / run_name)
        node = {"side_c": {"status": row.get("status", ""), "return_code": row.get("return_code", ""),
                           "notes": row.get("notes", ""), "dir": str(c.dir)},
                "a_vs_b": {k: o.get(k) for k in ("median_pct", "min_pct", "max_pct", "geomean_pct",
                                                 "paired", "aa_verdict_counts")}}
        if row.get("status") == "PASS" and c.log.is_file():
            pair = _a_vs_c(a, c)
            if pair["shapes"]:
                calib = vd.Calibration(controls, vd.pair_key(a, c), where, false_alarm,
                                       exclude=[vd.pair_name(a_dir)])
                vd.apply(pair["shapes"], calib, "speedup_pct", "before_lat")
                pair["aa_verdict_counts"] = {v: sum(s["aa_verdict"] == v for s in pair["shapes"])
                                             for v in vd.VERDICTS}
                judged += [{"verdict": s["aa_verdict"], "false_alarm_bound": s["false_alarm_bound"]}
                           for s in pair["shapes"]]
            a_rec, a_bad = record_of(a)
            c_rec, c_bad = record_of(c)
            node["a_vs_c"] = pair
            node["picks"] = {**picks(a_rec, c_rec, b), "problems": a_bad + c_bad,
                             "a_digest": (a.identity or {}).get("autotune_record_digest"),
                             "c_digest": (c.identity or {}).get("autotune_record_digest")}
        o["retune"] = node
        if "a_vs_c" in node:
            nodes.append(o["cell"])
        else:
            not_run[o["cell"]] = node["side_c"]["status"]
    with_picks = [o["retune"]["picks"] for o in result["ops"] if "picks" in (o.get("retune") or {})]
    block = {"which": WHICH, "nodes": nodes, "side_c_not_run": not_run, "summary": vd.summary(judged),
             "picks": {p: sum(x["counts"][p] for x in with_picks) for p in PICKS},
             "under_switch": {u: sum(x["under_switch"][u] for x in with_picks) for u in UNDER_SWITCH}}
    result["retune"] = block
    return block


VERDICT_CLASS = {vd.FASTER: "up", vd.SLOWER: "down"}   # the page's colours


def _pct(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:+.2f}%"


def _nonzero(counts: Optional[Dict[str, int]]) -> str:
    return " ".join(f"{k}={n}" for k, n in (counts or {}).items() if n) or "-"


def _picks_text(p: Dict) -> str:
    return _nonzero(p.get("counts")) if p.get("keys") else "no autotuned key"


def changed_keys(node: Dict) -> List[Dict]:
    """The keys worth a line: C picked otherwise, or A's pick did not replay cleanly."""
    return [k for k in (node.get("picks") or {}).get("keys", [])
            if k["c_pick"] != "same" or k["a_under_switch"] not in ("replayed", "unflagged")]


def text_lines(prefix: str, result: Dict) -> List[str]:
    """The console lines: which delta is which, the counts, one line per node, one per key
    that differs."""
    block = result.get("retune")
    if not block:
        return []
    s = block["summary"]["counts"]
    lines = [f"{prefix}: A vs B = {WHICH['a_vs_b']}", f"{prefix}: A vs C = {WHICH['a_vs_c']}",
             f"{prefix}: A vs C verdicts over {len(block['nodes'])} node(s): " + _nonzero(s)
             + f"; C's picks vs A's: {_nonzero(block['picks'])}; A's picks under the switch: "
             + _nonzero(block["under_switch"])]
    for o in result["ops"]:
        node = o.get("retune")
        if not node:
            continue
        ac, ab = node.get("a_vs_c"), node["a_vs_b"]
        if ac is None:
            lines.append(f"{prefix} {o['cell']}: side C {node['side_c']['status']}"
                         + (f" ({node['side_c']['notes']})" if node["side_c"]["notes"] else ""))
            continue
        p = node["picks"]
        lines.append(f"{prefix} {o['cell']}: A vs B {_pct(ab['median_pct'])} ({_nonzero(ab['aa_verdict_counts'])}) | "
                     f"A vs C {_pct(ac.get('median_pct'))} ({_nonzero(ac.get('aa_verdict_counts'))}) | "
                     f"C's picks {_picks_text(p)} | A's under the switch {_nonzero(p['under_switch'])}")
        for x in ac.get("caliber_problems", []) + p["problems"]:
            lines.append(f"!!! {prefix} {o['cell']}: {x}")
        for k in changed_keys(node):
            lines.append(f"{prefix} {o['cell']}:   {k['kernel']} {k['key']}: A {k['a_config']} -> C "
                         f"{k['c_config']} ({k['c_pick']}); A's under the switch: {k['a_under_switch']}"
                         + (f" ({k['reason']})" if k["reason"] else ""))
    return lines


def html_section(result: Dict, table: Callable[..., str], esc: Callable[[object], str]) -> str:
    """The page's compact section, drawn with the page's own `table` and `esc` (zl/report/html.py):
    one row per node with side C (both deltas side by side), then one row per key that differs.
    "" without side C."""
    block = result.get("retune")
    if not block:
        return ""

    def num(v: Optional[float]):
        return (_pct(v), "" if v is None else f"{v:.6g}", "" if not v else ("up" if v > 0 else "down"))

    nodes, keys = [], []
    for o in result["ops"]:
        node = o.get("retune")
        if not node:
            continue
        ac, ab, p = node.get("a_vs_c") or {}, node["a_vs_b"], node.get("picks") or {}
        nodes.append([o["cell"], node["side_c"]["status"], num(ab["median_pct"]),
                      _nonzero(ab["aa_verdict_counts"]), num(ac.get("median_pct")),
                      _nonzero(ac.get("aa_verdict_counts")), _picks_text(p) if p else "-",
                      _nonzero(p.get("under_switch")),
                      "; ".join(ac.get("caliber_problems", []) + p.get("problems", []) + (
                          [node["side_c"]["notes"]] if not ac and node["side_c"]["notes"] else []))])
        keys += [[o["cell"], k["kernel"], k["key"], k["a_config"], k["c_config"], k["c_pick"],
                  (k["a_under_switch"], None, "down" if k["a_under_switch"] in ("failed", "pruned") else ""),
                  k["reason"]] for k in changed_keys(node)]
    s = block["summary"]["counts"]
    return ('<div id="retune"><h2>Codegen vs re-tuning (side C)</h2>'
            f'<div class="sub">A vs B: {esc(WHICH["a_vs_b"])}</div>'
            f'<div class="sub">A vs C: {esc(WHICH["a_vs_c"])}</div><div>'
            + "".join(f'<span class="kpi">A vs C {esc(k)} <b class="{VERDICT_CLASS.get(k, "")}">{n}</b></span>'
                      for k, n in s.items())
            + "</div>" + table(["node", "side C", "A vs B median", "A vs B verdicts", "A vs C median",
                                "A vs C verdicts", "C's picks vs A's", "A's picks under the switch",
                                "notes"], nodes, sortable=True)
            + (table(["node", "kernel", "key", "A's config", "C's config", "C's pick",
                      "A's pick under the switch", "reason"], keys) if keys else
               '<div class="sub">every key: C picked A\'s config, and B replayed it</div>')
            + "</div>")
