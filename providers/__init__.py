"""Benchmark providers: how a suite's test nodes map onto zl_bench runs. Only FlagGems today."""
