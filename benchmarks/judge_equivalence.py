#!/usr/bin/env python3
"""Do two judged batches of the same nodes say the same thing? Per node: each side's status,
the screen's verdict, and each side's IR fingerprint at every level.

    python3 benchmarks/judge_equivalence.py FAST PLAIN [--out DIR]

FAST and PLAIN are run_batch.py batch directories over the same nodes: a judge-first screen
(its stage 1, `<dir>/judge`, is read), a screen batch (`before/`, `after/`, screen.tsv) or a
plain `--judge` batch (one side, read as side before). The tool is the check that zl_bench's
fast path (many cases per device, a shared bytecode cache, the heap freeze, side A linked from a
`--baseline`) decides what the plain path decides: a cache or a neighbour that changed one
node's code or results would show here as a fingerprint or verdict that differs.

Compared, for every node both batches list and both finished (a node with a side PENDING,
RUNNING or INTERRUPTED in either, a batch cut short, is listed as unfinished, not compared):
- status of each side both have (PASS, TIMEOUT, SKIP...);
- the screen verdict (screen.tsv), where both are screens;
- for each side PASSed in both: every IR level both recorded (`<run>/ttgir/ir_fingerprints.json`,
  else hashed from the dumped files), hash for hash. A level one side has and the other lacks
  is a difference too. Unless the two runs of that side picked other autotune configs.

Autotune picks. The compiled code follows the pick, and autotuning times candidates, so under
contention two independent runs need not pick alike: on an H100, any's key 1048576,1024 picked
BLOCK_M 2, 8 and 1 in three runs, and every level of the three nodes that picked otherwise
differed (24 of 240 levels over 40 nodes). Each side's picks are read first
(zl.autotune.records.ran_with: a replay's `<op>.used.json`, what side B ran, keys it tuned
live after a fallback included; else the recorded `<op>.json`; neither: no autotuned kernel,
`{}`). Where a (kernel, key) both runs tuned has another config in each, the side is listed
under "autotune picks differ" with the first such key, both configs and the levels that
differ; its run-wide levels are not compared. Its variants are, where both runs recorded
per-variant digests (zl.ir.per_variant, matched by identity, config included): one both runs
compiled that differs is a difference, and so is one compiled in one run only whose kernel has
no other pick (no pick explains it); in the measured runs the variants both compiled were
equal (52 of 52), those of one run only all of the kernel picked otherwise. Any other case is
compared as above: picks equal; keys tuned in one run only (a record on one side only
included: no nondeterministic pick but other kernels or shapes met, or a record lost); an
unreadable record (picks unknown). The last two are noted.

Each batch's conditions are printed beside the tables (its run_batch.py command line and the
heap-freeze setting its runs' identities record), so the reader sees what the two paths were.

Report: stdout, and with --out DIR also DIR/judge_equivalence.json and .md.
Exit status: 0 every compared item agrees (sides whose autotune picks differ are listed, not
failed); 1 something differs (each difference listed); 2 bad arguments or a directory that is
no batch.
"""
import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zl import atomic  # noqa: E402
from zl.autotune import records as store  # noqa: E402
from zl.batch.judge_first import stage_one  # noqa: E402
from zl.batch.screen import SIDES, read_screen_rows  # noqa: E402
from zl.batch.status import UNFINISHED, read_rows  # noqa: E402
from zl.ir import per_variant  # noqa: E402
from zl.ir.fingerprint import LEVEL_ORDER, load_record, run_levels  # noqa: E402
from zl.report.retune import config_text  # noqa: E402
from zl.runlog.caliber import read_identity  # noqa: E402

Key = Tuple[str, str]


class NotABatch(ValueError):
    """A directory holding no batch this tool can read (exit 2)."""


class Batch:
    """One batch's sides: {side: {key: status row}}, its screen rows, and where its runs are."""

    def __init__(self, given: Path):
        self.given = Path(given)
        self.root = root = stage_one(self.given)
        # {side: its directory}: a screen's before/ and after/, or a plain batch as side before
        if (root / SIDES[0] / "ops_status.csv").is_file():
            self.side_dirs = {side: root / side for side in SIDES if (root / side / "ops_status.csv").is_file()}
        elif (root / "ops_status.csv").is_file():
            self.side_dirs = {SIDES[0]: root}
        else:
            raise NotABatch(f"{given}: no ops_status.csv (neither a batch, a screen nor a judge-first screen)")
        self.sides: Dict[str, Dict[Key, Dict[str, str]]] = {
            side: read_rows(d / "ops_status.csv") for side, d in self.side_dirs.items()}
        self.screen = read_screen_rows(root / "screen.tsv")
        self.keys = list(dict.fromkeys(k for rows in self.sides.values() for k in rows))

    def run_dir(self, side: str, key: Key) -> Path:
        """The side's case directory, found under the batch (a moved bundle's out_dir is stale)."""
        return self.side_dirs[side] / key[0] / key[1]

    def ir(self, side: str, key: Key) -> Tuple[Dict[str, str], Optional[Dict]]:
        """({level: hash}, the run's ir_fingerprints.json or None)."""
        d = self.run_dir(side, key)
        doc = load_record(d) if d.is_dir() else None
        return (run_levels(d, doc) if d.is_dir() else {}), doc

    def picks(self, side: str, key: Key) -> Tuple[Optional[store.Records], str]:
        """(the autotune picks the side's run followed, why they are unknown when None)."""
        try:
            return store.ran_with(str(self.run_dir(side, key))), ""
        except store.RecordUnusable as exc:
            return None, f"unreadable autotune record, picks unknown: {exc}"

    def conditions(self) -> Dict[str, object]:
        try:
            record = json.loads((self.root / "batch.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {}
        calls = record.get("calls") or [{}]
        freeze = sorted({(read_identity(self.run_dir(s, k)) or {}).get("gc_freeze", "on")
                         for s, rows in self.sides.items() for k, r in rows.items()
                         if r.get("status") == "PASS" and self.run_dir(s, k).is_dir()})
        return {"dir": str(self.given), "argv": " ".join(calls[0].get("argv") or record.get("argv") or []),
                "share_device": record.get("share_device"), "gc_freeze": freeze}


def _variant_name(ident: Dict) -> str:
    return f"{ident.get('shape')}/{ident.get('kernel')}"


def by_variant(doc_a: Optional[Dict], doc_b: Optional[Dict], levels: List[str],
               other: List[Tuple[str, str]]) -> Optional[Dict]:
    """A side whose picks differ, variant by variant (zl.ir.per_variant: matched by identity,
    config included): {'common': n, 'differ': [(level, variant, hash a, hash b)], 'one_sided': n,
    'unexplained': [(variant, side 'fast'|'plain')]}, a one-sided variant being unexplained when
    no other pick of its kernel and no specialisation accounts for it. None without per-variant
    digests on both sides under one schema."""
    va, vb = [(d or {}).get("per_variant") for d in (doc_a, doc_b)]
    if not (isinstance(va, list) and isinstance(vb, list) and va and vb) \
            or doc_a.get("schema_version") != doc_b.get("schema_version"):
        return None
    try:
        m = per_variant.match(va, vb)
    except per_variant.PerVariantError:
        return None
    differ, bad = [], set()
    for level in levels:
        first = None
        for vkey, (ea, eb) in m["common"].items():
            ha, hb = (sorted(str(e["levels"].get(level)) for e in es) for es in (ea, eb))
            if ha != hb:
                bad.add(vkey)
                first = first or (level, _variant_name(ea[0]["identity"]), ",".join(h[:12] for h in ha),
                                  ",".join(h[:12] for h in hb))
        differ += [first] if first else []
    picked = {kernel.rsplit(".", 1)[-1] for kernel, _ in other}
    loose = {per_variant.key_of(i) for i in m["unexplained"] if str(i.get("kernel")) not in picked}
    unexplained = [(_variant_name(i), name) for name, only in (("fast", m["only_a"]), ("plain", m["only_b"]))
                   for i in only if per_variant.key_of(i) in loose]
    return {"common": len(m["common"]), "common_equal": len(m["common"]) - len(bad), "differ": differ,
            "one_sided": len(m["only_a"]) + len(m["only_b"]), "unexplained": unexplained}


def compare(fast: Batch, plain: Batch) -> Dict:
    """Every compared item, and the differences with what differs."""
    common = [k for k in fast.keys if k in set(plain.keys)]
    only = sorted(f"{r}:{n}" for r, n in set(fast.keys) ^ set(plain.keys))
    sides = [s for s in SIDES if s in fast.sides and s in plain.sides]
    counts = {"nodes": 0, "statuses": 0, "statuses_equal": 0, "verdicts": 0, "verdicts_equal": 0,
              "fingerprint_sides": 0, "levels": 0, "levels_equal": 0,
              "picks_differ_sides": 0, "picks_differ_levels": 0, "picks_differ_levels_equal": 0,
              "picks_differ_variants": 0, "picks_differ_variants_equal": 0, "picks_differ_uncompared": 0}
    diffs: List[Dict[str, str]] = []
    picks_differ: List[Dict[str, object]] = []
    pick_notes: List[Dict[str, str]] = []
    rows: List[Dict[str, str]] = []
    unfinished = []
    for key in common:
        node = f"{key[0]}:{key[1]}"
        if any(b.sides[side].get(key, {}).get("status") in UNFINISHED for b in (fast, plain) for side in sides):
            unfinished.append(node)      # a batch cut short: nothing to compare yet
            continue
        row = {"node": node}
        for side in sides:
            a = fast.sides[side].get(key, {}).get("status", "-")
            b = plain.sides[side].get(key, {}).get("status", "-")
            row[f"status_{side}"] = a if a == b else f"{a} / {b}"
            counts["statuses"] += 1
            if a != b:
                diffs.append({"node": node, "what": f"status {side}", "fast": a, "plain": b})
                continue
            counts["statuses_equal"] += 1
            if a != "PASS":
                continue
            (la, doc_a), (lb, doc_b) = fast.ir(side, key), plain.ir(side, key)
            levels = [lv for lv in LEVEL_ORDER if lv in la or lv in lb]
            (pa, why_a), (pb, why_b) = fast.picks(side, key), plain.picks(side, key)
            other = store.other_picks(pa, pb) if pa is not None and pb is not None else []
            if other:       # the code follows the pick: the run's levels are not compared
                kernel, tkey = other[0]
                same = [lv for lv in levels if la.get(lv) == lb.get(lv)]
                counts["picks_differ_sides"] += 1
                counts["picks_differ_levels"] += len(levels)
                counts["picks_differ_levels_equal"] += len(same)
                var = by_variant(doc_a, doc_b, levels, other)
                if var is None:
                    counts["picks_differ_uncompared"] += 1
                else:       # the variants both runs compiled (same config) still compare
                    counts["picks_differ_variants"] += var["common"]
                    counts["picks_differ_variants_equal"] += var["common_equal"]
                    diffs += [{"node": node, "what": f"{lv} {side}, {name} (compiled in both runs)",
                               "fast": ha, "plain": hb} for lv, name, ha, hb in var["differ"]]
                    diffs += [{"node": node, "what": f"variant {side} in one run only, no other pick of its "
                               "kernel", "fast": name if who == "fast" else "-",
                               "plain": name if who == "plain" else "-"} for name, who in var["unexplained"]]
                picks_differ.append({
                    "node": node, "side": side, "kernel": kernel, "key": tkey,
                    "fast": config_text(pa[kernel][tkey]), "plain": config_text(pb[kernel][tkey]),
                    "keys_other": len(other),
                    "keys_both": sum(t in pb.get(k, {}) for k, v in pa.items() for t in v),
                    "levels_differ": [lv for lv in levels if lv not in same], "variants": var})
                row[f"levels_{side}"] = "picks differ"
                continue
            for why in (why_a and f"fast: {why_a}", why_b and f"plain: {why_b}"):
                if why:
                    pick_notes.append({"node": node, "side": side, "note": why})
            if pa is not None and pb is not None and store.digest(pa) != store.digest(pb):
                pick_notes.append({"node": node, "side": side, "note": "autotune keys tuned in one run only "
                                   "(no nondeterministic pick: other kernels or shapes, or a record lost)"})
            counts["fingerprint_sides"] += 1
            for level in levels:
                counts["levels"] += 1
                if la.get(level) == lb.get(level):
                    counts["levels_equal"] += 1
                else:
                    diffs.append({"node": node, "what": f"{level} {side}", "fast": (la.get(level) or "none")[:12],
                                  "plain": (lb.get(level) or "none")[:12]})
            row[f"levels_{side}"] = ",".join(lv for lv in LEVEL_ORDER if lv in la and la.get(lv) == lb.get(lv))
        if key in fast.screen and key in plain.screen:
            va, vb = fast.screen[key].get("verdict", ""), plain.screen[key].get("verdict", "")
            row["verdict"] = va if va == vb else f"{va} / {vb}"
            counts["verdicts"] += 1
            if va == vb:
                counts["verdicts_equal"] += 1
            else:
                diffs.append({"node": node, "what": "verdict", "fast": va, "plain": vb})
        rows.append(row)
    counts["nodes"] = len(rows)
    return {"counts": counts, "differences": diffs, "picks_differ": picks_differ, "pick_notes": pick_notes,
            "nodes_in_one_only": only, "unfinished": unfinished, "rows": rows,
            "fast": fast.conditions(), "plain": plain.conditions()}


def render(res: Dict) -> str:
    c = res["counts"]
    out = ["# Fast path against plain path: statuses, verdicts, fingerprints", ""]
    for name in ("fast", "plain"):
        cond = res[name]
        out.append(f"- {name}: `{cond['dir']}`, {cond['share_device']} case(s) per device, heap freeze "
                   f"{'/'.join(cond['gc_freeze']) or 'n/a'}; `{cond['argv']}`")
    picked = "0"
    if c["picks_differ_sides"]:
        differing = c["picks_differ_levels"] - c["picks_differ_levels_equal"]
        picked = (f"{c['picks_differ_sides']} (levels differing {differing} of {c['picks_differ_levels']}, "
                  "not compared; variants compiled in both equal "
                  f"{c['picks_differ_variants_equal']} of {c['picks_differ_variants']}"
                  + (f"; {c['picks_differ_uncompared']} without per-variant digests"
                     if c["picks_differ_uncompared"] else "") + ")")
    out += ["", "| nodes | statuses equal | verdicts equal | PASS sides fingerprinted | levels equal "
            "| PASS sides with other autotune picks |", "|---|---|---|---|---|---|",
            f"| {c['nodes']} | {c['statuses_equal']} of {c['statuses']} | {c['verdicts_equal']} of {c['verdicts']} "
            f"| {c['fingerprint_sides']} | {c['levels_equal']} of {c['levels']} | {picked} |", ""]
    if res["differences"]:
        out += ["| node | what | fast | plain |", "|---|---|---|---|"]
        out += [f"| {d['node']} | {d['what']} | {d['fast']} | {d['plain']} |" for d in res["differences"]]
    else:
        out.append("Every compared status, verdict and fingerprint level agrees.")
    if res["picks_differ"]:
        out += ["", "## autotune picks differ (the code follows the pick; not compared, but for the variants "
                "both runs compiled)", "",
                "| node | side | first kernel | key | fast's config | plain's config | keys picked otherwise "
                "| levels differing | variants compiled in both: equal | in one run |", "|---" * 10 + "|"]
        for p in res["picks_differ"]:
            v = p["variants"]
            out.append(f"| {p['node']} | {p['side']} | {p['kernel']} | {p['key']} | {p['fast']} | {p['plain']} "
                       f"| {p['keys_other']} of {p['keys_both']} | {','.join(p['levels_differ']) or 'none'} | "
                       + (f"{v['common_equal']} of {v['common']} | {v['one_sided']} |" if v
                          else "no per-variant digests | - |"))
    if res["pick_notes"]:
        out += ["", "Autotune picks that excuse nothing (levels compared):"]
        out += [f"- {n['node']} {n['side']}: {n['note']}" for n in res["pick_notes"]]
    if res["unfinished"]:
        out += ["", "Unfinished in either batch (not compared): " + ", ".join(res["unfinished"])]
    if res["nodes_in_one_only"]:
        out += ["", "In one batch only (not compared): " + ", ".join(res["nodes_in_one_only"])]
    return "\n".join(out) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="judge_equivalence.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fast", type=Path, help="the batch of the fast path")
    ap.add_argument("plain", type=Path, help="the batch of the plain path, same nodes")
    ap.add_argument("--out", type=Path, help="also write judge_equivalence.json and .md here")
    args = ap.parse_args(argv)
    try:
        res = compare(Batch(args.fast), Batch(args.plain))
    except NotABatch as exc:
        print(f"!!! {exc}", file=sys.stderr)
        return 2
    if not res["counts"]["nodes"]:
        print(f"!!! {args.fast} and {args.plain} share no finished node", file=sys.stderr)
        return 2
    text = render(res)
    sys.stdout.write(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic.write_json(args.out / "judge_equivalence.json", res)
        atomic.write_text(args.out / "judge_equivalence.md", text)
    return 1 if res["differences"] else 0


if __name__ == "__main__":
    sys.exit(main())
