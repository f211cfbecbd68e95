"""Print the `-p` plugin list of a zl_bench run (entry point; the policy is zl/plan.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from zl.plan import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
