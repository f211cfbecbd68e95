"""Fixed random / numpy / torch seeds, and the generator states to restore afterwards.

Data-dependent operators (sort, topk, unique, masked_select...) take different paths for
different inputs; with fixed seeds both sides of an A/B build byte-identical inputs, so a
latency change cannot come from the data.
"""

from __future__ import annotations

import random
from typing import Any, Dict, Optional

from zl.term import log as _term_log

TAG = "[seed-plugin]"
DEFAULT_SEED = 0
SEED_ENV = "ZL_SEED"


def log(message: str) -> None:
    _term_log(TAG, message)


def seed_value(raw: Optional[str]) -> int:
    """The seed for `raw` (empty: DEFAULT_SEED); a non-integer falls back, saying so."""
    raw = (raw or "").strip()
    try:
        return int(raw) if raw else DEFAULT_SEED
    except ValueError:
        log(f"{SEED_ENV}={raw!r} is not an integer; using {DEFAULT_SEED}")
        return DEFAULT_SEED


def _numpy():
    try:
        import numpy
        return numpy
    except ImportError:
        return None


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def apply_seeds(seed: int) -> None:
    random.seed(seed)
    np, torch = _numpy(), _torch()
    if np is not None:
        np.random.seed(seed)
    if torch is not None:
        # manual_seed seeds every device generator too (CUDA/MUSA included).
        torch.manual_seed(seed)


def capture_states() -> Dict[str, Any]:
    """The host generators' states (random, numpy, torch CPU) before seeding."""
    np, torch = _numpy(), _torch()
    return {"random": random.getstate(),
            "numpy": np.random.get_state() if np is not None else None,
            "torch": torch.random.get_rng_state() if torch is not None else None}


def restore_states(states: Dict[str, Any]) -> None:
    """Put the host generators back; device generators stay seeded (restoring them
    would initialise a device context at teardown)."""
    random.setstate(states["random"])
    np, torch = _numpy(), _torch()
    if np is not None and states["numpy"] is not None:
        np.random.set_state(states["numpy"])
    if torch is not None and states["torch"] is not None:
        torch.random.set_rng_state(states["torch"])


class SeedSession:
    """Seeds at configure and before every test; `close` restores the host generators."""

    def __init__(self, seed: int):
        self.seed = seed
        self.saved = capture_states()
        apply_seeds(seed)

    def pytest_runtest_setup(self, item):
        """Reseed per test so a test's inputs do not depend on what ran before it."""
        apply_seeds(self.seed)

    def close(self) -> None:
        restore_states(self.saved)
