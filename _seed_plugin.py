"""Fix the random / numpy / torch seeds before every test.

Data-dependent operators (sort, topk, unique, masked_select...) take different
paths for different inputs; with fixed seeds both sides of an A/B build
byte-identical inputs, so a latency change cannot come from the data.
`ZL_SEED` overrides the value (default 0).
"""

from __future__ import annotations

import os
import random

from zl.term import log

TAG = "[seed-plugin]"
DEFAULT_SEED = 0


def seed_value() -> int:
    raw = os.environ.get("ZL_SEED", "").strip()
    try:
        return int(raw) if raw else DEFAULT_SEED
    except ValueError:
        log(TAG, f"ZL_SEED={raw!r} is not an integer; using {DEFAULT_SEED}")
        return DEFAULT_SEED


def apply_seeds(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    try:
        import torch

        # manual_seed seeds every device generator too (CUDA/MUSA included).
        torch.manual_seed(seed)
    except ImportError:
        pass


def pytest_configure(config):
    seed = seed_value()
    config._zl_seed = seed
    apply_seeds(seed)
    log(TAG, f"seed={seed}")


def pytest_runtest_setup(item):
    """Reseed per test so a test's inputs do not depend on what ran before it."""
    apply_seeds(getattr(item.config, "_zl_seed", DEFAULT_SEED))
