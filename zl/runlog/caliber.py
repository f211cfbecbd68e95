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
  use_flagtune     FlagGems' widened tuning space: a different set of candidate configs
  seed             data-dependent operators (sort, topk, nonzero) see different inputs
  shape_source     op=yaml|upstream|hardcoded per op: a yaml that did not reach a class
                   measured the class's own shapes under the same op name
  graph_warmup_ms  the warmup before each capture (issue 18): `caller` vs an adaptive cap
  l2               warm vs cold L2: a memory-bound kernel reads slower from a flushed cache
  device_share     N cases measured on one GPU at once (run_batch.py --share-device N) moved
                   every timing; absent on a solo run, so shared vs solo is a mismatch. Unlike
                   the others, equal values do not help: any run with device_share > 1 is
                   refused ("a functional check, not a timing"); screen verdicts (IR, results)
                   still hold for it.

A field absent on one side only is a mismatch (one run cannot show it matched); absent
on every side is accepted, so runs written before a field existed still compare.

Autotune pinning (refused unless allowed): an A/B is only about the switch when side B
replays side A's autotune picks. Refused: no side replays (every autotune_mode is record
or missing), or a replay side could not use its record as a whole (autotune_mode
`replay_fallback`: unreadable record, backend mismatch, no autotune_records/), which
tuned live and is record vs record in disguise. A partial fallback (some keys missing,
identity `replay_fallback_keys` or per-key AUTOTUNE_REPLAY_FALLBACK markers) is not a
refusal; the reports list every key that was tuned live.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zl.identity import IDENTITY_NAME
from zl.switches import SwitchError, parse_switch

CALIBER_FIELDS = (
    "backend", "device", "timer", "bench_level", "shape_mode",
    "tuner_cache", "direct_repeat", "use_flagtune", "seed", "shape_source",
    "graph_warmup_ms", "l2", "cold_clock", "device_share",
)
# Fields whose value names the operator itself (`softmax=yaml`): equal within one A/B pair,
# different across the rows of a screen or a batch by construction.
PER_OPERATOR_FIELDS = ("shape_source",)
# Fields holding an on/off word: " 1", "on" and "1" are one value (zl.switches decides).
SWITCH_FIELDS = ("use_flagtune",)


def run_dir_of(path: Path) -> Path:
    """The run directory for a run.log path or a run directory."""
    path = Path(path)
    return path if path.is_dir() else path.parent


def read_identity(run_dir: Path) -> Optional[Dict]:
    """The run's identity dict; None when missing, unreadable or not a JSON object."""
    try:
        data = json.loads((Path(run_dir) / IDENTITY_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _field_text(name: str, value) -> Optional[str]:
    if value is None:
        return None
    text = str(value)
    if name in SWITCH_FIELDS:
        try:
            return "1" if parse_switch(text, False, name=name) else "0"
        except SwitchError:
            return text
    return text


def caliber_of(run_dir: Path) -> Optional[Dict[str, Optional[str]]]:
    """Caliber fields (None = absent) plus autotune_mode, as strings; None when the identity
    is missing/unreadable."""
    data = read_identity(run_dir)
    if data is None:
        return None
    cal = {k: _field_text(k, data.get(k)) for k in CALIBER_FIELDS}
    if cal["l2"] == "cold" and cal["cold_clock"] is None:
        cal["cold_clock"] = "events"  # the only cold clock before ZL_COLD_CLOCK existed
    cal["autotune_mode"] = str(data.get("autotune_mode") or "")
    # The autotune plugin writes `replay_fallback` for a whole-run fallback (scope `all`)
    # and for some keys tuned live (scope `keys`); only the former is record vs record.
    cal["replay_fallback_scope"] = str(data.get("replay_fallback_scope") or "all")
    return cal


def caliber_row(run_dir: Path) -> str:
    """One TSV row of CALIBER_FIELDS (empty cells when the identity or a field is missing)."""
    cal = caliber_of(run_dir) or {}
    return "\t".join(cal.get(k) or "" for k in CALIBER_FIELDS)


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
            vals = ", ".join(f"{n}={_shown(c[fld])}" for n, c in known)
            out.append(f"{fld} differs: {vals}")
    return out + shared_device_complaints(known) + autotune_complaints(known)


def shared_device_complaints(known: Sequence[Tuple[str, Dict]]) -> List[str]:
    """A run that shared its device with other measurements has no valid latency, whatever
    the other side did: two equally contended runs are not equally contended."""
    out: List[str] = []
    for name, c in known:
        share = c.get("device_share")
        if share is None:
            continue
        try:
            solo = int(share) <= 1
        except ValueError:
            solo = False    # unreadable: cannot show the device was not shared
        if not solo:
            out.append(f"{name}: device shared with {share} concurrent measurements "
                       "(device_share): a functional check, not a timing")
    return out


def _shown(value: Optional[str]) -> str:
    return "<missing>" if value is None else (value or "<empty>")


def autotune_complaints(known: Sequence[Tuple[str, Dict]]) -> List[str]:
    """Refusals about autotune pinning (see the module docstring)."""
    out: List[str] = []
    # One side pins the configs the other replays. Two record runs each sweep on their
    # own and may pick different winners: an unpinned config moved router_gemm by 8pp,
    # and a record-vs-record router_gemm figure was once published from exactly this.
    modes = [c["autotune_mode"] for _, c in known]
    if all(m.startswith("record") or not m for m in modes):
        shown = ", ".join(f"{n}={c['autotune_mode'] or '<missing>'}" for n, c in known)
        out.append(f"no run replayed recorded autotune configs ({shown}): nothing is pinned, "
                   "so each side may have picked a different winner; replay side B with "
                   "REPLAY_FROM=<side A>")
    fell_back = [n for n, c in known if c["autotune_mode"] == "replay_fallback"
                 and c.get("replay_fallback_scope", "all") != "keys"]
    if fell_back:
        out.append(f"{', '.join(fell_back)} could not use the recorded autotune configs "
                   "(autotune_mode=replay_fallback: unreadable record, backend mismatch or no "
                   "autotune_records/) and tuned live: this is record vs record; see the "
                   "AUTOTUNE_REPLAY_FALLBACK lines in its run.log")
    return out


def hazards(runs: Sequence[Tuple[str, Path]]) -> List[str]:
    """Not refusals: shared state that makes a matched caliber less solid."""
    cals = [(n, c) for n, c in ((n, caliber_of(d)) for n, d in runs) if c is not None]
    out: List[str] = []
    recording = [n for n, c in cals if c["autotune_mode"].startswith("record")]
    shared = [n for n, c in cals if (c["tuner_cache"] or "").startswith("shared(")]
    if recording and shared:
        # The sweep started from whatever earlier runs left in the store; relative results
        # hold when both sides replay the same picks, absolute latencies do not travel.
        out.append(f"{', '.join(recording)} recorded on a shared tuner cache: the pinned configs "
                   "depend on what ran on this machine before; absolute latencies and variant "
                   "counts are not portable (ZL_ISOLATE_TUNER_CACHE=1 avoids this)")
    unpinned = [f"{n}={c['autotune_mode']}" for n, c in cals
                if c["autotune_mode"] == "uncontrolled"]
    if unpinned:
        out.append(f"autotune configs not fully pinned: {', '.join(unpinned)} "
                   "(see AUTOTUNE_REPLAY_FALLBACK lines in run.log)")
    return out
