"""Cases -> devices. Default: a stable hash of (repo, run_name), independent of selection
order and of the other cases, so `--resume` sends an interrupted case back to the device it
started on. `--balance` uses measured seconds instead (partition.plan, longest first)."""

from __future__ import annotations

import csv
import hashlib
import math
import statistics
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zl.batch import partition
from zl.batch.inventory import Entry


def device_of(repo: str, run_name: str, devices: Sequence[str]) -> str:
    digest = hashlib.sha256(f"{repo}/{run_name}".encode()).digest()
    return devices[int.from_bytes(digest[:8], "big") % len(devices)]


def by_hash(cases: Sequence[Entry], devices: Sequence[str]) -> Dict[str, List[Entry]]:
    out: Dict[str, List[Entry]] = {d: [] for d in devices}
    for c in cases:
        out[device_of(c.repo, c.run_name, devices)].append(c)
    return out


def _seconds(path: Path, line: int, column: str, cell: Optional[str]) -> Optional[float]:
    """A cell's measured value. Blank (a PENDING row of ops_status.csv, a short row): None,
    the case counts as unmeasured. Anything else that is not a finite number >= 0 is a named
    error: a nan once compared false with every load and sent every case to device 0."""
    if cell is None or not cell.strip():
        return None
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise partition.PartitionError(f"--balance {path}:{line}: {column}={cell!r} is not a time "
                                       "(a finite number >= 0, or blank for unmeasured)")
    return value


def read_weights(path: Path) -> Dict[str, float]:
    """Seconds per name from a screen.tsv (op, elapsed_before + elapsed_after) or an
    ops_status.csv (run_name, elapsed_ms); keys are `repo:run_name` and bare names. A row with
    a blank time is unmeasured (weighted by the median in by_weight); a time that is not a
    number >= 0, or a file that is not UTF-8 text, is a PartitionError (exit 2)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise partition.PartitionError(f"cannot read {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise partition.PartitionError(f"--balance {path}: not UTF-8 text ({exc.reason} at byte "
                                       f"{exc.start})") from None
    delim = "\t" if text and "\t" in text.splitlines()[0] else ","
    rows = csv.DictReader(text.splitlines(), delimiter=delim)
    out: Dict[str, float] = {}
    for r in rows:
        if "elapsed_ms" in r:
            name = r.get("run_name") or r.get("op")
            ms = _seconds(path, rows.line_num, "elapsed_ms", r["elapsed_ms"])
            w = None if ms is None else ms / 1000.0
            if w is not None and r.get("repo"):
                out[f"{r['repo']}:{name}"] = w
        elif "elapsed_before" in r and "elapsed_after" in r:
            a, b = (_seconds(path, rows.line_num, k, r[k]) for k in ("elapsed_before", "elapsed_after"))
            w, name = (None if a is None or b is None else a + b), r.get("op")
        else:
            continue
        if name and w is not None:
            out.setdefault(name, w)
    if not out:
        raise partition.PartitionError(f"{path}: no measured times (needs elapsed_before/"
                                       "elapsed_after or elapsed_ms columns)")
    return out


def by_weight(cases: Sequence[Entry], devices: Sequence[str],
              weights: Dict[str, float]) -> Tuple[Dict[str, List[Entry]], int]:
    """(assignment, number of cases without a measured time: weighted by the median)."""
    fill = statistics.median(weights.values())
    items, missing = [], 0
    for c in cases:
        w = weights.get(f"{c.repo}:{c.run_name}", weights.get(c.run_name, weights.get(c.op)))
        if w is None:
            missing, w = missing + 1, fill
        items.append((f"{c.repo}:{c.run_name}", w))
    index = {f"{c.repo}:{c.run_name}": c for c in cases}
    planned = partition.plan(items, devices)
    return {d: [index[name] for name, _ in v] for d, v in planned.items()}, missing
