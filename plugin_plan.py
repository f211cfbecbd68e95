"""Print the `-p` plugin list of a zl_bench run (entry point; the policy is zl/plan.py)."""

import sys

from zl.plan import main

if __name__ == "__main__":
    sys.exit(main())
