"""Merge-update `$OUT_DIR/run_identity.json`: the caliber of one run.

run_pytest.sh writes a stub before pytest starts; plugins then merge the facts
only they can know (device name, timer, final autotune mode). Comparison tools
refuse to pair runs whose caliber differs, so this file is an interface: a
field written wrong here turns into a valid-looking report comparing two
different things.

Writes are atomic (tmp + os.replace) and serialised with an fcntl lock, because
the parallel warmup workers and the parent may merge at the same time. Without
OUT_DIR (ad-hoc pytest, unit tests) every call is a silent no-op.

CLI (used by the shell stub):
    python -m zl.identity OUT_DIR --set key=value [--set key=value ...]
    python -m zl.identity OUT_DIR --get key
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from zl import atomic

IDENTITY_NAME = "run_identity.json"
SCHEMA_VERSION = 1


def identity_path(out_dir: Optional[str] = None) -> Optional[Path]:
    root = out_dir if out_dir is not None else os.environ.get("OUT_DIR", "").strip()
    if not root:
        return None
    return Path(root) / IDENTITY_NAME


def _read(path: Path) -> Dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


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
        current = _read(path)
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
    update_identity(args.out_dir, **dict(args.sets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
