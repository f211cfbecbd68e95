"""Test harness for zl_bench: a CPU timing driver for Triton and a run_pytest.sh runner."""
