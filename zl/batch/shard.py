"""Cases -> devices. Default: a stable hash of (repo, run_name), independent of selection
order and of the other cases, so `--resume` sends an interrupted case back to the device it
started on. `--balance` uses measured seconds instead (partition.plan, longest first)."""

from __future__ import annotations

import csv
import hashlib
import statistics
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

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


def read_weights(path: Path) -> Dict[str, float]:
    """Seconds per name from a screen.tsv (op, elapsed_before + elapsed_after) or an
    ops_status.csv (run_name, elapsed_ms); keys are `repo:run_name` and bare names."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise partition.PartitionError(f"cannot read {path}: {exc}") from None
    delim = "\t" if text and "\t" in text.splitlines()[0] else ","
    rows = list(csv.DictReader(text.splitlines(), delimiter=delim))
    out: Dict[str, float] = {}
    for r in rows:
        try:
            if "elapsed_ms" in r:
                w, name = float(r["elapsed_ms"]) / 1000.0, r.get("run_name") or r.get("op")
                if r.get("repo"):
                    out[f"{r['repo']}:{name}"] = w
            else:
                w, name = float(r["elapsed_before"]) + float(r["elapsed_after"]), r["op"]
        except (KeyError, TypeError, ValueError):
            continue
        if name:
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
