"""What `_autotune_record_plugin` does at configure and unconfigure, as one object.

`Settings` is everything the plugin reads (its settings in the run configuration, the
sweep's hand-over). `decide` turns it into the mode this run really has; `AutotuneControl` is
the object the plugin registers when it patches anything, holding the session, the
PatchStack and the atexit hook, and undoing all of it in `close`.

run_identity.json `autotune_mode` is written here, by the plugin that ran, for every
outcome -- never by the shell's intent:
  record | replay | uncontrolled (neither or both dirs, no Autotuner) |
  replay_fallback with replay_fallback_scope=all and replay_fallback_reason
    (missing_records, missing_record, unreadable_record, backend_mismatch): the whole
    run tuned live, so it is a record run, not side B of an A/B |
  replay_fallback with replay_fallback_scope=keys and replay_fallback_keys /
    replay_fallback_kernels / replay_fallback_reasons: some keys tuned live |
  replay_fallback with replay_fallback_scope=all and replay_fallback_reason=no_key_replayed
    (set at close): every key the replay met fell back (an emptied or foreign record).

The link between the two sides of an A/B (read by zl/runlog/caliber.py):
  record run: `autotune_record_digest` of the record it wrote (records.digest);
  replay run: `replay_record_digest` of the record it read, `replay_source_dir` (the run
    directory the record belongs to) and, from that run's identity at replay time,
    `replay_source_run_id` and `replay_source_record_digest` (absent when it had none).
Configs replayed although the tuner does not list them: `replay_foreign_configs`.
"""

from __future__ import annotations

import atexit
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from zl import markers
from zl.autotune import records as store
from zl.autotune.libentry import isolate_kernel_caches
from zl.autotune.session import AutotuneSession
from zl.autotune.tuner import TunerPatch
from zl.identity import load_identity
from zl.patching import PatchStack


@dataclass
class Settings:
    op: str
    record_dir: str
    replay_dir: str
    preswept: bool
    out_dir: str
    provider: str
    backend: str


@dataclass
class Decision:
    mode: str                       # record | replay | uncontrolled | replay_fallback
    identity: Dict[str, Any]        # fields for run_identity.json
    records: Optional[store.Records] = None
    message: str = ""
    marker: str = ""                # a whole-run AUTOTUNE_REPLAY_FALLBACK line, if any


def autotuner_class() -> Any:
    """triton's Autotuner, or an exception saying why it cannot be patched."""
    cls = importlib.import_module("triton.runtime.autotuner").Autotuner
    if not callable(getattr(cls, "run", None)):
        raise AttributeError("Autotuner.run missing")
    return cls


def _uncontrolled(why: str, message: str) -> Decision:
    return Decision("uncontrolled", {"autotune_mode": "uncontrolled", "autotune_mode_reason": why},
                    message=message)


def source_fields(replay_dir: str) -> Dict[str, Any]:
    """Where a replay's record comes from: the run directory holding `autotune_records/`
    and what that run's identity says about itself now (run_id, the record digest)."""
    source = Path(replay_dir).resolve().parent
    ident = load_identity(str(source))
    return {"replay_source_dir": str(source),
            "replay_source_run_id": ident.get("run_id"),
            "replay_source_record_digest": ident.get("autotune_record_digest")}


def decide(s: Settings, autotuner: Callable[[], Any] = autotuner_class) -> Decision:
    """The mode this run really has, with its identity fields and the records to use."""
    if s.record_dir and s.replay_dir:
        return _uncontrolled("both_dirs", "!!! ERROR both a record and a replay dir are set; recording "
                             "while replaying is meaningless, doing neither (autotune_mode=uncontrolled)")
    if not s.record_dir and not s.replay_dir:
        return _uncontrolled("no_dir", "")
    try:
        autotuner()
    except Exception as exc:
        return _uncontrolled("no_autotuner", f"Triton Autotuner unavailable ({type(exc).__name__}: "
                             f"{exc}); autotune_mode=uncontrolled")
    if s.replay_dir:
        try:
            recs = store.open_replay(s.replay_dir, s.op, s.backend)
        except store.RecordUnusable as exc:
            marker = markers.format_marker(markers.REPLAY_FALLBACK, op=s.op, kernel="*", key="*",
                                           reason=exc.reason, **exc.detail)
            return Decision("replay_fallback", {"autotune_mode": "replay_fallback",
                                                "replay_fallback_scope": "all",
                                                "replay_fallback_reason": exc.reason,
                                                **source_fields(s.replay_dir)},
                            message=f"{exc}; tuning live", marker=marker)
        return Decision("replay", {"autotune_mode": "replay", "replay_record_digest": store.digest(recs),
                                   **source_fields(s.replay_dir)}, records=recs,
                        message=f"replaying {store.count(recs)} recorded config(s) for {len(recs)} "
                                f"kernel(s) from {store.record_path(s.replay_dir, s.op)}")
    seeded, note = None, ""
    if s.preswept:
        try:
            seeded = store.load_records(s.record_dir, s.op)
            note = " (seeded from the parallel sweep)"
        except ValueError as exc:
            note = f" (pre-swept records unusable: {exc}; tuning serially)"
    return Decision("record", {"autotune_mode": "record"}, records=seeded,
                    message=f"recording autotune configs to {store.record_path(s.record_dir, s.op)}{note}")


class AutotuneControl:
    """The registered plugin object: session state, patches, atexit hook; `close` undoes all."""

    def __init__(self, settings: Settings, decision: Decision, log: Callable[[str], None],
                 identity: Callable[..., None]) -> None:
        self.settings = settings
        self.decision = decision
        self.log = log
        self.identity = identity
        self.stack = PatchStack()
        replay = decision.mode == "replay"
        self.session = AutotuneSession(
            settings.op, "replay" if replay else "record", settings.backend,
            record_dir="" if replay else settings.record_dir, replay=decision.records,
            out_dir=settings.out_dir, provider=settings.provider, log=log,
            on_fallback=self._fallback_identity if replay else None,
            on_recorded=None if replay else self._recorded_identity)

    def _fallback_identity(self, session: AutotuneSession) -> None:
        self.identity(**session.fallback_fields())

    def _recorded_identity(self, digest: str) -> None:
        self.identity(autotune_record_digest=digest)

    def start(self) -> None:
        isolate_kernel_caches(self.stack)
        TunerPatch(self.session, self.stack).install(autotuner_class())
        if self.session.mode == "record":
            # atexit rather than sessionfinish: an exception or sys.exit that ends the
            # session early still leaves what was tuned so far. os._exit and fatal
            # signals skip it: such runs keep only what an earlier process wrote.
            atexit.register(self.session.dump)
            self.stack.push(lambda: atexit.unregister(self.session.dump))
            try:
                store.write_meta(self.settings.record_dir, self.settings.op, self.settings.backend,
                                 self.settings.provider)
            except Exception as exc:
                self.log(f"meta.json write failed: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Dump now (atexit stays the crash path until here) and undo every patch."""
        try:
            self.session.dump()
            if self.session.mode == "replay":
                replayed, fell_back = len(self.session.replayed), len(self.session.fallbacks)
                self.identity(replay_replayed_keys=replayed, replay_fallback_keys=fell_back,
                              **self.session.foreign_fields())
                if replayed == 0 and fell_back:
                    # Nothing was pinned: the whole run tuned live, record vs record.
                    self.log(f"!!! no recorded config was replayed ({fell_back} key(s) tuned live): "
                             "the record is empty or another operator's")
                    self.identity(replay_fallback_scope="all", replay_fallback_reason="no_key_replayed")
        finally:
            self.stack.undo_all()


def print_marker(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
