"""Every level's fingerprint of one run, recorded at dump time: `<dump>/ir_fingerprints.json`.

The IR plugin calls `record(dump_dir, variants)` right after writing the TTGIR tree. The
variants counted are exactly those with a dumped .ttgir file (index.tsv rows whose `file`
is a real name), under the same relative paths, so the recorded ttgir hash equals
`fingerprint(run, "ttgir")` over the dumped files, and every deeper level is hashed over
the same set. Texts are read from the run's private Triton cache (the compile already
wrote them there); nothing beyond the JSON is written, so recording every level costs one
read and one sha256 per variant and level, on the host, after measurement.

Each variant's own digest per level is recorded too (`per_variant`: its identity from
index.tsv, its relative path, {level: digest} over the same normalised text), so the
verdict can tell "one side compiled an extra specialisation" from "the code changed"
(zl.ir.per_variant). Schema 1 files have no `per_variant` and are judged as before.

A level that some dumped variant lacks in the cache is recorded `complete: false` and is
never compared (a hash over part of the kernels could call a changed run unchanged).
The binary lies beside the texts in the same cache group directory (Triton writes one
directory per compile): `<kernel>.cubin` / `.hsaco` / `.mubin`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from zl import atomic
from zl.ir import binary, per_variant
from zl.ir.fingerprint import (BINARY_EXTS, FINGERPRINTS_NAME, LEVEL_ORDER, SCHEMA_VERSION,
                               digest_normalized, normalize_text, read_index, strip_prefixes)


def binary_path(ir_paths: Mapping[str, str]) -> Optional[Path]:
    """The compiled binary in the variant's cache group, or None."""
    for text_path in ir_paths.values():
        base = Path(text_path)
        for ext in BINARY_EXTS:
            candidate = base.with_suffix("." + ext)
            if candidate.is_file():
                return candidate
    return None


def _read(path: str) -> Optional[str]:
    try:
        return Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return None


def level_hashes(dump_dir: os.PathLike, variants: Mapping[str, Mapping[str, Any]]) -> Dict[str, Any]:
    """{'schema_version', 'levels': {level: {'hash', 'files', 'complete'}}, 'binary_kind',
    'per_variant': [{'identity', 'path', 'levels': {level: digest}}], 'strip_prefixes': the
    module-attribute prefixes removed before hashing (ZL_IR_STRIP_ATTRS included)}."""
    rows = read_index(Path(dump_dir)) or []
    prefixes = strip_prefixes()
    members = []
    for row in rows:
        name = row["file"].strip()
        v = variants.get(row.get("cache_hash", ""))
        if not name or name.startswith("(") or v is None:
            continue
        members.append((f"{row['shape']}/{row['kernel']}/{name.rsplit('.', 1)[0]}", v, row))
    texts: Dict[str, list] = {lv: [] for lv in LEVEL_ORDER if lv != "binary"}
    missing: Dict[str, int] = {lv: 0 for lv in LEVEL_ORDER}
    blobs = []
    kinds = set()
    own = []
    for stem, v, row in members:
        paths = v.get("ir_paths") or {}
        digests: Dict[str, str] = {}
        for level in texts:
            text = _read(paths[level]) if level in paths else None
            if text is None:
                missing[level] += 1
            else:
                # Normalised once: the aggregate hashes it with its path, the variant's own
                # digest without (names differ across runs).
                norm = normalize_text(text, level, prefixes)
                texts[level].append((f"{stem}.{level}", norm))
                digests[level] = hashlib.sha256(norm.encode("utf-8", errors="surrogateescape")).hexdigest()
        bpath = binary_path(paths)
        try:
            blob = bpath.read_bytes() if bpath is not None else None
        except OSError:
            blob = None
        if blob is None:
            missing["binary"] += 1
        else:
            kinds.add(bpath.suffix.lstrip("."))
            blobs.append((f"{stem}.{bpath.suffix.lstrip('.')}", binary.code_digest(blob)))
            digests["binary"] = blobs[-1][1]
        own.append({"identity": per_variant.identity_of(row), "path": stem, "levels": digests})
    levels: Dict[str, Any] = {}
    for level, items in texts.items():
        if items:
            levels[level] = {"hash": digest_normalized(items), "files": len(items),
                             "complete": missing[level] == 0}
    if blobs:
        digest = hashlib.sha256()
        for rel, code in sorted(blobs):
            digest.update(f"{rel}\n{code}\n".encode())
        levels["binary"] = {"hash": digest.hexdigest(), "files": len(blobs),
                            "complete": missing["binary"] == 0}
    return {"schema_version": SCHEMA_VERSION, "variants": len(members), "levels": levels,
            "binary_kind": ",".join(sorted(kinds)) or None, "per_variant": own,
            "strip_prefixes": sorted(prefixes)}


def record(dump_dir: os.PathLike, variants: Mapping[str, Mapping[str, Any]]) -> Dict[str, Any]:
    """Compute and write `<dump_dir>/ir_fingerprints.json`; returns what was written."""
    doc = level_hashes(dump_dir, variants)
    atomic.write_text(Path(dump_dir) / FINGERPRINTS_NAME, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc
