"""The numbers an HTML report shows, computed once and kept in the `--json` dict.

The --ab and --ab-rounds reports build their result dict and call `augment()` on it with
the runs they loaded, so the run identities, the A/A noise band, per-shape flags and the
campaign telemetry that the page shows are in `--json` too: the page is a view of that
dict, never a second computation. `screen_result()` and `batch_result()` build the dicts
for a screen root (ab_rlc_test.sh's screen.tsv) and a run_batch.py batch directory. Every
run is read through one LoadedRun (zl/report/run.py). No matplotlib here: `--json` alone
must not need it.
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from pathlib import Path
from statistics import median
from typing import Dict, List, Mapping, Optional, Tuple

from zl.ir import fingerprint as fp
from zl.report.run import LoadedRun, Runs, code_facts, pair_code
from zl.runlog import caliber as cal
from zl.runlog.parse import RunLogError
from zl.runlog.stats import pair_logs

# Identity fields shown in a page's header table: the caliber, then what explains it.
IDENTITY_SHOWN = tuple(dict.fromkeys(cal.CALIBER_FIELDS + (
    "autotune_mode", "graph_capture", "device_name", "device_arch", "triton_version",
    "torch_version", "flag_gems_version", "flaggems_commit", "op", "replay_from", "demo")))
# Set by demo.sh in both runs' run_identity.json; any run carrying it makes the page
# say, above everything else, that its numbers mean nothing.
DEMO_FIELD = "demo"
SCREEN_FAILED_VERDICTS = ("NO_ROWS", "NO_TRITON")
WRONG_RESULTS = "WRONG_RESULTS"
TIMEOUT_RCS = ("124", "137")
COUNTS = ("kernels_before", "kernels_after", "cvt_before", "cvt_after")   # screen.tsv columns
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


def shown_identity(identity: Optional[Dict]) -> Dict[str, str]:
    """The IDENTITY_SHOWN fields of an identity dict (LoadedRun.identity) as text."""
    data = identity or {}
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
    for side, why in (result.get("summary", {}).get("unfinished") or {}).items():
        flags.append(f"INCOMPLETE: {side} did not finish: {why}")
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
                row[k] = finite(r.get(k))
            rows.append(row)
    return {"path": str(path), "rows": rows}


def finite(text) -> Optional[float]:
    """A table cell as a finite float; None when empty, not a number, inf or nan (--json
    must stay standard JSON, which has no Infinity or NaN)."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def ab_noise_band(before_dir: Path, code: Dict, summary: Dict, runs: Optional[Runs] = None) -> Dict:
    """{'noise_band_pct': [lo, hi] or None, 'noise_source': where it comes from, or why
    there is none}. The pair's own range only when every recorded level is identical on
    both sides (run.pair_code); else, for a pair inside an ab_rlc_test.sh root, the range
    of that screen's A/A operators (its cells read through `runs`, the pair's among them)."""
    if code["identical_everywhere"] and summary.get("paired"):
        return {"noise_band_pct": [summary["min_pct"], summary["max_pct"]],
                "noise_source": f"{code['reason']}: this pair is an A/A, its range is the noise"}
    screen = Path(before_dir).parent
    band = None
    if (screen / "screen.tsv").is_file():
        try:
            band = screen_result(screen, runs)["noise_band_pct"]
        except ReportInputError:  # the pair itself is readable; only the band is unknown
            band = None
    if band:
        # That screen's A/A operators ran the same code on both sides: the machine's noise.
        return {"noise_band_pct": band,
                "noise_source": f"range of the A/A operators of the screen {screen} (this pair is "
                                f"not an A/A: {code['reason']})"}
    return {"noise_band_pct": None, "noise_source": f"this pair is not an A/A: {code['reason']}"}


def augment(result: Dict, runs: Mapping[str, LoadedRun]) -> Dict:
    """Add identities (of `runs`, by the name the page shows), demo flag, noise band and
    flags to an --ab / --ab-rounds dict."""
    mode = result.get("mode")
    if mode not in ("ab", "ab-rounds"):
        raise ValueError(f"augment: no page extras for mode {mode!r}")
    result["identities"] = {name: shown_identity(run.identity) for name, run in runs.items()}
    if mode == "ab":
        # report_ab judged the code (every level) and the band once; the page shows those.
        for p in result["paired"]:
            p["flags"] = []
        result["flags"] = _ab_flags(result)
    elif mode == "ab-rounds":
        root = Path(result["root"])
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
    result["demo"] = _demo(result["identities"])
    return result


# ---------------------------------------------------------------- screen root

def _pair_summary(brun: LoadedRun, arun: LoadedRun) -> Dict:
    """--ab's summary of one screen cell, or why there is none."""
    if not brun.log.is_file() or not arun.log.is_file():
        return {"note": "run directories not found"}
    try:
        bl, al = brun.parsed, arun.parsed
    except RunLogError as exc:
        return {"note": f"unreadable: {exc}"}
    rep = pair_logs(bl, al)
    rep.before_unfinished, rep.after_unfinished = brun.unfinished, arun.unfinished
    out = dict(rep.summary())
    out["shapes"] = [{"dtype": p["key"][1], "size_detail": p["key"][2], "occurrence": p["key"][3],
                      "before_lat": p["before_lat"], "speedup_pct": p["speedup_pct"]}
                     for p in rep.paired]
    out["caliber_problems"] = cal.complaints_of([("before", brun.identity), ("after", arun.identity)])
    fails = "; ".join(x for x in (bl.failure_text(), al.failure_text()) if x)
    out["failure_text"] = fails
    return out


def _read_table(path: Path, what: str, need: set, delimiter: str = ",",
                allow_empty: bool = False) -> List[Dict[str, str]]:
    """The rows of a screen.tsv / ops_status.csv; ReportInputError when it is missing or lacks
    the columns a page needs. `allow_empty`: a header with the needed columns and no row is
    an empty table, not an error."""
    if not path.is_file():
        raise ReportInputError(f"{path.parent}: no {path.name} (is this {what}?)")
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.DictReader(fh, delimiter=delimiter)
        rows = list(reader)
        header = set(reader.fieldnames or ())
    if allow_empty and not rows and need <= header:
        return []
    if not rows or not need <= set(rows[0]):
        raise ReportInputError(f"{path}: no rows with {' and '.join(sorted(need))} columns "
                               f"(expected columns {sorted(need)}, "
                               f"got {sorted(rows[0]) if rows else 'no rows'})")
    return rows


def screen_result(root: Path, runs: Optional[Runs] = None) -> Dict:
    """The --screen dict of an ab_rlc_test.sh root; its cells read through `runs` (a report
    that already loaded some of them passes its own)."""
    root, runs = Path(root), runs or Runs()
    # A screen stopped during its first cell has a header and no row; with its requested list
    # it reports INCOMPLETE (every requested cell never judged) instead of an unreadable table.
    rows = _read_table(root / "screen.tsv", "an ab_rlc_test.sh root", {"op", "verdict"}, "\t",
                       allow_empty=(root / SCREEN_REQUESTED).is_file())
    rows = [{k: (v or "") for k, v in r.items() if k is not None} for r in rows]  # short rows
    ops = []
    for r in rows:
        dt = r.get("dtypes") or ""
        cell = r["op"] if dt in ("", "<all>") else f"{r['op']}@{dt.replace(',', '+')}"
        before, after = _cell_runs(root, r, cell, runs)
        pair = _pair_summary(before, after)
        ops.append({"op": r["op"], "op_file": r.get("op_file", ""), "dtypes": dt, "cell": cell,
                    "verdict": r["verdict"], "rows_before": r.get("rows_before", ""),
                    "rows_after": r.get("rows_after", ""), "rc_before": r.get("rc_before", ""),
                    "rc_after": r.get("rc_after", ""), **pair,
                    "results": r.get("results", ""), "results_torch": r.get("results_torch", ""),
                    "code": _screen_code(r, before, after), "counts": {k: r.get(k, "") for k in COUNTS},
                    "dirs": {"before": str(before.dir), "after": str(after.dir)},
                    "caliber": {k: r.get(k, "") for k in cal.CALIBER_FIELDS}})
    for o in ops:
        o["failure_reason"] = _screen_reason(o)
    completion = screen_completion(root, [o["cell"] for o in ops])
    # A/A operators only (NO_IR_DIFF, every level identical, binary included: a VARIANTS_DIFFER
    # side may have timed a specialisation the other never ran) that the caliber guard accepts.
    noise = [o for o in ops if o["code"]["aa"] and o.get("min_pct") is not None and not o.get("caliber_problems")]
    band = [min(o["min_pct"] for o in noise), max(o["max_pct"] for o in noise)] if noise else None
    meds = [o["median_pct"] for o in ops if o.get("median_pct") is not None]
    return {"mode": "screen", "label": root.name, "root": str(root), "ops": ops,
            "verdict_counts": _counts(o["verdict"] for o in ops),
            "wrong_results": [o["cell"] for o in ops
                              if o["verdict"] == WRONG_RESULTS or "MISMATCH" in o["results"]],
            "torch_mismatches": [o["cell"] for o in ops if "MISMATCH" in o["results_torch"]],
            "failures": completion["failures"] + _group(ops),
            "completion": completion,
            "noise_band_pct": band,
            "noise_source": ("range of the A/A operators (NO_IR_DIFF, every recorded level "
                             f"identical on both sides, binary included): {', '.join(o['cell'] for o in noise)}"
                             if band else "no A/A operator (NO_IR_DIFF with every recorded level, "
                             "binary included, identical on both sides) in this screen"),
            "median_speedups_pct": meds,
            "calibers_differ": len({tuple(v for k, v in o["caliber"].items()
                                          if k not in cal.PER_OPERATOR_FIELDS) for o in ops}) > 1,
            "demo": None}


def _cell_runs(root: Path, r: Dict[str, str], cell: str, runs: Runs) -> Tuple[LoadedRun, LoadedRun]:
    """A cell's two runs: ab_rlc_test.sh's <cell>_before|_after, or run_batch.py --switch's
    before|after/<repo>/<run_name> (its screen.tsv rows name repo and run_name)."""
    if r.get("repo") and r.get("run_name") and not (root / f"{cell}_before").is_dir():
        return (runs.get(root / "before" / r["repo"] / r["run_name"]),
                runs.get(root / "after" / r["repo"] / r["run_name"]))
    return runs.get(root / f"{cell}_before"), runs.get(root / f"{cell}_after")


# screen.tsv's fingerprint cells (zl.ir.fingerprint.verdict_row): `hash` when both sides
# are equal, `hashA/hashB` when not, `-` for a side without the level.
_FP_COLUMNS = (("fp_ttgir", "ttgir"), ("fp_llir", "llir"), ("fp_asm", "asm"), ("fp_binary", "binary"))


def _tsv_code(r: Dict[str, str]) -> Dict:
    """The code facts a screen.tsv row holds, when its run directories are gone."""
    a: Dict[str, str] = {}
    b: Dict[str, str] = {}
    for col, level in _FP_COLUMNS:
        cell = (r.get(col) or "-").strip()
        fa, _, fb = cell.partition("/") if "/" in cell else (cell, "", cell)
        if fa not in ("", "-"):
            a[level] = fa
        if fb not in ("", "-"):
            b[level] = fb
    levels = [lv for lv in (r.get("ir_levels") or "").split(",") if lv and lv != "-"]
    compared = [("asm" if lv in ("ptx", "amdgcn") else lv) for lv in levels]
    facts = code_facts({"verdict": r["verdict"], "compared": levels, "a": a, "b": b,
                        "one_sided": [lv for lv in a.keys() ^ b.keys() if lv not in compared],
                        "variants_only": r.get("variants_only") or "-"})
    if not levels and r["verdict"] == fp.NO_IR_DIFF:
        facts["reason"] = "screen.tsv does not record which levels were compared (no ir_levels column)"
    return facts


def _screen_code(r: Dict[str, str], before: LoadedRun, after: LoadedRun) -> Dict:
    """The operator's code facts (run.pair_code) from its run directories, else (gone, or kept
    without IR: a raw bundle) from its screen.tsv row; `aa`: the row's verdict is NO_IR_DIFF
    and every recorded level, binary included, is identical on both sides."""
    kept = before.dir.is_dir() and after.dir.is_dir()
    if kept and any((run.dir / fp.IR_SUBDIR).is_dir() for run in (before, after)):
        code = {**pair_code(before, after), "source": "run directories"}
        if r["verdict"] == fp.NO_IR_DIFF and code["verdict"] != fp.NO_IR_DIFF:
            code["reason"] = (f"screen.tsv says NO_IR_DIFF, its run directories say "
                              f"{code['verdict']}: {code['reason']}")
    else:
        code = {**_tsv_code(r), "source": "screen.tsv" + (" (the run directories hold no IR)" if kept else "")}
    code["aa"] = r["verdict"] == fp.NO_IR_DIFF and code["identical_everywhere"]
    return code


# ab_rlc_test.sh writes the requested cells before the first one runs and the marker only when
# its list ran to the end (its header says so).
SCREEN_REQUESTED = "screen.requested.tsv"
SCREEN_COMPLETE = "screen.complete"


def screen_completion(root: Path, judged: List[str]) -> Dict:
    """Whether a screen judged every cell it was asked for. A screen stopped mid-list (SIGTERM,
    kill) leaves a screen.tsv of the judged cells only, which read like the whole list. A root
    without the requested list (an older driver, run_batch.py --switch) makes no claim:
    `complete` is None there. `failures`: one group naming the cells never judged."""
    req = Path(root) / SCREEN_REQUESTED
    if not req.is_file():
        return {"complete": None, "requested": None, "never_judged": [], "failures": []}
    with open(req, newline="", encoding="utf-8", errors="replace") as fh:
        requested = [r["cell"] for r in csv.DictReader(fh, delimiter="\t") if r.get("cell")]
    done = set(judged)
    never = [c for c in requested if c not in done]
    complete = (Path(root) / SCREEN_COMPLETE).is_file() and not never
    failures = [] if complete else [{
        "reason": f"INCOMPLETE: the screen stopped before its list ended (no {SCREEN_COMPLETE}); "
                  f"{len(never)} of {len(requested)} requested cells never judged", "ops": never}]
    return {"complete": complete, "requested": requested, "never_judged": never, "failures": failures}


def _screen_reason(o: Dict) -> Optional[str]:
    if o["rc_before"] in TIMEOUT_RCS or o["rc_after"] in TIMEOUT_RCS:
        return "CELL_TIMEOUT"
    if o["verdict"] not in SCREEN_FAILED_VERDICTS and o["rc_before"] == "0" and o["rc_after"] == "0":
        return None
    text = (o.get("failure_text") or "").split(";")[0].strip()
    return f"{o['verdict']}: {text}" if text else f"{o['verdict']} (rc {o['rc_before']}/{o['rc_after']})"


def _counts(values) -> Dict[str, int]:
    return dict(sorted(Counter(values).items()))


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


DEVICE_NOTE = re.compile(r"(?:^|;)device_(name|arch)=([^;]*)")


def device_of_row(identity: Optional[Mapping], notes: str) -> Tuple[str, str]:
    """(device_name, device_arch) of one batch row: the run's identity, else the ops_status
    notes run_batch.py --executor ray writes (the device its node's check saw)."""
    noted = dict(DEVICE_NOTE.findall(notes or ""))
    ident = identity or {}
    return (str(ident.get("device_name") or noted.get("name", "")),
            str(ident.get("device_arch") or noted.get("arch", "")))


def hardware_warning(devices, what: str = "rows") -> Optional[str]:
    """One line when a batch's rows (a screen's cells: `what`) name more than one device_name
    or device_arch (one that recorded neither, e.g. a run that failed first, counts for none),
    else None: device_name and device_arch are caliber fields, so such rows never compare."""
    found = sorted({d for d in devices if d[0] or d[1]})
    if len({n for n, _ in found if n}) < 2 and len({a for _, a in found if a}) < 2:
        return None
    return (f"MIXED HARDWARE: {what} measured on " + ", ".join(f"{n or '?'} (arch {a or '?'})" for n, a in found)
            + f"; compare latencies and speedups only within one device name/arch (each {what[:-1]} names its own)")


def torch_results(run: LoadedRun) -> Dict[str, str]:
    """One batch run's outputs against torch ({'status', 'value'}; status n/a when nothing
    was recorded): a batch has no side B, so this is the only results verdict it has."""
    from zl.report import results as results_report  # zl.results needs numpy: only here
    return results_report.torch_only(run)


def _batch_run_dir(batch: Path, r: Dict[str, str]) -> Path:
    od = (r.get("out_dir") or "").strip()
    run = Path(od) if od else batch / r["repo"] / (r.get("run_name") or r["op"])
    if not run.is_absolute() and not run.is_dir():
        run = batch / run
    return run


def _run_dirs_under(root: Path, pattern: str) -> List[Path]:
    return sorted(p.parent for p in Path(root).glob(pattern) if p.is_file())


def report_inputs(mode: str, arg) -> Tuple[List[Path], List[Path]]:
    """(run directories, files) a report in `mode` reads from `arg` (--ab: the two paths;
    else the root): no output may land in one (guard.check_outputs_apart)."""
    if mode == "ab":
        return [Path(p) if Path(p).is_dir() else Path(p).parent for p in arg], []
    root = Path(arg)
    if mode == "ab-rounds":
        return (_run_dirs_under(root, "*/run.log"),
                [root / "telemetry.tsv", root.parent / "telemetry.tsv", root.parent / "status.tsv"])
    if mode == "screen":   # ab_rlc_test.sh's cells, run_batch.py --switch's side/repo/case
        return (_run_dirs_under(root, "*/run.log") + _run_dirs_under(root, "*/*/*/run.log"),
                [root / "screen.tsv"])
    dirs = _run_dirs_under(root, "*/*/run.log")
    try:
        rows = _read_table(root / "ops_status.csv", "a run_batch.py batch", {"repo", "op", "status"})
        dirs += [_batch_run_dir(root, {k: (v or "") for k, v in r.items() if k is not None}) for r in rows]
    except (ReportInputError, OSError):  # the report itself says so; the outputs stay checked
        pass
    return dirs, [root / "ops_status.csv"]


def batch_result(batch: Path, runs: Optional[Runs] = None) -> Dict:
    """The --batch dict of a run_batch.py batch directory, each run read once through `runs`."""
    batch, runs = Path(batch), runs or Runs()
    rows = _read_table(batch / "ops_status.csv", "a run_batch.py batch", {"repo", "op", "status"})
    rows = [{k: (v or "") for k, v in r.items() if k is not None} for r in rows]  # short rows
    ops = []
    for r in rows:
        run = runs.get(_batch_run_dir(batch, r))
        speedups, fail = [], ""
        try:
            parsed = run.parsed
            speedups = [x.speedup for x in parsed.success_rows()
                        if x.speedup is not None and math.isfinite(x.speedup)]
            fail = parsed.failure_text() if parsed.n_failed else ""
        except RunLogError as exc:
            fail = f"unreadable run.log: {exc}"
        o = {"repo": r["repo"], "op": r["op"], "run_name": r.get("run_name", ""),
             "status": r["status"], "return_code": r.get("return_code", ""),
             "elapsed_ms": _num(r.get("elapsed_ms", "")), "rows_total": _num(r.get("rows_total", "")),
             "rows_success": _num(r.get("rows_success", "")), "notes": r.get("notes", ""),
             "backend": r.get("backend", ""), "device": r.get("device", "") or r.get("gpu", ""),
             "timer": r.get("timer", ""), "run_dir": str(run.dir),
             "device_share": shared_device_of(r.get("notes", "")),
             **dict(zip(("device_name", "device_arch"), device_of_row(run.identity, r.get("notes", "")))),
             "median_speedup": median(speedups) if speedups else None, "failure_text": fail,
             "results_torch": torch_results(run)}
        # run_batch.py's PASS and SKIP are final, not failures (a runtime skip is upstream's own).
        ok = r["status"].strip().lower() in ("success", "ok", "passed", "pass", "skip")
        unfinished = r["status"].strip().upper() in ("PENDING", "RUNNING", "INTERRUPTED")
        o["failure_reason"] = None if ok else f"{r['status']}: not finished (run_batch.py --resume)" \
            if unfinished else (
            f"{r['status'] or 'no status'}: {(r.get('notes') or fail or 'rc ' + str(r.get('return_code', ''))).split(';')[0].strip()}")
        ops.append(o)
    return {"mode": "batch", "label": batch.name, "root": str(batch), "ops": ops,
            "status_counts": _counts(o["status"] for o in ops), "failures": _group(ops),
            "wrong_results": [o["op"] for o in ops if o["results_torch"]["status"] == "mismatch"],
            "median_speedups": [o["median_speedup"] for o in ops if o["median_speedup"] is not None],
            "timing_warning": "; ".join(w for w in (
                shared_warning(o["device_share"] for o in ops),
                hardware_warning((o["device_name"], o["device_arch"]) for o in ops)) if w) or None,
            "mixed_hardware": bool(hardware_warning((o["device_name"], o["device_arch"]) for o in ops)),
            "demo": None}
