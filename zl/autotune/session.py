"""One session's autotune picks: recorded, replayed, or tuned live after a fallback.

`AutotuneSession` is the state `_autotune_record_plugin` keeps on its registered
object. Replay answers a lookup with the recorded config; a key it cannot answer is
a fallback: one marker line per (kernel, key) and, through `on_fallback`, the counts
in run_identity.json, so a partly replayed run says how much of it tuned live. A
replayed config that is not among the tuner's own candidates is run as recorded and
flagged: one AUTOTUNE_REPLAY_FOREIGN_CONFIG line per (kernel, key), listed in
`foreign_fields`. A recording session reports the digest of the record it wrote
through `on_recorded` (also on the atexit path of a crashed run).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from zl import atomic, markers
from zl.autotune import records as store
from zl.autotune.configs import config_from_dict, off_candidates, record_dict


class AutotuneSession:
    def __init__(self, op: str, mode: str, backend: str, record_dir: str = "",
                 replay: Optional[store.Records] = None, out_dir: str = "",
                 provider: str = "flaggems", log: Callable[[str], None] = print,
                 on_fallback: Optional[Callable[["AutotuneSession"], None]] = None,
                 on_recorded: Optional[Callable[[str], None]] = None) -> None:
        self.op = op
        self.mode = mode                # "record" | "replay"
        self.backend = backend
        self.record_dir = record_dir
        self.replay = replay            # {kernel: {keystr: cfgdict}}; record mode: pre-swept seed
        self.out_dir = out_dir
        self.provider = provider
        self.log = log
        self.on_fallback = on_fallback
        self.on_recorded = on_recorded
        self.records: store.Records = {}
        self.seen_cfg: Dict[Tuple[str, str], int] = {}   # (kernel,key) -> id(config)
        self.fallbacks: Dict[Tuple[str, str], str] = {}  # (kernel,key) -> reason
        self.replayed: set = set()                         # (kernel,key) answered from the record
        self.foreign: Dict[Tuple[str, str], str] = {}    # (kernel,key) -> off_candidates reason
        self.built: Dict[Tuple[str, str, int], Any] = {}   # rebuilt Config per tuner
        self.uncaptured: set = set()
        self.dumped = False

    # replay side ------------------------------------------------------------
    def lookup(self, tuner: Any, kernel: str, keystr: str) -> Optional[Any]:
        if self.replay is None:
            return None
        entry = self.replay.get(kernel, {}).get(keystr)
        if entry is None:
            self.fallback(kernel, keystr, "key_missing")
            return None
        slot = (kernel, keystr, id(tuner))
        cfg = self.built.get(slot)
        if cfg is None:
            candidates = list(getattr(tuner, "configs", ()) or ())
            cfg, problem = config_from_dict(entry, candidates)
            if problem:
                self.fallback(kernel, keystr, problem)
                return None
            if not any(cfg is c for c in candidates):
                self.flag_foreign(kernel, keystr, off_candidates(entry, candidates))
            self.built[slot] = cfg
            self.replayed.add((kernel, keystr))
        return cfg

    def flag_foreign(self, kernel: str, keystr: str, reason: Optional[str]) -> None:
        if reason is None or (kernel, keystr) in self.foreign:
            return
        self.foreign[(kernel, keystr)] = reason
        print(markers.format_marker(markers.REPLAY_FOREIGN_CONFIG, op=self.op, kernel=kernel,
                                    key=keystr, reason=reason), file=sys.stderr, flush=True)

    def foreign_fields(self) -> Dict[str, Any]:
        """run_identity.json `replay_foreign_configs`: [{kernel, key, reason}], when any."""
        if not self.foreign:
            return {}
        return {"replay_foreign_configs": [{"kernel": k, "key": key, "reason": r}
                                           for (k, key), r in sorted(self.foreign.items())]}

    def fallback(self, kernel: str, keystr: str, reason: str) -> None:
        if (kernel, keystr) in self.fallbacks:
            return
        self.fallbacks[(kernel, keystr)] = reason
        print(markers.format_marker(markers.REPLAY_FALLBACK, op=self.op, kernel=kernel,
                                    key=keystr, reason=reason), file=sys.stderr, flush=True)
        if self.on_fallback is not None:
            self.on_fallback(self)

    def fallback_fields(self) -> Dict[str, Any]:
        """run_identity.json fields of a replay that fell back for some keys."""
        by_kernel = Counter(k for k, _ in self.fallbacks)
        return {
            "autotune_mode": "replay_fallback",
            "replay_fallback_scope": "keys",
            "replay_fallback_keys": len(self.fallbacks),
            "replay_fallback_kernels": dict(sorted(by_kernel.items())),
            "replay_fallback_reasons": dict(sorted(Counter(self.fallbacks.values()).items())),
        }

    # record side ------------------------------------------------------------
    def note(self, kernel: str, keystr: str, cfg: Any, candidates: Any = ()) -> None:
        slot = (kernel, keystr)
        if self.seen_cfg.get(slot) == id(cfg):
            return  # hot path: same key, same config object as last time
        self.seen_cfg[slot] = id(cfg)
        self.records.setdefault(kernel, {})[keystr] = record_dict(cfg, candidates)

    def dump(self) -> None:
        """Write what this session ran with; once (unconfigure, or atexit on a crash)."""
        if self.dumped:
            return
        self.dumped = True
        if self.mode == "replay":
            self._dump_used()
        elif self.record_dir:
            self._dump_records()

    def _dump_records(self) -> None:
        merged: store.Records = {}
        for k, v in (self.replay or {}).items():  # pre-swept: keep the merge, overlay what ran
            merged[k] = dict(v)
        for k, v in self.records.items():
            merged.setdefault(k, {}).update(v)
        try:
            path = store.write_records(self.record_dir, self.op, merged, self.backend, self.provider)
        except Exception as exc:
            self.log(f"writing {store.record_path(self.record_dir, self.op)} failed: "
                     f"{type(exc).__name__}: {exc}")
            return
        self.log(f"recorded {store.count(merged)} config(s) for {len(merged)} kernel(s) -> {path}")
        if self.on_recorded is not None:
            try:   # the digest of what a replay will read: the file as written
                self.on_recorded(store.digest(store.load_records(self.record_dir, self.op)))
            except Exception as exc:
                self.log(f"record digest not written ({type(exc).__name__}: {exc})")
        if self.uncaptured:
            self.log("tuner(s) ran without a cache lookup, nothing to record: "
                     + ", ".join(sorted(self.uncaptured)))

    def _dump_used(self) -> None:
        """Replay side: what this run actually ran with (injected + live fallbacks), as
        `<OUT_DIR>/autotune_records/<op>.used.json`, so a replay can be diffed against
        its record. Not `<op>.json`: this run did not tune."""
        if not self.out_dir or not self.records:
            return
        path = Path(self.out_dir) / "autotune_records" / f"{self.op}.used.json"
        try:
            atomic.write_json(path, self.records)
        except Exception as exc:
            self.log(f"writing {path} failed: {type(exc).__name__}: {exc}")
