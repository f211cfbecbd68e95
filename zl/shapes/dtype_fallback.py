"""What a benchmark measures where upstream refuses the dtypes asked (`--dtypes`, DTYPES):
the policy `ZL_DTYPE_FALLBACK` / `--zl-dtype-fallback`, applied by `_shape_inject_plugin`.

FlagGems' `Benchmark.set_dtypes` raises ValueError "Given dtype(s) '...'can't be supported by
this op '<op>'" when a dtype asked is not among the op's declared `self.dtypes` (about 77 of the
1117 inventory nodes declare only integer or bool dtypes).

- `all` (the default, the caliber of every run before the policy existed): nothing is
  patched and the refusal stands; run_batch.py then reruns the case without the
  restriction, which measures every dtype the op declares.
- `first`: `set_dtypes` of every FlagGems Benchmark class that defines it (overrides
  included) is wrapped after collection and put back at unconfigure. Where upstream refuses,
  the op's first declared dtype (`self.dtypes[0]`) is measured instead, in the same process,
  and one marker line says so: `DTYPE_FALLBACK op=<op> asked=<dtype,...> measured=<dtype>`.
  run_identity.json records `dtype_fallback=first`, a caliber field: those ops measured
  another dtype set than under `all`.

Why: on an H100 judge screen at 16 cases per device, 4 of 48 drawn nodes that refuse
float16 timed out at 60 s in the unrestricted rerun, each declared dtype compiling its own
kernels. Anything but all/first is a DtypeFallbackError (the plugin: pytest usage error, exit 4).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, List, Optional, Sequence, Tuple

from zl.flaggems import UNSUPPORTED_DTYPE, BenchmarkMethodPatch
from zl.identity import update_identity
from zl.markers import DTYPE_FALLBACK, format_marker
from zl.term import log as _term_log

TAG = "[dtype-fallback]"
POLICIES = ("all", "first")
DEFAULT = "all"


class DtypeFallbackError(ValueError):
    """ZL_DTYPE_FALLBACK / --zl-dtype-fallback is not one of all / first."""


def check_policy(word: Optional[str]) -> str:
    """The policy named by `word` (case and surrounding blanks ignored; empty: the default)."""
    policy = (word or "").strip().lower() or DEFAULT
    if policy not in POLICIES:
        raise DtypeFallbackError(f"ZL_DTYPE_FALLBACK={word!r} (--zl-dtype-fallback) is not one of "
                                 f"{', '.join(POLICIES)}")
    return policy


def dtype_name(dtype: Any) -> str:
    """`torch.float16` -> `float16` (the word `--dtypes` takes)."""
    return str(dtype).rsplit(".", 1)[-1]


class FirstDtype:
    """The `first` policy's session object: the set_dtypes patch and what it substituted."""

    def __init__(self, out_dir: Optional[str] = None,
                 log: Callable[[str], None] = lambda message: _term_log(TAG, message)):
        self.out_dir = (out_dir or "").strip()
        self.log = log
        self.patch = BenchmarkMethodPatch("set_dtypes", self._wrap)
        self.substituted: List[Tuple[str, str, str]] = []   # (op, asked, measured)
        # on the record from the start: the run measures under `first` whether or not an op
        # refuses (without OUT_DIR, as in a bare pytest session, nothing is written)
        update_identity(self.out_dir, dtype_fallback="first")

    def _wrap(self, original: Callable) -> Callable:
        policy = self

        def set_dtypes(bench, user_desired_dtypes=None, *args, **kwargs):
            try:
                return original(bench, user_desired_dtypes, *args, **kwargs)
            except ValueError as exc:
                declared = list(getattr(bench, "dtypes", None) or ())
                if UNSUPPORTED_DTYPE not in str(exc) or not declared:
                    raise
            first = declared[0]
            policy.substitute(bench, user_desired_dtypes or (), first)
            return original(bench, [first], *args, **kwargs)
        return set_dtypes

    def substitute(self, bench: Any, asked: Sequence[Any], measured: Any) -> None:
        """Say (marker line, stderr: run.log) that `bench` measures `measured`, not `asked`."""
        entry = (str(getattr(bench, "op_name", "") or type(bench).__name__),
                 ",".join(dtype_name(d) for d in asked), dtype_name(measured))
        self.substituted.append(entry)
        print(format_marker(DTYPE_FALLBACK, op=entry[0], asked=entry[1], measured=entry[2]),
              file=sys.stderr, flush=True)

    def pytest_collection_finish(self, session) -> None:
        """Benchmark classes exist once the test modules are imported."""
        n = self.patch.apply()
        if n:
            self.log(f"dtype fallback=first; hooked set_dtypes on {n} Benchmark class(es): a refused "
                     "--dtypes measures the op's first declared dtype")
        else:
            self.log("dtype fallback=first; no FlagGems Benchmark class with set_dtypes found")

    def close(self) -> None:
        self.patch.restore()
