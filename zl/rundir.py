"""The run directory and a run's temporaries: claim, clear aside, reclaim.

A run directory describes one run. Rerunning into it used to keep the previous run's
`replay_from`, `shapes.source.yaml` and `*.used.json`, which then read as the new run's;
so an earlier run's files are moved to `prev-<stamp>-<pid>/` first. Per-run temporaries in
TMPDIR carry the owning shell's pid, so a run can remove what a SIGKILLed one left (a shell
trap cannot run on SIGKILL).

A write into OUT_DIR that fails (full disk, read-only filesystem, no permission) ends the run
with its own exit status, EXIT_OUT_DIR_WRITE: on a full disk run.log used to stay empty and
the run exited 141, which reads as a SIGPIPE.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import time
from pathlib import Path
from typing import List, Optional

from zl.identity import IDENTITY_NAME
# Entries that make a directory "an earlier run": only such directories are cleared aside,
# so OUT_DIR=. or a data directory is refused instead of emptied.
RUN_MARKERS = ("run.log", IDENTITY_NAME, "autotune_records", "ttgir", "shapes.yaml")
PREV_PREFIX = "prev-"
TMP_PREFIXES = ("zl_triton_cache.", "zl_inline_shapes.", "zl_preflight_cache.", "zl_pycache.")
RUN_TMP_NAMES = (".flaggems_cache",)
# run_pytest.sh's lock on OUT_DIR (zl.locks): held for the whole run, never moved aside.
LOCK_NAME = ".zl.lock"
# Exit status of run_pytest.sh when OUT_DIR cannot be written. Not 5: run_pytest.sh passes
# pytest's own status through, and pytest uses 0-5 (5 = no tests collected).
EXIT_OUT_DIR_WRITE = 6
WRITE_FAILED_MARKER = "OUT_DIR_WRITE_FAILED"
# errnos that mean "this directory cannot take our files", not "this value is wrong".
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                          errno.EFBIG, errno.EIO})
PROBE_BYTES = 4096


class RunDirError(ValueError):
    """OUT_DIR cannot be used (cannot be created, or holds something that is not a run).
    `errno` is set when the cause was a failed write (see WRITE_ERRNOS)."""

    def __init__(self, message: str, errno_: Optional[int] = None):
        super().__init__(message)
        self.errno = errno_


def probe_writable(out: Path) -> None:
    """Write, flush and fsync PROBE_BYTES into OUT_DIR, then remove them; OSError on failure.
    Before anything is moved or written: a full disk otherwise surfaced only when the tee
    first wrote run.log, after the previous run had been moved aside."""
    probe = out / f".zl_write_probe.{os.getpid()}"
    try:
        with open(probe, "wb") as fh:
            fh.write(b"\0" * PROBE_BYTES)
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one we may not signal still exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reclaim_tmp(tmpdir: str) -> List[str]:
    """Remove per-run temporaries whose owning shell is gone; returns what was removed."""
    removed = []
    try:
        names = os.listdir(tmpdir)
    except OSError:
        return removed
    for name in names:
        prefix = next((p for p in TMP_PREFIXES if name.startswith(p)), None)
        if prefix is None:
            continue
        pid = name[len(prefix):].split(".", 1)[0]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        path = os.path.join(tmpdir, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            _unlink(path)
        removed.append(path)
    return removed


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def claim_out_dir(out_dir: str, runs_root: str, op: str) -> Path:
    """OUT_DIR as given (created), else a fresh `<runs_root>/<op>_<stamp>[-n]` claimed with mkdir."""
    if out_dir:
        path = Path(out_dir)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirError(f"cannot create OUT_DIR={out_dir!r}: {exc.strerror}", exc.errno) from None
        return path.resolve()
    root = Path(runs_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"cannot create ZL_RUNS_ROOT={runs_root!r}: {exc.strerror}", exc.errno) from None
    base = root / f"{op}_{time.strftime('%Y%m%d-%H%M%S')}"
    # Timestamps are to the second: two runs started together step to -2, -3, ...
    for n in range(1, 1000):
        candidate = base if n == 1 else Path(f"{base}-{n}")
        try:
            candidate.mkdir()
            return candidate.resolve()
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunDirError(f"cannot create {candidate}: {exc.strerror}", exc.errno) from None
    raise RunDirError(f"cannot claim a run directory under {root}")


def _run_entries(out: Path) -> List[str]:
    """OUT_DIR's entries that belong to a run: all but earlier runs moved aside, the batch's
    attempt logs and the lock."""
    # run_batch.py keeps each attempt's log in the case directory it hands to run_pytest.sh
    # (`run.attempt<N>.log`): the batch's record of the case, left where it is.
    return [e for e in os.listdir(out)
            if not e.startswith(PREV_PREFIX) and not re.fullmatch(r"run\.attempt\d+\.log", e)
            and e != LOCK_NAME]


def remove_new_entries(out: Path) -> None:
    """After a failed preparation (the earlier run already moved aside): remove what this
    run made, so OUT_DIR holds no half-written run."""
    for name in _run_entries(out):
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            _unlink(str(path))


def earlier_run_entries(out: Path) -> List[str]:
    """The entries an earlier run left in OUT_DIR ([] when there are none); RunDirError when
    OUT_DIR holds something that is not a run: OUT_DIR=. or a data directory is refused, never
    cleared aside, and nothing (not even the lock file) is written into it."""
    entries = _run_entries(out)
    if entries and not any(e in RUN_MARKERS or e.startswith("run.log.prev-") for e in entries):
        raise RunDirError(f"OUT_DIR={out} is not empty and holds no earlier run "
                          f"({', '.join(sorted(entries)[:5])} ...); give an empty or new directory")
    return entries


def move_previous_run(out: Path) -> Optional[Path]:
    """A run directory describes one run: an earlier run's files go to `prev-<stamp>-<pid>/`.

    A stale `replay_from`, `shapes.source.yaml` or `*.used.json` left by the previous run
    otherwise reads as this run's. Temporaries of a killed run are deleted, not kept.
    """
    entries = earlier_run_entries(out)
    if not entries:
        return None
    aside = out / f"{PREV_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    aside.mkdir()
    for name in entries:
        src = out / name
        if name in RUN_TMP_NAMES:
            shutil.rmtree(src, ignore_errors=True)
        elif name.startswith(f".{IDENTITY_NAME}.") and name.endswith(".lock"):
            continue  # the identity writers' lock, not a result
        else:
            os.replace(src, aside / name)
    return aside


