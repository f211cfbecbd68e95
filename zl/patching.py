"""One patch/undo stack for everything a plugin changes in the process.

Plugins patch FlagGems' Benchmark methods, Triton's autotuner, `torch.cuda` helpers and
environment variables. Each change is recorded here with its undo, and `undo_all` puts
everything back in reverse order at `pytest_unconfigure`, so the plugins can be loaded,
unloaded and tested in one process without leaking state into the next session.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

from zl.childenv import set_in_process

_MISSING = object()


class PatchStack:
    """LIFO of undo callables; `setattr`/`setenv` record the previous value first."""

    def __init__(self) -> None:
        self._undo: List[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self._undo)

    def push(self, undo: Callable[[], None]) -> None:
        """Register an undo for a change made elsewhere."""
        self._undo.append(undo)

    def setattr(self, target: Any, name: str, value: Any) -> Any:
        """Set target.name = value; returns the previous value (or None when it had none).

        For a class, the previous value is read from its own __dict__, so undo restores an
        inherited attribute by deleting the override instead of copying the parent's.
        """
        if isinstance(target, type):
            previous = target.__dict__.get(name, _MISSING)
        else:
            previous = getattr(target, name, _MISSING)
        setattr(target, name, value)

        def undo() -> None:
            if previous is _MISSING:
                try:
                    delattr(target, name)
                except AttributeError:
                    pass
            else:
                setattr(target, name, previous)

        self._undo.append(undo)
        return None if previous is _MISSING else previous

    def setenv(self, name: str, value: Optional[str]) -> None:
        """Set (or, with None, remove) a variable of this process's environment (through
        zl.childenv, its one writer), restoring it at undo."""
        previous = set_in_process(name, value)

        def undo() -> None:
            set_in_process(name, previous)

        self._undo.append(undo)

    def undo_all(self) -> None:
        """Undo every change, newest first; an undo that fails does not stop the others."""
        errors = []
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception as exc:  # keep restoring; report after
                errors.append(exc)
        if errors:
            raise errors[0]
