"""The record-link fields a real run writes into run_identity.json, for fake run directories.

The caliber guard (zl/runlog/caliber.py) pairs a record run with a replay only when the
replay names the record run (`replay_source_run_id`) and the record's digest
(`replay_record_digest`) that the record run wrote (`run_id`, `autotune_record_digest`).
Fake identities built by tests get the fields of one record run, FIXTURE_RUN_ID, so every
replay built with them replays that run's record.
"""
from __future__ import annotations

from typing import Dict, Optional

FIXTURE_RUN_ID = "0123456789abcdef0123456789abcdef"
FIXTURE_DIGEST = "sha256:" + "ab" * 32


def link_fields(mode: Optional[str], run_id: str = FIXTURE_RUN_ID,
                digest: str = FIXTURE_DIGEST) -> Dict[str, str]:
    """A record run's own link (`record*`), a replay's link to that run (`replay*`), else {}."""
    mode = mode or ""
    if mode.startswith("record"):
        return {"run_id": run_id, "autotune_record_digest": digest}
    if mode.startswith("replay"):
        return {"replay_source_run_id": run_id, "replay_record_digest": digest,
                "replay_source_record_digest": digest}
    return {}
