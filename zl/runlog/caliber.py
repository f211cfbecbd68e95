"""The caliber guard: may these runs be compared at all?

Two runs measured under different conditions produce a report that looks exactly
like a valid one; nothing errors, the numbers just change meaning. So every
comparison reads each run's `run_identity.json` before it reads a latency.

`CALIBER_FIELDS` is the one definition; ab_rlc_test.sh's screen.tsv columns come
from `batch_summary.py --caliber`, never from a second list. Each field is there
because changing it alone moved a measured result (seed, S5000 / H200):
  backend, device  different hardware is a different experiment
  device_name, device_arch  `device` is only an index: an H200 and an H100 (or Triton's
                   interpreter, device_arch=triton-interpreter, and a GPU) share device 0
  timer            replication_pad3d read +43% under graph capture, +124.5% direct
  bench_level      mm has 5 shapes at core, 29 at comprehensive
  shape_mode       inline / file / upstream shape sets are different sets
  tuner_cache      a shared libtuner store made mm look like 945 -> 33 variants
  direct_repeat    median over N direct calls vs one call is a different statistic
  use_flagtune     FlagGems' widened tuning space: a different set of candidate configs
  seed             data-dependent operators (sort, topk, nonzero) see different inputs
  shape_source     op=yaml|upstream|hardcoded per op: a yaml that did not reach a class
                   measured the class's own shapes under the same op name
  graph_warmup_ms  the warmup before each capture: `caller` vs an adaptive cap
  l2               warm vs cold L2: a memory-bound kernel reads slower from a flushed cache
  device_share     N cases measured on one GPU at once (run_batch.py --share-device N) moved
                   every timing; absent on a solo run, so shared vs solo is a mismatch. Unlike
                   the others, equal values do not help: any run with device_share > 1 is
                   refused ("a functional check, not a timing"); screen verdicts (IR, results)
                   still hold for it.
  timer=none       a judge-only run (ZL_JUDGE_ONLY, run_batch.py --judge): refused as a timing
                   even against another judge-only run; screen verdicts (IR, results) hold
  device_overlap   N runs overlapped on one GPU (run_batch.py --overlap N), each do_bench
                   call exclusive under a per-device lock, compilation and start-up
                   concurrent: absent on a solo run, so overlapped vs solo is a mismatch
  overlap_protocol what an overlapped run kept out of its timed stretches
                   (`timed-alone-lifecycle`: every other run's GPU work, CUDA context
                   creation, process exit and the results prewarm included,
                   zl/timing/exclusive.py; `timed-alone`: all but those three, and the
                   first two alone moved timed kernels up to 13.7 % on an H100); absent on
                   runs overlapped before it existed, which timed beside others' GPU work
  time_torch       `off` (ZL_TIME_TORCH=off): the torch baseline was not timed, so the
                   gems calls ran without a torch timing before each: absent when it was
  dtype_fallback   `first` (ZL_DTYPE_FALLBACK=first, run_batch.py --dtype-fallback first):
                   where upstream refused --dtypes the op's first declared dtype was
                   measured, where `all` reruns it over every declared dtype (another row
                   set); absent under `all`, so runs from before the field compare as `all`
  ir_collection    the IR collector's rules for which launches are the operator's (zl.ir.RULES,
                   written by every run's preparation): under rules 1 a run that tuned counted
                   the autotuner's post-sweep reset as the operator's and a replay did not, so
                   an H100 A/A of adaptive_max_pool3d_backward read IR_CHANGED@ttgir; a run
                   from before the field (rules 1, or 2 before runs stated it) beside one that
                   states it is refused

  mm_cluster_fix   `routed` (ZL_ENABLE_MM_CLUSTER=1 on FlagTree's TLE path): mm measured
                   general_mm where upstream runs the cluster kernel; `not_live` and `absent`
                   (nothing patched) read as a run without the plugin

A field absent on one side only is a mismatch (one run cannot show it matched); absent
on every side is accepted, so runs written before a field existed still compare.

Autotune pinning (refused unless allowed): an A/B is only about the switch when side B
replays side A's autotune picks. Refused: no side replays (every autotune_mode is record,
uncontrolled, off or missing), or a replay side could not use its record as a whole (autotune_mode
`replay_fallback` with scope `all`: unreadable record, backend mismatch, no
autotune_records/), or replayed no key at all (`replay_replayed_keys=0` with keys tuned
live: an emptied or another operator's record), which tuned live and is record vs record
in disguise. A partial fallback (some keys missing, identity `replay_fallback_keys` or
per-key AUTOTUNE_REPLAY_FALLBACK markers) is not a refusal; the reports list every key
that was tuned live.

The record link (refused unless allowed): every run that ran recorded configs must have run
the same record. A record run's pin is (its `run_id`, `autotune_record_digest`), a replay's
(`replay_source_run_id`, `replay_record_digest`); all pins of the compared runs must be
equal, and a run that ran no record (uncontrolled, off) is not paired with a replay. So
`--ab C B` where B replayed A is refused (B's source is not C), as is a side A
recorded again after B replayed it (new run_id and record), and an --ab-rounds campaign
whose cells replayed different records (every cell is pinned to r1_A's record). A replay
whose source's identity named another digest than the record it read replayed an edited
record: refused too. A run lacking these fields (written before they existed) cannot show
the link: refused, with that reason.

Hazards (listed, not refused): runs of two builds (TOOLCHAIN_FIELDS differ); a replayed config that is not among the replaying tuner's
candidates (identity `replay_foreign_configs`, AUTOTUNE_REPLAY_FOREIGN_CONFIG lines). With
the record link verified it is a config the recording run ran itself (a switch that
changed the config list, or Config attributes of another Triton build); an edited record
is already refused by its digest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zl.identity import IDENTITY_NAME
from zl.switches import SwitchError, parse_switch

CALIBER_FIELDS = (
    "backend", "device", "device_name", "device_arch", "timer", "bench_level", "shape_mode",
    "tuner_cache", "direct_repeat", "use_flagtune", "seed", "shape_source",
    "graph_warmup_ms", "l2", "cold_clock", "device_share", "device_overlap", "overlap_protocol",
    "time_torch", "dtype_fallback", "ir_collection", "mm_cluster_fix",
)
# mm_cluster_fix values under which the plugin patched nothing: the same as a run without it.
MM_CLUSTER_UNPATCHED = ("not_live", "absent")
# Fields whose value names the operator itself (`softmax=yaml`): equal within one A/B pair,
# different across the rows of a screen or a batch by construction.
PER_OPERATOR_FIELDS = ("shape_source",)
# Fields holding an on/off word: " 1", "on" and "1" are one value (zl.switches decides).
SWITCH_FIELDS = ("use_flagtune",)


def run_dir_of(path: Path) -> Path:
    """The run directory for a run.log path or a run directory."""
    path = Path(path)
    return path if path.is_dir() else path.parent


# (name, identity dict or None): what the checks below compare. A report reads each run's
# identity once (zl.report.run.LoadedRun); the path-taking wrappers read it for CLI users.
Named = Tuple[str, Optional[Dict]]


def read_identity(run_dir: Path) -> Optional[Dict]:
    """The run's identity dict; None when missing, unreadable or not a JSON object."""
    try:
        return identity_from((Path(run_dir) / IDENTITY_NAME).read_bytes())
    except OSError:
        return None


def identity_from(data: Optional[bytes]) -> Optional[Dict]:
    """run_identity.json's bytes as a dict; None when absent, not JSON or not an object."""
    try:
        doc = None if data is None else json.loads(data.decode("utf-8"))
    except ValueError:   # UnicodeDecodeError and JSONDecodeError alike
        return None
    return doc if isinstance(doc, dict) else None


def _read_all(runs: Sequence[Tuple[str, Path]]) -> List[Named]:
    return [(name, read_identity(d)) for name, d in runs]


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


# The record link of a run (see the module docstring), written by the autotune plugin.
LINK_FIELDS = ("run_id", "autotune_record_digest", "replay_record_digest",
               "replay_source_run_id", "replay_source_record_digest", "replay_source_dir")


def caliber_of(run_dir: Path) -> Optional[Dict[str, Optional[str]]]:
    """caliber_from the run directory's identity."""
    return caliber_from(read_identity(run_dir))


def caliber_from(data: Optional[Dict]) -> Optional[Dict[str, Optional[str]]]:
    """Caliber fields (None = absent) plus autotune_mode, as strings, of an identity dict;
    None when there is none (missing or unreadable: read_identity's None)."""
    if data is None:
        return None
    cal = {k: _field_text(k, data.get(k)) for k in CALIBER_FIELDS}
    if cal["mm_cluster_fix"] in MM_CLUSTER_UNPATCHED:
        cal["mm_cluster_fix"] = None
    if cal["l2"] == "cold" and cal["cold_clock"] is None:
        cal["cold_clock"] = "events"  # the only cold clock before ZL_COLD_CLOCK existed
    cal["autotune_mode"] = str(data.get("autotune_mode") or "")
    # The autotune plugin writes `replay_fallback` for a whole-run fallback (scope `all`)
    # and for some keys tuned live (scope `keys`); only the former is record vs record.
    cal["replay_fallback_scope"] = str(data.get("replay_fallback_scope") or "all")
    for k in ("replay_fallback_reason", "replay_replayed_keys", "replay_fallback_keys") + LINK_FIELDS:
        cal[k] = _field_text(k, data.get(k))
    return cal


def caliber_row(cal: Optional[Dict[str, Optional[str]]]) -> str:
    """One TSV row of CALIBER_FIELDS from caliber_from (empty cells when the identity or a
    field is missing)."""
    return "\t".join((cal or {}).get(k) or "" for k in CALIBER_FIELDS)


def complaints(runs: Sequence[Tuple[str, Path]]) -> List[str]:
    """complaints_of the identities in these run directories (for CLI users and tests)."""
    return complaints_of(_read_all(runs))


def complaints_of(runs: Sequence[Named]) -> List[str]:
    """Reasons these runs must not be compared (refused unless explicitly allowed)."""
    out: List[str] = []
    cals = [(name, caliber_from(ident)) for name, ident in runs]
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
    return (out + shared_device_complaints(known) + untimed_complaints(known) + autotune_complaints(known)
            + record_link_complaints(known))


def unpinned_complaints_of(runs: Sequence[Named]) -> List[str]:
    """complaints_of less autotune pinning and the record link: what stops two runs of one side
    (an A/A control, side A against a retuning side C) from being compared at all."""
    known = [(n, c) for n, i in runs for c in [caliber_from(i)] if c is not None]
    pinning = set(autotune_complaints(known) + record_link_complaints(known))
    return [p for p in complaints_of(runs) if p not in pinning]


def untimed_complaints(known: Sequence[Tuple[str, Dict]]) -> List[str]:
    """A judge-only run (ZL_JUDGE_ONLY, timer=none) printed nan for every latency: it has no
    timing to compare, whatever the other side is."""
    return [f"{name}: a judge-only run (timer=none): code and results judged, nothing timed"
            for name, c in known if c.get("timer") == "none"]


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
    # uncontrolled / off tuned live without a record: no more pinned than a record run.
    modes = [c["autotune_mode"] for _, c in known]
    if not any(m.startswith("replay") for m in modes):
        shown = ", ".join(f"{n}={c['autotune_mode'] or '<missing>'}" for n, c in known)
        out.append(f"no run replayed recorded autotune configs ({shown}): nothing is pinned, "
                   "so each side may have picked a different winner; replay side B with "
                   "REPLAY_FROM=<side A>")
    for name, c in known:
        if _replayed_nothing(c):
            out.append(f"{name} replayed no recorded config (replay_replayed_keys=0, "
                       f"{c['replay_fallback_keys']} key(s) tuned live: an emptied record or "
                       "another operator's) and tuned live: this is record vs record; see the "
                       "AUTOTUNE_REPLAY_FALLBACK lines in its run.log")
        elif c["autotune_mode"] == "replay_fallback" and c.get("replay_fallback_scope", "all") != "keys":
            why = c.get("replay_fallback_reason") or "unreadable record, backend mismatch or no autotune_records/"
            out.append(f"{name} could not use the recorded autotune configs "
                       f"(autotune_mode=replay_fallback: {why}) and tuned live: this is record vs "
                       "record; see the AUTOTUNE_REPLAY_FALLBACK lines in its run.log")
    return out


def _replayed_nothing(c: Dict) -> bool:
    """A replay that answered no key from its record although keys were tuned live."""
    return (c["autotune_mode"].startswith("replay") and c.get("replay_replayed_keys") == "0"
            and c.get("replay_fallback_keys") not in (None, "", "0"))


def _pin(c: Dict) -> Optional[Tuple[str, Optional[str], Optional[str]]]:
    """(how, run id, record digest) of the record this run ran; None when it ran none."""
    mode = c["autotune_mode"]
    if mode.startswith("record"):
        return ("recorded", c.get("run_id"), c.get("autotune_record_digest"))
    if mode == "replay" or (mode == "replay_fallback" and c.get("replay_fallback_scope") == "keys"):
        return ("replayed", c.get("replay_source_run_id"), c.get("replay_record_digest"))
    return None


def _short(value: Optional[str]) -> str:
    text = value or "<missing>"
    return text[:19] if text.startswith("sha256:") else text[:12]


def _described(name: str, c: Dict, pin: Tuple) -> str:
    how, run_id, digest = pin
    where = f" ({c['replay_source_dir']})" if how == "replayed" and c.get("replay_source_dir") else ""
    return f"{name} {how} record {_short(digest)} of run {_short(run_id)}{where}"


def record_link_complaints(known: Sequence[Tuple[str, Dict]]) -> List[str]:
    """Refusals about which autotune record each side ran (see the module docstring)."""
    pinned = [(n, c, p) for n, c in known for p in [_pin(c)] if p is not None]
    if not any(p[0] == "replayed" for _, _, p in pinned):
        return []   # nothing replayed: autotune_complaints says so
    out: List[str] = []
    unknown = [n for n, _, p in pinned if None in p[1:]]
    if unknown:
        out.append(f"autotune record link cannot be verified: {', '.join(unknown)} "
                   "lack run_id/autotune_record_digest (record) or replay_source_run_id/"
                   "replay_record_digest (replay) in run_identity.json (runs written before "
                   "zl_bench recorded them): nothing shows side B replayed side A's record")
    for n, c, p in pinned:
        source = c.get("replay_source_record_digest")
        if p[0] == "replayed" and p[2] and source and source != p[2]:
            out.append(f"autotune record link: {n} replayed record {_short(p[2])}, but its source "
                       f"run {_short(p[1])} wrote {_short(source)}: the record was edited or "
                       "rewritten after that run")
    unpinned = [f"{n}={c['autotune_mode'] or '<missing>'}" for n, c in known
                if _pin(c) is None and not c["autotune_mode"].startswith("replay")]
    if unpinned:
        out.append(f"autotune record link: {', '.join(unpinned)} ran no recorded configs (tuned "
                   "live) while the other side replayed a record: the sides did not run the same "
                   "configs")
    known_pins = [(n, c, p) for n, c, p in pinned if None not in p[1:]]
    ref = next((x for x in known_pins if x[2][0] == "recorded"), known_pins[0] if known_pins else None)
    for n, c, p in known_pins:
        if p[1:] != ref[2][1:]:
            out.append(f"autotune record link: {_described(n, c, p)}, but "
                       f"{_described(*ref)}: every side must run one record's configs (side B "
                       "replaying exactly the record of the side A it is compared with)")
    return out


def hazards(runs: Sequence[Tuple[str, Path]]) -> List[str]:
    """hazards_of the identities in these run directories (for CLI users and tests)."""
    return hazards_of(_read_all(runs))


def hazards_of(runs: Sequence[Named]) -> List[str]:
    """Not refusals: shared state that makes a matched caliber less solid."""
    cals = [(n, c) for n, c in ((n, caliber_from(ident)) for n, ident in runs) if c is not None]
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
    return out + toolchain_hazards(runs) + foreign_config_hazards(runs)


# The builds a run measured. Not refused: comparing two builds (a FlagTree or FlagGems change,
# side B replaying side A's picks) is a use, not an accident; but a switch's A/B across them
# measures the rebuild too, so the report says so.
TOOLCHAIN_FIELDS = ("triton_version", "torch_version", "flag_gems_version", "flaggems_commit")


def toolchain_hazards(runs: Sequence[Named]) -> List[str]:
    """One line naming every toolchain field whose recorded values differ between the runs."""
    diffs = []
    for fld in TOOLCHAIN_FIELDS:
        vals = [(n, (ident or {}).get(fld)) for n, ident in runs if ident is not None]
        if len({str(v) for _, v in vals if v is not None}) > 1:
            diffs.append(f"{fld} " + ", ".join(f"{n}={_shown(None if v is None else str(v))}" for n, v in vals))
    if not diffs:
        return []
    return [f"toolchain differs ({'; '.join(diffs)}): the delta is of the two builds, not of one "
            "switch alone"]


def foreign_config_hazards(runs: Sequence[Named]) -> List[str]:
    """One line per run listing, key by key, replayed configs its tuner does not list."""
    out: List[str] = []
    for name, ident in runs:
        listed = (ident or {}).get("replay_foreign_configs")
        if not isinstance(listed, list) or not listed:
            continue
        keys = "; ".join(f"kernel={e.get('kernel')} key={e.get('key')} reason={e.get('reason')}"
                         if isinstance(e, dict) else str(e) for e in listed)
        out.append(f"{name} replayed {len(listed)} config(s) its tuner does not list "
                   f"(AUTOTUNE_REPLAY_FOREIGN_CONFIG): {keys}; its own tuner would never pick "
                   "them, so these rows time the recorded configs, not this build's search space")
    return out
