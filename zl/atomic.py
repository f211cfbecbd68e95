"""One way to write a file another process may read mid-run: a temp file in the same
directory, then os.replace, so a reader sees the old content or the new, never half.

Used for run_identity.json, autotune records, shapes.yaml, the IR index, reports and
campaign tables. A failed write removes its temp file and re-raises.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Union

PathLike = Union[str, "os.PathLike[str]"]


def write_text(path: PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_bytes(path: PathLike, data: bytes) -> None:
    """Binary twin of write_text (report PNGs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: PathLike, obj: Any, **dump_kwargs: Any) -> None:
    """JSON with a trailing newline; defaults: indent=2, sorted keys, UTF-8 kept as is."""
    options = {"indent": 2, "sort_keys": True, "ensure_ascii": False}
    options.update(dump_kwargs)
    write_text(path, json.dumps(obj, **options) + "\n")
