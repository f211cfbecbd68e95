"""The autotune record store: `<dir>/<op>.json` ({kernel: {key: config}}) and `meta.json`.

A replay is only as good as its record, so `open_replay` checks everything that can
make a record unusable and names it (`RecordUnusable.reason`, also the marker's
`reason=`): a missing records dir or op file, a truncated or malformed file, a
record made on another backend. The caller then tunes live and says so in
run_identity.json instead of claiming to replay.

`ran_with` reads back what a finished run's compiled code followed: a replay's
`<op>.used.json` (the record's configs plus any key it tuned live after a fallback), else a
recording run's `<op>.json`; `other_picks` names the (kernel, key)s two of them tune otherwise.

`digest` names a record by its content (sha256 of its canonical JSON: key order and
whitespace do not count, any config value does). The recording run writes it as identity
`autotune_record_digest`, the replaying run the digest of what it read as
`replay_record_digest`; the caliber guard pairs two runs only when they match.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from zl import atomic

META_NAME = "meta.json"
META_SCHEMA = 1

Records = Dict[str, Dict[str, Dict[str, Any]]]


class RecordUnusable(ValueError):
    """A replay record that cannot be used; `reason` is the marker word."""

    def __init__(self, reason: str, message: str, **detail: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.detail = detail


def record_path(record_dir: str, op: str) -> Path:
    return Path(record_dir) / f"{op}.json"


def write_meta(record_dir: str, op: str, backend: str, provider: str = "flaggems") -> None:
    atomic.write_json(Path(record_dir) / META_NAME, {
        "schema_version": META_SCHEMA,
        "provider": provider or "flaggems",
        "backend": backend,
        "op": op,
    })


def write_records(record_dir: str, op: str, records: Records, backend: str,
                  provider: str = "flaggems") -> Path:
    path = record_path(record_dir, op)
    atomic.write_json(path, records)
    write_meta(record_dir, op, backend, provider)
    return path


def validate(doc: Any, where: str) -> Records:
    """The document as {kernel: {key: config dict with a kwargs dict}}, else RecordUnusable."""
    if not isinstance(doc, dict):
        raise RecordUnusable("unreadable_record", f"{where}: expected {{kernel: {{key: config}}}}")
    for kernel, keys in doc.items():
        if not isinstance(keys, dict):
            raise RecordUnusable("unreadable_record", f"{where}: expected {{kernel: {{key: config}}}} "
                                 f"(kernel {kernel!r} maps to {type(keys).__name__})")
        for key, cfg in keys.items():
            if not isinstance(cfg, dict) or not isinstance(cfg.get("kwargs", {}), dict):
                raise RecordUnusable("unreadable_record", f"{where}: config of {kernel} key {key} "
                                     "is not a config object")
    return doc


def load_records(record_dir: str, op: str) -> Records:
    """{kernel: {key: cfg}} from `<dir>/<op>.json`; {} when there is no file;
    RecordUnusable (a ValueError) naming a truncated or malformed file."""
    path = record_path(record_dir, op)
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RecordUnusable("unreadable_record", f"{path}: not valid JSON ({exc})") from None
    return validate(doc, str(path))


def load_used(record_dir: str) -> Records:
    """What a replaying run ran with: its `<op>.used.json` (AutotuneSession._dump_used), merged;
    {} when there is none (a replay that met no autotuned kernel writes none); RecordUnusable
    naming a truncated or malformed file."""
    used: Records = {}
    for path in sorted(Path(record_dir).glob("*.used.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RecordUnusable("unreadable_record", f"{path}: not valid JSON ({exc})") from None
        for kernel, keys in validate(doc, str(path)).items():
            used.setdefault(kernel, {}).update(keys)
    return used


def ran_with(run_dir: str) -> Records:
    """The autotune picks a finished run's compiled code followed, from its `autotune_records/`:
    a replay's `<op>.used.json`, else a recording run's `<op>.json` (written even when `{}`);
    {} when it left neither. RecordUnusable naming a truncated or malformed file."""
    rec_dir = Path(run_dir) / "autotune_records"
    if any(rec_dir.glob("*.used.json")):
        return load_used(str(rec_dir))
    picks: Records = {}
    for path in sorted(rec_dir.glob("*.json")):
        if path.name != META_NAME:
            for kernel, keys in load_records(str(rec_dir), path.name[:-len(".json")]).items():
                picks.setdefault(kernel, {}).update(keys)
    return picks


def canonical(cfg: Optional[Dict[str, Any]]) -> Optional[str]:
    """One config as text where key order does not count and every value does."""
    return None if cfg is None else json.dumps(cfg, sort_keys=True, separators=(",", ":"))


def other_picks(a: Records, b: Records) -> List[Tuple[str, str]]:
    """The (kernel, key)s both records hold with another config, sorted; a key only one
    holds is not among them."""
    return sorted((kernel, key) for kernel, keys in a.items() for key, cfg in keys.items()
                  if key in b.get(kernel, {}) and canonical(cfg) != canonical(b[kernel][key]))


def digest(records: Records) -> str:
    """`sha256:<hex>` of the record's canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(records, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def read_meta_backend(record_dir: str) -> str:
    path = Path(record_dir) / META_NAME
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return ""
    return str(meta.get("backend") or "").strip() if isinstance(meta, dict) else ""


def open_replay(replay_dir: str, op: str, backend: str) -> Records:
    """The records to replay, or RecordUnusable: missing_records / missing_record /
    backend_mismatch / unreadable_record. A record file holding `{}` is usable (the
    recorded run autotuned nothing); any key the replay then meets falls back per key."""
    root = Path(replay_dir)
    if not root.is_dir():
        raise RecordUnusable("missing_records", f"{root} does not exist: the run replayed from "
                             "left no autotune_records/")
    recorded = read_meta_backend(replay_dir)
    if recorded and recorded != backend:
        raise RecordUnusable("backend_mismatch", f"refusing to replay {recorded} configs on {backend}",
                             recorded=recorded, current=backend)
    if not record_path(replay_dir, op).is_file():
        raise RecordUnusable("missing_record", f"{record_path(replay_dir, op)} does not exist: "
                             f"the run replayed from recorded nothing for {op}")
    return load_records(replay_dir, op)


def count(records: Optional[Records]) -> int:
    return sum(len(v) for v in (records or {}).values())
