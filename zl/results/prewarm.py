"""Load the results capture's device kernels in a background thread while pytest starts up.

Why: on the H200 a process's first large-output record cost 160-230 ms in a fresh process
(docs/validation/timing.md, section 4) and 0.17-0.49 s of a softmax or clamp run's pytest time
(upstream's whole pytest time: 4-7 s), most of it CUDA loading torch's kernels on first use
(72 ms with CUDA_MODULE_LOADING=EAGER); later records cost 2 ms. torch's Python bindings
release the GIL while an operator runs, so that loading can overlap the benchmark's conftest
importing flag_gems (7-10 s of start-up on the H200). One describe() per common float dtype
on a tensor just above the host path's cap runs the same kernels as a real large record.

The thread is joined before collection ends (and again, as a backstop, before each test), so
none of its device work overlaps a timed loop or a `use_gems()` block (inside one, its torch
calls would dispatch to FlagGems). When runs overlap on the device (`run_batch.py --overlap`),
the work holds the device's lock shared, so it never runs beside another run's timing either.
Only on torch.cuda: lazy loading is CUDA's.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

from zl.results import capture

DTYPES = ("float16", "bfloat16", "float32")
ELEMENTS = 2 * capture.HOST_CAP     # above the cap: the device path; a whole number of words


class Prewarm:
    def __init__(self, log: Callable[[str], None], lock: Optional[str] = None):
        self.log = log
        self.lock = lock     # the device's timing lock when runs overlap: the work holds it shared
        self.thread: Optional[threading.Thread] = None
        self.busy_s = 0.0
        self.outcome = "not started"
        self.joined = False

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="zl-results-prewarm", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            import torch
            if not torch.cuda.is_available():
                self.outcome = "skipped (no CUDA device)"
                return
            def work() -> None:
                for name in DTYPES:
                    capture.describe(torch.ones(ELEMENTS, dtype=getattr(torch, name), device="cuda"))
                torch.cuda.synchronize()
            self.outcome = f"{', '.join(DTYPES)} loaded"
            if self.lock is None:
                work()
            else:   # GPU work: never beside another overlapped run's timing (zl/timing/exclusive.py)
                from zl.timing.exclusive import run_shared
                waited = run_shared(self.lock, work, torch.cuda.synchronize)
                self.outcome += f" under the device's shared lock (waited {waited:.3f} s)"
        except Exception as exc:  # a failed prewarm only leaves the first record slower
            self.outcome = f"failed ({exc!r:.200})"
        finally:
            self.busy_s = time.perf_counter() - t0

    def join(self) -> float:
        """Wait for the thread (once); returns the seconds waited, 0.0 when there was none."""
        if self.thread is None or self.joined:
            return 0.0
        t0 = time.perf_counter()
        self.thread.join()
        self.joined = True
        waited = time.perf_counter() - t0
        self.log(f"capture kernels prewarmed in the background: {self.outcome}, "
                 f"{self.busy_s:.3f} s of which the run waited {waited:.3f} s")
        return waited
