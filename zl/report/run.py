"""One run directory read once, and the code verdict of a pair, for every view of a report.

A report reads each input run's run.log and run_identity.json once (`load_run`) and judges
a pair's generated code once (`pair_code`: the screen's every-level verdict, binary
included); the console, `--json` and `--html` all show those same facts. A view that
re-derived a fact on its own (a TTGIR-only compare) called a pair whose LLVM IR, PTX and
cubin differed "an A/A, its range is the noise".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

from zl import screen_verdict
from zl.runlog import caliber as cal
from zl.runlog.parse import ParsedLog, read_run_log, resolve_log


@dataclass(frozen=True)
class LoadedRun:
    """A run directory as a report sees it: its log (parsed once) and its identity."""

    dir: Path
    log: Path
    parsed: ParsedLog
    identity: Optional[Dict[str, Any]]   # None: missing, unreadable or not a JSON object

    @property
    def unfinished(self) -> str:
        """Why this run is not known to have finished ("" when it did): unfinished_reason."""
        return unfinished_reason(self.parsed, self.identity)


# run_identity.json's completion record (zl/identity.py owners: `_device_setup_plugin`):
# {"status": "running"} from pytest's configure, {"status": "complete"|"interrupted"|"error",
# "exitstatus": N} at session finish; absent in runs from before it existed.
FINISHED_FIELD = "finished"


def unfinished_reason(parsed: ParsedLog, identity: Optional[Dict[str, Any]]) -> str:
    """"" when the run finished, else why not. Both records must agree: the identity's
    `finished` (when the run has one) says `complete`, and run.log ends with pytest's final
    summary line (a log cut after a complete run is still a cut log)."""
    rec = (identity or {}).get(FINISHED_FIELD)
    if rec is not None:
        status = rec.get("status") if isinstance(rec, dict) else None
        if status == "running":
            return (f"run_identity.json {FINISHED_FIELD}.status=running: the run was killed "
                    "mid-run (or is still running)")
        if status != "complete":
            return f"run_identity.json {FINISHED_FIELD}={rec!r}: pytest did not complete the session"
    return parsed.unfinished


def load_run(path: Path) -> LoadedRun:
    """A run.log path or a run directory; RunLogError when its log is missing or unreadable."""
    log = resolve_log(Path(path))
    return LoadedRun(dir=log.parent, log=log, parsed=read_run_log(log),
                     identity=cal.read_identity(log.parent))


def pair_code(run_a: Path, run_b: Path) -> Dict[str, Any]:
    """The code verdict of side A (before) vs side B (after), as every view shows it:
    `verdict` (IR_CHANGED@<level> / BINARY_CHANGED / VARIANTS_DIFFER / NO_IR_DIFF / NO_IR),
    the levels compared, the levels one side recorded and the other did not, and whether
    the pair is an A/A (`identical_everywhere`, with `reason`)."""
    return code_facts(screen_verdict.code_verdict(Path(run_a), Path(run_b)))


def code_facts(code: Dict[str, Any]) -> Dict[str, Any]:
    """pair_code's dict from a zl.ir.fingerprint.verdict-shaped one ('verdict', 'compared',
    'one_sided', 'a', 'b', 'variants_only'), e.g. rebuilt from a screen.tsv row."""
    same, why = screen_verdict.identical_everywhere(code)
    out = {"verdict": code["verdict"], "levels_compared": list(code.get("compared") or []),
           "one_sided": {lv: ("A" if lv in code.get("a", {}) else "B")
                         for lv in code.get("one_sided") or []},
           "variants_only": code.get("variants_only", "-"),
           "fingerprints": {"A": dict(code.get("a") or {}), "B": dict(code.get("b") or {})},
           "identical_everywhere": same, "reason": why}
    if code.get("error"):
        out["error"] = code["error"]
    return out


def code_text(code: Optional[Dict[str, Any]]) -> str:
    """One line: the verdict, the levels compared and any level present on one side only."""
    if not code:
        return "not judged"
    parts = [f"levels compared: {','.join(code['levels_compared']) or 'none'}"]
    if code.get("one_sided"):
        parts.append("recorded on one side only, not compared: " + ", ".join(
            f"{lv} (side {side})" for lv, side in code["one_sided"].items()))
    if code.get("variants_only", "-") != "-":
        parts.append(f"variants compiled on one side only: {code['variants_only']}")
    if code.get("error"):
        parts.append(code["error"])
    return f"{code['verdict']} ({'; '.join(parts)})"
