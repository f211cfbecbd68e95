"""Older upstream name of `base.py` (FlagGems renamed it); kept so either import works."""
from .base import *  # noqa: F401,F403
from .base import Benchmark, BlasBenchmark, GenericBenchmark  # noqa: F401
