"""Fix the random / numpy / torch seeds at configure and before every test (code: `zl.seed`).

What it patches: the global generators' state only (random, numpy, torch; torch's
manual_seed seeds the device generators too). The host generators' previous states are
restored at unconfigure, so a later session in the same process is not seeded by this one.

When it steps back: never while loaded (a fixed seed costs nothing). `--zl-seed` / ZL_SEED
sets the value (default 0); a non-integer falls back to 0 and says so.

Why: data-dependent operators (sort, topk, unique, masked_select...) take different paths
for different inputs; with fixed seeds both sides of an A/B build byte-identical inputs,
so a latency change cannot come from the data.
"""

from __future__ import annotations

from zl import options, registry
from zl.seed import DEFAULT_SEED, SEED_ENV, SeedSession, log, seed_value

NAME = "zl_seed"


def pytest_addoption(parser):
    options.add(parser, "--zl-seed", SEED_ENV, "random/numpy/torch seed for every test", str(DEFAULT_SEED))


def pytest_configure(config):
    session = registry.register(config, NAME, SeedSession(seed_value(options.value(config, "--zl-seed"))))
    log(f"seed={session.seed}")


def pytest_unconfigure(config):
    """Restore the host generators' states."""
    registry.release(config, NAME)
