#!/usr/bin/env python3
"""Per-case overhead of run_batch.py over the run script alone (CPU, no GPU needed).

    python benchmarks/batch_overhead.py [--cases 20]

Runs the same N cases of the fake FlagGems tree through tests/fixtures/batch/stub_case.sh twice:
each directly (`bash stub_case.sh`, one after another) and through `run_batch.py --devices 0`,
and prints (batch wall - direct wall) / N. What that includes: the batch's own start (inventory
scan, reaper), the process group and reaper bookkeeping, the status table rewrite, log parsing
and the final batch_summary.py call, spread over the cases.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "fake_flaggems"
STUB = REPO / "tests" / "fixtures" / "batch" / "stub_case.sh"
OPS = ["softmax", "relu", "abs", "exp", "amax", "mm", "gelu_backward", "zl_flaky", "zl_sweep"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=18, help="number of cases (the fake ops, repeated)")
    n = p.parse_args().cases
    ops = [OPS[i % len(OPS)] for i in range(n)]
    env = dict(os.environ, FLAGGEMS_DIR=str(FAKE), ZL_RUN_PYTEST=str(STUB), NO_COLOR="1",
               PYTHONPATH=str(REPO))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for i, op in enumerate(ops):
            node = f"{FAKE}/benchmark/test_{op}.py::test_{op}"
            subprocess.run(["bash", str(STUB)], env=dict(env, TEST_NODE=node, OUT_DIR=f"{tmp}/d/{i}"),
                           stdout=subprocess.DEVNULL, check=True)
        direct = time.perf_counter() - t0
        uniq = list(dict.fromkeys(ops))
        t0 = time.perf_counter()
        runs = 0
        while runs < n:   # the batch runs each name once: repeat batches until n cases ran
            k = min(len(uniq), n - runs)
            subprocess.run([sys.executable, str(REPO / "run_batch.py"), "--ops", *uniq[:k], "--devices", "0",
                            "--batch-dir", f"{tmp}/b{runs}"], env=env, stdout=subprocess.DEVNULL, check=True)
            runs += k
        batch = time.perf_counter() - t0
    print(f"{n} cases: direct {direct:.2f} s ({direct / n * 1000:.0f} ms/case), run_batch {batch:.2f} s "
          f"({batch / n * 1000:.0f} ms/case); batch layer overhead {(batch - direct) / n * 1000:.0f} ms per case")
    return 0


if __name__ == "__main__":
    sys.exit(main())
