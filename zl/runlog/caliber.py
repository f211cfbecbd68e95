"""The caliber guard: may these runs be compared at all?

Two runs measured under different conditions produce a report that looks exactly
like a valid one; nothing errors, the numbers just change meaning. So every
comparison reads each run's `run_identity.json` before it reads a latency.

`CALIBER_FIELDS` is the one definition; ab_rlc_test.sh's screen.tsv columns come
from `batch_summary.py --caliber`, never from a second list. Each field is there
because changing it alone moved a measured result (seed, S5000 / H200):
  backend, device  different hardware is a different experiment
  timer            replication_pad3d read +43% under graph capture, +124.5% direct
  bench_level      mm has 5 shapes at core, 29 at comprehensive
  shape_mode       inline / file / upstream shape sets are different sets
  tuner_cache      a shared libtuner store made mm look like 945 -> 33 variants
  direct_repeat    median over N direct calls vs one call is a different statistic
  shape_source     op=yaml|upstream|hardcoded per op: a yaml that did not reach a class
                   measured the class's own shapes under the same op name
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

CALIBER_FIELDS = (
    "backend", "device", "timer", "bench_level", "shape_mode",
    "tuner_cache", "direct_repeat", "shape_source",
)
IDENTITY_NAME = "run_identity.json"


def run_dir_of(path: Path) -> Path:
    """The run directory for a run.log path or a run directory."""
    path = Path(path)
    return path if path.is_dir() else path.parent


def caliber_of(run_dir: Path) -> Optional[Dict[str, str]]:
    """Caliber fields plus autotune_mode, as strings; None when the identity is missing/unreadable."""
    ident_path = Path(run_dir) / IDENTITY_NAME
    try:
        data = json.loads(ident_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    cal = {k: "" if data.get(k) is None else str(data.get(k)) for k in CALIBER_FIELDS}
    cal["autotune_mode"] = str(data.get("autotune_mode") or "")
    return cal


def caliber_row(run_dir: Path) -> str:
    """One TSV row of CALIBER_FIELDS (empty cells when the identity is missing)."""
    cal = caliber_of(run_dir) or {}
    return "\t".join(cal.get(k, "") for k in CALIBER_FIELDS)


def complaints(runs: Sequence[Tuple[str, Path]]) -> List[str]:
    """Reasons these runs must not be compared (refused unless explicitly allowed)."""
    out: List[str] = []
    cals = [(name, caliber_of(d)) for name, d in runs]
    missing = [n for n, c in cals if c is None]
    if missing:
        out.append(f"cannot verify the caliber: no readable {IDENTITY_NAME} for {', '.join(missing)}")
    known = [(n, c) for n, c in cals if c is not None]
    if len(known) < 2:
        return out
    for fld in CALIBER_FIELDS:
        if len({c[fld] for _, c in known}) > 1:
            vals = ", ".join(f"{n}={c[fld] or '<empty>'}" for n, c in known)
            out.append(f"{fld} differs: {vals}")
    # One side pins the configs the other replays. Two record runs each sweep on their
    # own and may pick different winners: an unpinned config moved router_gemm by 8pp,
    # and a record-vs-record router_gemm figure was once published from exactly this.
    if all(c["autotune_mode"].startswith("record") for _, c in known):
        out.append("every run recorded its own autotune configs (autotune_mode=record): nothing "
                   "is pinned, so each side may have picked a different winner; replay side B "
                   "with REPLAY_FROM=<side A>")
    return out


def hazards(runs: Sequence[Tuple[str, Path]]) -> List[str]:
    """Not refusals: shared state that makes a matched caliber less solid."""
    cals = [(n, c) for n, c in ((n, caliber_of(d)) for n, d in runs) if c is not None]
    out: List[str] = []
    recording = [n for n, c in cals if c["autotune_mode"].startswith("record")]
    shared = [n for n, c in cals if c["tuner_cache"].startswith("shared(")]
    if recording and shared:
        # The sweep started from whatever earlier runs left in the store; relative results
        # hold when both sides replay the same picks, absolute latencies do not travel.
        out.append(f"{', '.join(recording)} recorded on a shared tuner cache: the pinned configs "
                   "depend on what ran on this machine before; absolute latencies and variant "
                   "counts are not portable (ZL_ISOLATE_TUNER_CACHE=1 avoids this)")
    unpinned = [f"{n}={c['autotune_mode']}" for n, c in cals
                if c["autotune_mode"] in ("uncontrolled", "replay_fallback")]
    if unpinned:
        out.append(f"autotune configs not fully pinned: {', '.join(unpinned)} "
                   "(see AUTOTUNE_REPLAY_FALLBACK lines in run.log)")
    return out
