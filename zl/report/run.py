"""One run directory read once, and the code verdict of a pair, for every view of a report.

A report reads each input run's files once (`LoadedRun`: run.log, run_identity.json,
ttgir/ir_fingerprints.json through zl.ir.fingerprint's reader, results/ through
zl.results.compare's) and judges a pair's generated code once (`pair_code`: the screen's
every-level verdict, binary included); the console, `--json`, `--html`, the screen and the
batch views all show those same facts. A view that re-derived a fact on its own (a
TTGIR-only compare) called a pair whose LLVM IR, PTX and cubin differed "an A/A, its range
is the noise".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from zl import screen_verdict
from zl.ir import fingerprint as fp
from zl.runlog import caliber as cal
from zl.runlog.parse import ParsedLog, RunLogError, parse_log_bytes, read_log_bytes, resolve_log


class LoadedRun:
    """A run directory as a report sees it. Each file is read at most once, on first use (a
    view that never shows results never reads results/, which can be large), and a failed
    read is kept as well: every view sees the same bytes, or the same error."""

    def __init__(self, run_dir: Path, log: Optional[Path] = None) -> None:
        """A run directory and its log (default <run_dir>/run.log); nothing is read yet."""
        self.dir = Path(run_dir)
        self.log = Path(log) if log is not None else self.dir / "run.log"
        self._read: Dict[str, Tuple[Any, Optional[BaseException]]] = {}

    @classmethod
    def load(cls, path: Path) -> "LoadedRun":
        """A run.log path or a run directory, its log parsed; RunLogError when the log is
        missing or unreadable."""
        log = resolve_log(Path(path))
        run = cls(log.parent, log)
        _ = run.parsed   # parsed now: a log that cannot be parsed is an error of loading
        return run

    def _once(self, name: str, read: Callable[[], Any], errors: Tuple[type, ...]) -> Any:
        if name not in self._read:
            try:
                self._read[name] = (read(), None)
            except errors as exc:
                self._read[name] = (None, exc)
        value, exc = self._read[name]
        if exc is not None:
            raise exc
        return value

    @property
    def log_bytes(self) -> bytes:
        """run.log's bytes; RunLogError when it is missing or unreadable."""
        return self._once("log_bytes", lambda: read_log_bytes(resolve_log(self.log)), (RunLogError,))

    @property
    def parsed(self) -> ParsedLog:
        """run.log parsed (zl.runlog.parse); RunLogError as read_run_log raises it."""
        return self._once("parsed", lambda: parse_log_bytes(self.log, self.log_bytes), (RunLogError,))

    @property
    def identity_bytes(self) -> Optional[bytes]:
        """run_identity.json's bytes; None when it is missing or unreadable."""
        def read() -> Optional[bytes]:
            try:
                return (self.dir / cal.IDENTITY_NAME).read_bytes()
            except OSError:
                return None
        return self._once("identity_bytes", read, ())

    @property
    def identity(self) -> Optional[Dict[str, Any]]:
        """The identity dict; None when missing, unreadable or not a JSON object."""
        return self._once("identity", lambda: cal.identity_from(self.identity_bytes), ())

    @property
    def ir(self) -> Tuple[Dict[str, str], Optional[Dict[str, Any]]]:
        """(every level's hash, ir_fingerprints.json record) as zl.ir.fingerprint.verdict
        compares them; its errors (no run directory) as that reader raises them."""
        def read() -> Tuple[Dict[str, str], Optional[Dict[str, Any]]]:
            record = fp.load_record(self.dir)
            return fp.run_levels(self.dir, record), record
        return self._once("ir", read, (fp.RunDirError, fp.NoIRError, OSError))

    @property
    def ir_index(self) -> Optional[List[Dict[str, str]]]:
        """ttgir/index.tsv's rows (zl.ir.fingerprint.read_index); None when there is none."""
        return self._once("ir_index", lambda: fp.read_index(self.dir / fp.IR_SUBDIR), ())

    def ir_text(self, rel: str) -> Optional[str]:
        """A dumped IR file, `rel` under ttgir/ (e.g. `1024/k/w4s3.llir`); None when it is
        absent or unreadable. Not kept: a screen's dumped LLVM IR and PTX can run to
        gigabytes, so the one reader (zl.report.changes, once per pair) holds what it needs."""
        try:
            return (self.dir / fp.IR_SUBDIR / rel).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            return None

    @property
    def results(self) -> Dict[str, Dict[str, Any]]:
        """{op: results document} (zl.results.compare.load); ResultsError when unreadable."""
        from zl.results import compare  # numpy: only for a view that shows results
        return self._once("results", lambda: compare.load(self.dir), (compare.ResultsError,))

    @property
    def unfinished(self) -> str:
        """Why this run is not known to have finished ("" when it did): unfinished_reason."""
        return unfinished_reason(self.parsed, self.identity)


class Runs:
    """The runs one report loaded, by directory and log: a view that reaches a run another
    view already loaded (an --ab pair inside a screen root) gets the same LoadedRun."""

    def __init__(self) -> None:
        self._runs: Dict[Tuple[str, str], LoadedRun] = {}

    def get(self, run_dir: Path, log: Optional[Path] = None) -> LoadedRun:
        """The LoadedRun of this directory and log, made (nothing read) on first request."""
        run = LoadedRun(run_dir, log)
        return self._runs.setdefault((os.path.realpath(run.dir), run.log.name), run)

    def load(self, path: Path) -> LoadedRun:
        """A run.log path or a run directory as LoadedRun.load reads it, through this set."""
        log = resolve_log(Path(path))
        run = self.get(log.parent, log)
        _ = run.parsed
        return run


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


def pair_code(run_a: LoadedRun, run_b: LoadedRun) -> Dict[str, Any]:
    """The code verdict of side A (before) vs side B (after), as every view shows it:
    `verdict` (IR_CHANGED@<level> / BINARY_CHANGED / VARIANTS_DIFFER / NO_IR_DIFF / NO_IR),
    the levels compared, the levels one side recorded and the other did not, and whether
    the pair is an A/A (`identical_everywhere`, with `reason`)."""
    return code_facts(screen_verdict.code_verdict(
        run_a.dir, run_b.dir, read=lambda d: (run_a if d is run_a.dir else run_b).ir))


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
