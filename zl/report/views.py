"""The numbers an HTML report shows, computed once and kept in the `--json` dict.

`batch_summary.py` builds its result dict (--ab, --ab-rounds) and calls `augment()`
on it, so the run identities, the A/A noise band, per-shape flags and the campaign
telemetry that the page shows are in `--json` too: the page is a view of that dict,
never a second computation. `screen_result()` and `batch_result()` build the dicts
for a screen root (ab_rlc_test.sh's screen.tsv) and a run_batch.py batch directory.
No matplotlib here: `--json` alone must not need it.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from statistics import median
from typing import Dict, List, Optional

from zl.runlog import caliber as cal
from zl.runlog.parse import RunLogError, read_run_log
from zl.runlog.stats import pair_logs

# Identity fields shown in a page's header table: the caliber, then what explains it.
IDENTITY_SHOWN = cal.CALIBER_FIELDS + (
    "autotune_mode", "graph_capture", "device_name", "device_arch", "triton_version",
    "torch_version", "flag_gems_version", "flaggems_commit", "op", "replay_from", "demo")
# Set by demo.sh in both runs' run_identity.json; any run carrying it makes the page
# say, above everything else, that its numbers mean nothing.
DEMO_FIELD = "demo"
SCREEN_FAILED_VERDICTS = ("NO_ROWS", "NO_TRITON")
TIMEOUT_RCS = ("124", "137")
_SIZE_RE = re.compile(r"Size\(\[([0-9,\s]*)\]\)")


class ReportInputError(ValueError):
    """A screen root / batch directory that cannot be read (batch_summary exit 2)."""


def size_of(detail: str) -> int:
    """Element count of the first torch.Size in a Size Detail (0 when there is none):
    only for ordering bars small to large, never shown as a number."""
    m = _SIZE_RE.search(detail or "")
    if not m:
        return 0
    dims = [int(x) for x in m.group(1).replace(" ", "").split(",") if x]
    return math.prod(dims) if dims else 1


def shape_label(item: Dict) -> str:
    """The one text naming a shape on a page (dtype is shown by the group)."""
    occ = item.get("occurrence") or 0
    return f"{item['size_detail']}{f' #{occ + 1}' if occ else ''}"


def identity_of(run_dir: Path) -> Dict[str, str]:
    try:
        data = json.loads((Path(run_dir) / cal.IDENTITY_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: str(data[k]) for k in IDENTITY_SHOWN if data.get(k) not in (None, "")}


def _demo(identities: Dict[str, Dict[str, str]]) -> Optional[str]:
    marked = sorted({i[DEMO_FIELD] for i in identities.values() if i.get(DEMO_FIELD)})
    return ", ".join(marked) or None


def _ab_flags(result: Dict) -> List[str]:
    flags = []
    for side in ("before", "after"):
        m = result.get("markers", {}).get(side, {})
        if m.get("no_cudagraph"):
            flags.append(f"{side}: {m['no_cudagraph']} BENCHMARK_DIRECT_NO_CUDAGRAPH (shape(s) timed "
                         "without graph capture: a different timer from the captured rows)")
        if m.get("capture_poisoned"):
            flags.append(f"{side}: {m['capture_poisoned']} BENCHMARK_CAPTURE_POISONED")
        if m.get("replay_fallback"):
            flags.append(f"{side}: {m['replay_fallback']} AUTOTUNE_REPLAY_FALLBACK (configs not "
                         "pinned: the sides may run different kernels)")
        n = result.get("failed_tests", {}).get(side, 0)
        if n:
            flags.append(f"{side}: {n} failed test(s): {result['failure_text'][side]}")
    for u in result.get("unpaired", []):
        flags.append(f"result mismatch: {u['dtype']} {shape_label(u)}: {u['reason']}")
    return flags


def _telemetry(root: Path) -> Optional[Dict]:
    """ab_repeat.sh samples the whole campaign into <campaign>/telemetry.tsv, next to
    status.tsv, one level above the operator's --ab-rounds root."""
    path = next((p for p in (root / "telemetry.tsv", root.parent / "telemetry.tsv")
                 if p.is_file() and (p.parent == root or (root.parent / "status.tsv").is_file())), None)
    if path is None:
        return None
    rows = []
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        for r in csv.DictReader(fh, delimiter="\t"):
            row: Dict = {"timestamp": r.get("timestamp", "")}
            for k in ("index", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "util_pct"):
                try:
                    row[k] = float(r[k]) if r.get(k) not in (None, "") else None
                except ValueError:
                    row[k] = None
            rows.append(row)
    return {"path": str(path), "rows": rows}


def augment(result: Dict) -> Dict:
    """Add identities, demo flag, noise band and flags to an --ab / --ab-rounds dict."""
    mode = result.get("mode")
    if mode == "ab":
        dirs = {"before": Path(result["before"]).parent, "after": Path(result["after"]).parent}
        result["identities"] = {s: identity_of(d) for s, d in dirs.items()}
        from zl.ir.fingerprint import compare  # the screen's own IR verdict, one implementation
        ir = compare(dirs["before"], dirs["after"])["status"]
        result["ir_compare"] = ir
        s = result["summary"]
        # Identical TTGIR with pinned configs makes this pair an A/A: its range is the noise.
        screen = dirs["before"].parent
        try:
            screen_band = screen_result(screen)["noise_band_pct"] if (screen / "screen.tsv").is_file() else None
        except ReportInputError:  # the pair itself is readable; only the band is unknown
            screen_band = None
        if ir == "same" and s.get("paired"):
            result["noise_band_pct"] = [s["min_pct"], s["max_pct"]]
            result["noise_source"] = "identical TTGIR on both sides: this pair is an A/A, its range is the noise"
        elif screen_band:
            # A pair inside an ab_rlc_test.sh root: that session's NO_IR_DIFF operators ran
            # the same code on both sides, so their range is the machine's noise floor.
            result["noise_band_pct"] = screen_band
            result["noise_source"] = f"range of the NO_IR_DIFF operators of the screen {screen}"
        else:
            result["noise_band_pct"] = None
            result["noise_source"] = None
        for p in result["paired"]:
            p["flags"] = []
        result["flags"] = _ab_flags(result)
    elif mode == "ab-rounds":
        root = Path(result["root"])
        cells = sorted(d for d in root.iterdir() if d.is_dir() and (d / "run.log").is_file()) \
            if root.is_dir() else []
        result["identities"] = {d.name: identity_of(d) for d in cells}
        noise = result.get("median_side_noise_pct")
        result["noise_band_pct"] = None if noise is None else [-noise, noise]
        result["noise_source"] = None if noise is None else "median side noise over shapes (max/min - 1 of a side's rounds)"
        for s in result.get("shapes", []):
            s["flags"] = [] if s.get("sign_stable", True) else ["unstable sign"]
        flags = []
        for cell, m in sorted(result.get("markers", {}).items()):
            for k, name in (("no_cudagraph", "BENCHMARK_DIRECT_NO_CUDAGRAPH"),
                            ("replay_fallback", "AUTOTUNE_REPLAY_FALLBACK"),
                            ("capture_poisoned", "BENCHMARK_CAPTURE_POISONED")):
                if m.get(k):
                    flags.append(f"{cell}: {m[k]} {name}")
        flags += [f"result mismatch: {u['dtype']} {shape_label(u)}: {u['reason']}"
                  for u in result.get("unpaired", [])]
        flags += [f"incomplete: {x}" for x in result.get("incomplete_rounds", [])]
        result["flags"] = flags
        result["telemetry"] = _telemetry(root)
    else:
        return result
    result["demo"] = _demo(result["identities"])
    return result


# ---------------------------------------------------------------- screen root

def _pair_summary(before: Path, after: Path) -> Dict:
    """--ab's summary of one screen cell, or why there is none."""
    if not (before / "run.log").is_file() or not (after / "run.log").is_file():
        return {"note": "run directories not found"}
    try:
        bl, al = read_run_log(before), read_run_log(after)
    except RunLogError as exc:
        return {"note": f"unreadable: {exc}"}
    rep = pair_logs(bl, al)
    out = dict(rep.summary())
    out["caliber_problems"] = cal.complaints([("before", before), ("after", after)])
    fails = "; ".join(x for x in (bl.failure_text(), al.failure_text()) if x)
    out["failure_text"] = fails
    return out


def _read_table(path: Path, what: str, need: set, delimiter: str = ",") -> List[Dict[str, str]]:
    """The rows of a screen.tsv / ops_status.csv; ReportInputError when it is missing or lacks
    the columns a page needs."""
    if not path.is_file():
        raise ReportInputError(f"{path.parent}: no {path.name} (is this {what}?)")
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        rows = list(csv.DictReader(fh, delimiter=delimiter))
    if not rows or not need <= set(rows[0]):
        raise ReportInputError(f"{path}: no rows with {' and '.join(sorted(need))} columns "
                               f"(expected columns {sorted(need)}, "
                               f"got {sorted(rows[0]) if rows else 'no rows'})")
    return rows


def screen_result(root: Path) -> Dict:
    root = Path(root)
    rows = _read_table(root / "screen.tsv", "an ab_rlc_test.sh root", {"op", "verdict"}, "\t")
    rows = [{k: (v or "") for k, v in r.items() if k is not None} for r in rows]  # short rows
    ops = []
    for r in rows:
        dt = r.get("dtypes") or ""
        cell = r["op"] if dt in ("", "<all>") else f"{r['op']}@{dt.replace(',', '+')}"
        pair = _pair_summary(root / f"{cell}_before", root / f"{cell}_after")
        ops.append({"op": r["op"], "op_file": r.get("op_file", ""), "dtypes": dt, "cell": cell,
                    "verdict": r["verdict"], "rows_before": r.get("rows_before", ""),
                    "rows_after": r.get("rows_after", ""), "rc_before": r.get("rc_before", ""),
                    "rc_after": r.get("rc_after", ""), **pair,
                    "caliber": {k: r.get(k, "") for k in cal.CALIBER_FIELDS}})
    for o in ops:
        o["failure_reason"] = _screen_reason(o)
    # NO_IR_DIFF only: a VARIANTS_DIFFER side may have timed a specialisation the other never ran.
    noise = [o for o in ops if o["verdict"] == "NO_IR_DIFF" and o.get("min_pct") is not None]
    band = [min(o["min_pct"] for o in noise), max(o["max_pct"] for o in noise)] if noise else None
    meds = [o["median_pct"] for o in ops if o.get("median_pct") is not None]
    return {"mode": "screen", "label": root.name, "root": str(root), "ops": ops,
            "verdict_counts": _counts(o["verdict"] for o in ops),
            "failures": _group(ops),
            "noise_band_pct": band,
            "noise_source": "range of the NO_IR_DIFF operators (same code on both sides)" if band else None,
            "median_speedups_pct": meds,
            "calibers_differ": len({tuple(v for k, v in o["caliber"].items()
                                          if k not in cal.PER_OPERATOR_FIELDS) for o in ops}) > 1,
            "demo": None}


def _screen_reason(o: Dict) -> Optional[str]:
    if o["rc_before"] in TIMEOUT_RCS or o["rc_after"] in TIMEOUT_RCS:
        return "CELL_TIMEOUT"
    if o["verdict"] not in SCREEN_FAILED_VERDICTS and o["rc_before"] == "0" and o["rc_after"] == "0":
        return None
    text = (o.get("failure_text") or "").split(";")[0].strip()
    return f"{o['verdict']}: {text}" if text else f"{o['verdict']} (rc {o['rc_before']}/{o['rc_after']})"


def _counts(values) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


def _group(items: List[Dict]) -> List[Dict]:
    groups: Dict[str, List[str]] = {}
    for it in items:
        if it.get("failure_reason"):
            groups.setdefault(it["failure_reason"], []).append(it.get("cell") or it["op"])
    return [{"reason": k, "ops": v} for k, v in sorted(groups.items(), key=lambda kv: -len(kv[1]))]


# ---------------------------------------------------------------- batch dir

def _num(text: str) -> Optional[float]:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


SHARED_NOTE = re.compile(r"(?:^|;)shared_device=(\d+)")


def shared_device_of(notes: str) -> str:
    """N from an ops_status note `shared_device=N` (run_batch.py --share-device); "" if none."""
    m = SHARED_NOTE.search(notes or "")
    return m.group(1) if m else ""


def shared_warning(shares) -> Optional[str]:
    """One line when any row was measured on a shared device, else None: such latencies
    (and speedups) were taken under contention and are a functional check only."""
    found = sorted({s for s in shares if s and s != "1"})
    if not found:
        return None
    return (f"rows measured on a shared device (device_share={','.join(found)}, run_batch.py "
            "--share-device): latencies and speedups are a functional check, not timings")


def batch_result(batch: Path) -> Dict:
    batch = Path(batch)
    rows = _read_table(batch / "ops_status.csv", "a run_batch.py batch", {"repo", "op", "status"})
    rows = [{k: (v or "") for k, v in r.items() if k is not None} for r in rows]  # short rows
    ops = []
    for r in rows:
        od = (r.get("out_dir") or "").strip()
        run = Path(od) if od else batch / r["repo"] / (r.get("run_name") or r["op"])
        if not run.is_absolute() and not run.is_dir():
            run = batch / run
        speedups, fail = [], ""
        try:
            parsed = read_run_log(run)
            speedups = [x.speedup for x in parsed.success_rows() if x.speedup is not None]
            fail = parsed.failure_text() if parsed.n_failed else ""
        except RunLogError as exc:
            fail = f"unreadable run.log: {exc}"
        o = {"repo": r["repo"], "op": r["op"], "run_name": r.get("run_name", ""),
             "status": r["status"], "return_code": r.get("return_code", ""),
             "elapsed_ms": _num(r.get("elapsed_ms", "")), "rows_total": _num(r.get("rows_total", "")),
             "rows_success": _num(r.get("rows_success", "")), "notes": r.get("notes", ""),
             "backend": r.get("backend", ""), "device": r.get("device", "") or r.get("gpu", ""),
             "timer": r.get("timer", ""), "run_dir": str(run),
             "device_share": shared_device_of(r.get("notes", "")),
             "median_speedup": median(speedups) if speedups else None, "failure_text": fail}
        # run_batch.py's PASS and SKIP are final, not failures (a runtime skip is upstream's own).
        ok = r["status"].strip().lower() in ("success", "ok", "passed", "pass", "skip")
        unfinished = r["status"].strip().upper() in ("PENDING", "RUNNING", "INTERRUPTED")
        o["failure_reason"] = None if ok else f"{r['status']}: not finished (run_batch.py --resume)" \
            if unfinished else (
            f"{r['status'] or 'no status'}: {(r.get('notes') or fail or 'rc ' + str(r.get('return_code', ''))).split(';')[0].strip()}")
        ops.append(o)
    return {"mode": "batch", "label": batch.name, "root": str(batch), "ops": ops,
            "status_counts": _counts(o["status"] for o in ops), "failures": _group(ops),
            "median_speedups": [o["median_speedup"] for o in ops if o["median_speedup"] is not None],
            "timing_warning": shared_warning(o["device_share"] for o in ops),
            "demo": None}
