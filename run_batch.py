#!/usr/bin/env python3
"""Run many FlagGems benchmark nodes through run_pytest.sh (see zl/batch/options.py or --help)."""

import sys

from zl.batch.cli import main

if __name__ == "__main__":
    sys.exit(main())
