"""What every A/B report checks before it prints a number, and how it says no.

Exit codes (batch_summary.py): 0 report printed; 2 usage error or unusable input
(missing / malformed run.log, a run compared with itself, an unwritable --json, scipy
missing); 4 refusal: the runs are not comparable (caliber, autotune pinning, mixed
campaigns); 5 no report: the inputs were fine but nothing can be concluded (zero
paired rows, fewer than 2 complete rounds, no shape measured in every round). 5 exists
so that a driver or CI never reads "exit 0" next to a +0.00 % that compared nothing.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zl import markers
from zl.runlog import caliber as cal
from zl.report.run import LoadedRun
from zl.runlog.parse import ParsedLog, RunLogError

EXIT_OK, EXIT_USAGE, EXIT_CALIBER, EXIT_NO_REPORT = 0, 2, 4, 5
MARKER_LABELS = dict(markers.COUNTED)
SCIPY_INSTALL = "python3 -m pip install scipy numpy"


class Refused(Exception):
    """The runs must not be compared (exit 4); the reasons were printed and are kept."""

    def __init__(self, problems: Sequence[str] = ()) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


class BadInput(Exception):
    """Unusable input or usage (exit 2)."""


class NoReport(Exception):
    """Nothing to conclude (exit 5). Carries the partial result for --json."""

    def __init__(self, message: str, result: Optional[Dict] = None) -> None:
        super().__init__(message)
        self.result = result or {}


def fmt_pct(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:+.2f}%"


def check_caliber(runs: Sequence[cal.Named], label: str, allow: bool) -> Tuple[List[str], List[str]]:
    """Print hazards and complaints of these (name, identity) runs; raise Refused unless
    allowed. Returns (problems, hazards)."""
    hazards = cal.hazards_of(runs)
    for h in hazards:
        print(f"warning [caliber] {label}: {h}")
    problems = cal.complaints_of(runs)
    head = "!!! [caliber]" if not allow else "warning [caliber]"
    for p in problems:
        print(f"{head} {label}: {p}")
    if problems and not allow:
        print(f"!!! [caliber] {label}: no report. If the runs really are comparable, "
              "rerun with --allow-caliber-mismatch")
        raise Refused(problems)
    return problems, hazards


def _same_log(before: LoadedRun, after: LoadedRun) -> bool:
    try:
        return before.log_bytes == after.log_bytes
    except RunLogError:
        return False


def refuse_self_comparison(before: LoadedRun, after: LoadedRun) -> None:
    """A run compared with itself (the same file, or a copy of the run directory: the same
    run.log and run_identity.json bytes) measures nothing."""
    same = os.path.samefile(before.log, after.log) or (
        _same_log(before, after) and before.identity_bytes is not None
        and before.identity_bytes == after.identity_bytes)
    if same:
        raise BadInput(f"{before.log} and {after.log} are the same run: an A/B compares two "
                       "runs (side A recorded, side B replaying it)")


def check_json_target(path: Optional[Path], flag: str = "--json") -> None:
    """Fail before the report, not after it, when an output file cannot be written."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise BadInput(f"{flag} {path}: is a directory")
    _probe(path.parent, flag, path)


def check_dir_target(path: Optional[Path], flag: str = "--png") -> None:
    """The same for an output folder (created when missing)."""
    if path is None:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BadInput(f"{flag} {path}: is not a directory")
    _probe(path, flag, path)


def _probe(folder: Path, flag: str, path: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=str(folder), prefix=f".{path.name}.probe"):
            pass
    except OSError as exc:
        raise BadInput(f"{flag} {path}: cannot write there ({exc.strerror or exc})") from None


class OutputInsideInput(BadInput):
    """An output path equal to an input file, or equal to or inside an input run directory."""


def check_outputs_apart(outputs: Sequence[Tuple[str, Optional[Path]]],
                        input_dirs: Sequence[Path], input_files: Sequence[Path] = ()) -> None:
    """OutputInsideInput (exit 2, before anything is written) when an output would land in
    what the report reads: `--html A/run.log` replaced side A's log with the page. Two
    outputs at one path are refused too (the later write would replace the earlier)."""
    def real(p: Path) -> Path:
        return Path(os.path.realpath(p))

    given = [(flag, Path(p)) for flag, p in outputs if p is not None]
    dirs = [real(d) for d in input_dirs]
    files = {real(f) for f in input_files}
    for flag, path in given:
        out = real(path)
        if out in files:
            raise OutputInsideInput(f"{flag} {path}: is an input of this report "
                                    "(it would be overwritten); write the report elsewhere")
        inside = next((d for d in dirs if out == d or d in out.parents), None)
        if inside is not None:
            raise OutputInsideInput(f"{flag} {path}: is inside the input run directory {inside} "
                                    "(the report would overwrite its own inputs); write it elsewhere")
    for i, (flag, path) in enumerate(given):
        for other, opath in given[i + 1:]:
            if real(path) == real(opath):
                raise OutputInsideInput(f"{flag} and {other} are the same path {path}")


def require_stats_libraries() -> None:
    """--ab-rounds needs scipy (Mann-Whitney) and numpy (bootstrap): say how to get them."""
    try:
        import numpy  # noqa: F401
        import scipy.stats  # noqa: F401
    except ImportError as exc:
        raise BadInput(f"--ab-rounds needs scipy and numpy ({exc}); install them with: "
                       f"{SCIPY_INSTALL}") from None


def replay_fallback_facts(identity: Optional[Dict], parsed: ParsedLog) -> Dict:
    """What a (partial) replay fallback left: the run's per-key markers and the identity's
    `replay_fallback_keys`, for the report to list key by key."""
    ident = identity or {}
    return {"autotune_mode": ident.get("autotune_mode"),
            "replay_fallback_keys": ident.get("replay_fallback_keys"),
            "events": list(parsed.replay_fallbacks)}


def print_replay_fallbacks(label: str, tag: str, facts: Dict[str, Dict]) -> None:
    """One line per autotune key that was tuned live instead of replayed."""
    for side, f in facts.items():
        keys = f.get("replay_fallback_keys")
        if keys not in (None, 0, [], ""):
            print(f"[{tag}] {label}: {side}: identity replay_fallback_keys={keys}")
        for e in f["events"]:
            print(f"  REPLAY_FALLBACK {side}: kernel={e['kernel']} key={e['key']} "
                  f"reason={e['reason']} (tuned live: rows of this key compare unpinned configs)")
