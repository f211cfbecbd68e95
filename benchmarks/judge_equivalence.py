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
  is a difference too.
Each batch's conditions are printed beside the tables (its run_batch.py command line and the
heap-freeze setting its runs' identities record), so the reader sees what the two paths were.

Report: stdout, and with --out DIR also DIR/judge_equivalence.json and .md.
Exit status: 0 every compared item agrees; 1 something differs (each difference listed);
2 bad arguments or a directory that is no batch.
"""
import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zl import atomic  # noqa: E402
from zl.batch.judge_first import stage_one  # noqa: E402
from zl.batch.screen import SIDES, read_screen_rows  # noqa: E402
from zl.batch.status import UNFINISHED, read_rows  # noqa: E402
from zl.ir.fingerprint import LEVEL_ORDER, load_record, run_levels  # noqa: E402
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

    def levels(self, side: str, key: Key) -> Dict[str, str]:
        d = self.run_dir(side, key)
        return run_levels(d, load_record(d)) if d.is_dir() else {}

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


def compare(fast: Batch, plain: Batch) -> Dict:
    """Every compared item, and the differences with what differs."""
    common = [k for k in fast.keys if k in set(plain.keys)]
    only = sorted(f"{r}:{n}" for r, n in set(fast.keys) ^ set(plain.keys))
    sides = [s for s in SIDES if s in fast.sides and s in plain.sides]
    counts = {"nodes": 0, "statuses": 0, "statuses_equal": 0, "verdicts": 0, "verdicts_equal": 0,
              "fingerprint_sides": 0, "levels": 0, "levels_equal": 0}
    diffs: List[Dict[str, str]] = []
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
            la, lb = fast.levels(side, key), plain.levels(side, key)
            counts["fingerprint_sides"] += 1
            for level in [lv for lv in LEVEL_ORDER if lv in la or lv in lb]:
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
    return {"counts": counts, "differences": diffs, "nodes_in_one_only": only, "unfinished": unfinished, "rows": rows,
            "fast": fast.conditions(), "plain": plain.conditions()}


def render(res: Dict) -> str:
    c = res["counts"]
    out = ["# Fast path against plain path: statuses, verdicts, fingerprints", ""]
    for name in ("fast", "plain"):
        cond = res[name]
        out.append(f"- {name}: `{cond['dir']}`, {cond['share_device']} case(s) per device, heap freeze "
                   f"{'/'.join(cond['gc_freeze']) or 'n/a'}; `{cond['argv']}`")
    out += ["", "| nodes | statuses equal | verdicts equal | PASS sides fingerprinted | levels equal |",
            "|---|---|---|---|---|",
            f"| {c['nodes']} | {c['statuses_equal']} of {c['statuses']} | {c['verdicts_equal']} of {c['verdicts']} "
            f"| {c['fingerprint_sides']} | {c['levels_equal']} of {c['levels']} |", ""]
    if res["differences"]:
        out += ["| node | what | fast | plain |", "|---|---|---|---|"]
        out += [f"| {d['node']} | {d['what']} | {d['fast']} | {d['plain']} |" for d in res["differences"]]
    else:
        out.append("Every compared status, verdict and fingerprint level agrees.")
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
