"""Merge-update `$OUT_DIR/run_identity.json`: the caliber of one run.

run_pytest.sh writes a stub before pytest starts; plugins then merge the facts
only they can know (device name, timer, final autotune mode). Comparison tools
refuse to pair runs whose caliber differs, so this file is an interface: a
field written wrong here turns into a valid-looking report comparing two
different things.

Writes are atomic (tmp + os.replace) and serialised with an fcntl lock, because
the parallel warmup workers and the parent may merge at the same time. Without
OUT_DIR (ad-hoc pytest, unit tests) every call is a silent no-op.

The write that creates the file adds `run_id` (a random 32-hex id): one id per run
directory, since a new run starts from an absent file (zl.rundir moves an earlier run
aside). A replay records its source's run_id, so a comparison can tell which run's
record side B replayed (zl/runlog/caliber.py).

A file that is not a JSON object is never silently replaced by the next merge (that
would turn a broken caliber into a clean-looking partial one): the writer moves it
aside as `run_identity.json.corrupt-<timestamp>` and says so on stderr. Temp files
left by a SIGKILLed writer are removed by the next writer, under the lock.

CLI (used by the shell stub):
    python -m zl.identity OUT_DIR --set key=value [--set key=value ...]
    python -m zl.identity OUT_DIR --get key
Exit codes: 0 merged / printed; 1 --get: no such key (or no readable file); 2 usage, or
--set on an OUT_DIR that cannot hold the file (a regular file, under a file, not writable:
the path and the reason named on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from zl import atomic

IDENTITY_NAME = "run_identity.json"
SCHEMA_VERSION = 1


def identity_path(out_dir: Optional[str] = None) -> Optional[Path]:
    if out_dir is None:
        from zl.config import current
        out_dir = current().out_dir.strip()
    root = out_dir
    if not root:
        return None
    return Path(root) / IDENTITY_NAME


class CorruptIdentity(ValueError):
    """run_identity.json exists but is not a readable JSON object."""


def _read_strict(path: Path) -> Dict[str, Any]:
    """{} when absent; CorruptIdentity when present but unreadable or not an object."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptIdentity(f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CorruptIdentity(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CorruptIdentity(f"{path} holds a JSON {type(data).__name__}, not an object")
    return data


def _read(path: Path) -> Dict[str, Any]:
    try:
        return _read_strict(path)
    except CorruptIdentity:
        return {}


def _set_aside(path: Path, why: str) -> Path:
    """Move a corrupt identity file out of the way, keeping it as evidence."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 2
    while aside.exists():
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    os.replace(path, aside)
    print(f"!!! [identity] {why}; kept it as {aside.name} and started a new {path.name} "
          "(fields written before the corruption are lost: this run's caliber is incomplete)",
          file=sys.stderr, flush=True)
    return aside


def _remove_stale_temps(path: Path, lock_taken: float) -> None:
    # We hold the exclusive lock, so no live writer owns a temp file of this target:
    # anything older than our lock is a SIGKILLed writer's leftover.
    for stale in atomic.stale_temps(path, older_than=lock_taken):
        try:
            stale.unlink()
        except OSError:
            pass


def load_identity(out_dir: Optional[str] = None) -> Dict[str, Any]:
    path = identity_path(out_dir)
    return {} if path is None else _read(path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock_path = path.with_name(f".{path.name}.lock")  # hidden: not part of the run's outputs
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def update_identity(out_dir: Optional[str] = None, **fields: Any) -> Dict[str, Any]:
    """Merge `fields` into the identity file; None values are skipped."""
    path = identity_path(out_dir)
    clean = {k: v for k, v in fields.items() if v is not None}
    if path is None:
        return clean
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        _remove_stale_temps(path, time.time())
        try:
            current = _read_strict(path)
        except CorruptIdentity as exc:
            _set_aside(path, str(exc))
            current = {}
        if not current:
            current["run_id"] = uuid.uuid4().hex
        current.update(clean)
        atomic.write_json(path, current)
    return current


def _parse_assignment(text: str) -> tuple:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    value = value.strip()
    # Integers stay integers (direct_repeat, schema_version) so readers compare like with like.
    if value.lstrip("-").isdigit():
        return key.strip(), int(value)
    return key.strip(), value


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description="merge fields into run_identity.json")
    parser.add_argument("out_dir")
    parser.add_argument("--set", dest="sets", action="append", default=[], type=_parse_assignment,
                        metavar="KEY=VALUE")
    parser.add_argument("--get", default=None, metavar="KEY")
    args = parser.parse_args(argv)
    if args.get:
        value = load_identity(args.out_dir).get(args.get)
        if value is None:
            return 1
        print(value)
        return 0
    try:
        update_identity(args.out_dir, **dict(args.sets))
    except OSError as exc:   # the library raises; the CLI names the path (exit 2)
        target = identity_path(args.out_dir)
        print(f"zl.identity: cannot write {target}: {atomic.write_problem(target, exc)}",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
