"""One way to write a file another process may read mid-run: a temp file in the same
directory, then os.replace, so a reader sees the old content or the new, never half.

Used for run_identity.json, autotune records, shapes.yaml, the IR index, reports and
campaign tables. A failed write removes its temp file and re-raises; write_problem turns
the error into the one line a CLI prints (exit 2 there).

The result gets the mode open() would give it: an existing file keeps its mode, a new one
gets 0666 minus the umask. mkstemp's private 0600 would make run directories shared by a
team (or read by a web server for the HTML report) unreadable file by file, unlike run.log.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, List, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]


def current_umask() -> int:
    """The process umask without changing it (Linux reports it in /proc; elsewhere the
    set-and-restore dance, which is not thread-safe but only runs where /proc lacks it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _mode_for(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~current_umask()


def temp_prefix(path: Path) -> str:
    """Temp files of `path` are `.<name>.<random>.tmp` beside it (hidden, one pattern)."""
    return f".{path.name}."


def stale_temps(path: PathLike, older_than: Optional[float] = None) -> List[Path]:
    """Temp files a writer of `path` left behind (killed between mkstemp and replace).

    Only a caller that excludes every other writer of `path` (a lock) may delete them:
    without it a live writer's temp file would vanish under it. `older_than`: only files
    last modified before this time.time() value."""
    path = Path(path)
    found = []
    for cand in path.parent.glob(temp_prefix(path) + "*.tmp"):
        try:
            if older_than is None or cand.stat().st_mtime < older_than:
                found.append(cand)
        except OSError:
            continue
    return sorted(found)


def write_bytes(path: PathLike, data: bytes) -> None:
    """Replace `path` with `data` atomically; the file's mode as open() would give it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_problem(path: PathLike, exc: OSError) -> str:
    """Why writing `path` failed, for a CLI's `cannot write PATH: <this>` (write_bytes raises
    the OS's own error, e.g. FileExistsError for a file where a parent directory should be):
    a directory at the path, a file in place of a parent, else the OS's words."""
    path = Path(path)
    if path.is_dir():
        return "it is a directory"
    for parent in path.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                return f"{parent} is not a directory"
            break
    return str(exc.strerror or exc)


def write_text(path: PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8", errors="surrogateescape"))


def write_json(path: PathLike, obj: Any, **dump_kwargs: Any) -> None:
    """JSON with a trailing newline; defaults: indent=2, sorted keys, UTF-8 kept as is."""
    options = {"indent": 2, "sort_keys": True, "ensure_ascii": False}
    options.update(dump_kwargs)
    write_text(path, json.dumps(obj, **options) + "\n")
