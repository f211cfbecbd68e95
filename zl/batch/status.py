"""ops_status.csv: one row per case, rewritten whole and atomically after every change.

Every case of the batch has a row from the start (PENDING), RUNNING while it runs and its
verdict after, so a reader, a SIGKILL or a `--resume` always sees the whole batch in one
consistent file: never a half-written line, never a case that silently has no row.
"""

from __future__ import annotations

import csv
import io
import threading
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from zl import atomic

FIELDS = [
    "repo", "op", "op_file", "run_name", "backend", "device", "gpu", "timer",
    "status", "return_code", "elapsed_ms", "rows_total", "rows_success", "notes", "out_dir",
]
# PASS/SKIP get `.complete` and are reused by --resume; every other status is rerun.
# NOT_RUN: a screen's side B when side A measured nothing (nothing to replay).
FINAL = ("PASS", "SKIP", "FAIL", "TIMEOUT", "NO_ROWS", "NOT_RUN")
UNFINISHED = ("PENDING", "RUNNING", "INTERRUPTED")
COMPLETE = ("PASS", "SKIP")

Key = Tuple[str, str]


def side_ran(status: str) -> bool:
    """A side run that ended: not absent ("-"), never started (NOT_RUN) nor cut short (an
    interrupted one is rerun by --resume), so rates count each run once."""
    return status not in ("-", "NOT_RUN", *UNFINISHED)


def node_finished(statuses) -> bool:
    """Every side has a final status (NOT_RUN after a failed side A is one). Counting the
    PENDING ones too gave a batch cut by a time limit 40 nodes done for 7."""
    return not set(statuses) & {"-", *UNFINISHED}


class StatusFileError(ValueError):
    """An ops_status.csv that exists but cannot be read as UTF-8 CSV text (exit 2)."""


def read_rows(path: Path) -> Dict[Key, Dict[str, str]]:
    """(repo, run_name) -> row; {} when the file does not exist (no batch wrote it yet). One
    that exists but is unreadable or not UTF-8 CSV is a StatusFileError naming it: a --resume
    or a --baseline must never read a damaged table as an empty one, nor stop in a traceback."""
    if not Path(path).is_file():
        return {}
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return {(r.get("repo", ""), r.get("run_name", "")): dict(r) for r in csv.DictReader(fh)}
    except OSError as exc:
        raise StatusFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise StatusFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}): "
                              "a damaged table") from None
    except csv.Error as exc:
        raise StatusFileError(f"{path}: not a CSV table ({exc}): a damaged table") from None


class StatusTable:
    def __init__(self, path: Path, keys: Iterable[Key], base: Dict[Key, Dict[str, str]]):
        self.path = Path(path)
        self.lock = threading.Lock()
        self.order: List[Key] = list(keys)
        self.rows: Dict[Key, Dict[str, str]] = {k: dict(base[k]) for k in self.order}

    def set(self, key: Key, **values: str) -> Dict[str, str]:
        with self.lock:
            row = self.rows[key]
            row.update({k: "" if v is None else str(v) for k, v in values.items()})
            self._write()
            return dict(row)

    def replace(self, key: Key, row: Dict[str, str]) -> None:
        with self.lock:
            self.rows[key] = {f: str(row.get(f, "")) for f in FIELDS}
            self._write()

    def get(self, key: Key) -> Dict[str, str]:
        with self.lock:
            return dict(self.rows[key])

    def counts(self) -> Dict[str, int]:
        with self.lock:
            out: Dict[str, int] = {}
            for r in self.rows.values():
                out[r["status"]] = out.get(r["status"], 0) + 1
            return out

    def write(self) -> None:
        with self.lock:
            self._write()

    def _write(self) -> None:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        for k in self.order:
            w.writerow({f: self.rows[k].get(f, "") for f in FIELDS})
        atomic.write_text(self.path, buf.getvalue())


def blank_row(repo: str, op: str, op_file: str, run_name: str, backend: str, device: str,
              out_dir: str, status: str = "PENDING", notes: str = "") -> Dict[str, str]:
    row = {f: "" for f in FIELDS}
    row.update(repo=repo, op=op, op_file=op_file, run_name=run_name, backend=backend,
               device=device, gpu=device, status=status, notes=notes, out_dir=out_dir)
    return row


def join_notes(*parts: Optional[str]) -> str:
    return ";".join(p for p in parts if p)


def note_value(notes: str, key: str) -> str:
    """The value of `key=` in a row's ;-joined notes (e.g. host, node, device_name that
    --executor ray writes), else ''."""
    for part in (notes or "").split(";"):
        k, sep, v = part.partition("=")
        if sep and k == key:
            return v
    return ""
