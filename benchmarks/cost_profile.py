#!/usr/bin/env python
"""Where zl_bench's extra seconds go, function by function: cProfile of both sides of a pair.

The graph timer's ledger cannot explain a slow run whose warmup bucket holds each shape's
first call (compiles included); this names the functions that take the difference.

    graph_timer_cost.py wall ... --profile
        every run of the pair under cProfile (pytest's process only): upstream through
        `python -m cProfile -o RUN/profile.pstats -m pytest`, zl_bench through ZL_PYTHON set
        to _cprofile_python.sh, which profiles the `-m pytest` call of run_pytest.sh and runs
        its other python calls plainly. cProfile returns 0 on pytest's exit: rc is not the test's.
    cost_profile.py compare --work W --out OUT.md [--top 25]
        per operator with both upstream/ and after1/ profiles: the functions whose own time
        (tottime) and whose cumulative time grew most from upstream to zl_bench, and the
        totals. Function keys drop the run's own temporary directories, so FlagGems' generated
        code matches across runs.
Inputs: a graph_timer_cost.py work folder made with --profile. Outputs: OUT.md, also printed.
Exit status: 0 done, 2 bad arguments or no profile pair under W.
"""

from __future__ import annotations

import argparse
import pstats
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from zl import atomic  # noqa: E402

PROFILE = "profile.pstats"
WRAPPER = Path(__file__).resolve().with_name("_cprofile_python.sh")
# graph_timer_cost.run_once's private caches (RUN/triton_XXXX, RUN/flaggems_XXXX) differ per run; a
# key that starts after them lets the same generated module match on both sides.
_TEMP = re.compile(r"^.*/(?:triton|flaggems)_[^/]+/")


def wrap(kind: str, cmd: list, env: dict, run_dir: Path) -> list:
    """cmd (and env, in place) for a profiled run; the profile lands in run_dir/profile.pstats."""
    out = str(run_dir / PROFILE)
    if kind == "upstream":
        # [python, -u, -m, pytest, ...] -> [python, -u, -m, cProfile, -o, out, -m, pytest, ...]
        return cmd[:2] + ["-m", "cProfile", "-o", out] + cmd[2:]
    env["ZL_PYTHON"] = str(WRAPPER)
    env["ZL_CPROFILE_PY"] = sys.executable
    env["ZL_CPROFILE_OUT"] = out
    return cmd


def _key(func) -> str:
    path, line, name = func
    path = _TEMP.sub("<cache>/", path)
    for root in sorted((p for p in sys.path if p and len(p) > 1), key=len, reverse=True):
        if path.startswith(root.rstrip("/") + "/"):
            path = path[len(root.rstrip("/")) + 1:]
            break
    return f"{path}:{line}({name})"


def load(path: Path) -> dict:
    """profile.pstats -> {function key: (calls, tottime, cumtime)}, keys merged when equal."""
    try:
        stats = pstats.Stats(str(path)).stats
    except Exception as exc:  # a truncated or foreign file: a named error, not a traceback
        raise ValueError(f"{path}: not a cProfile file ({type(exc).__name__}: {exc})") from None
    out: dict = {}
    for func, (_cc, nc, tt, ct, _callers) in stats.items():
        k = _key(func)
        c0, t0, u0 = out.get(k, (0, 0.0, 0.0))
        out[k] = (c0 + nc, t0 + tt, max(u0, ct))
    return out


def total(prof: dict) -> float:
    """All profiled time: the sum of every function's own time."""
    return sum(tt for _, tt, _ in prof.values())


def grew(up: dict, zl: dict, column: int, top: int):
    """[(key, upstream, zl, delta)] of the `top` largest increases in column 1 (tottime) or 2
    (cumtime); a function that only one side ran counts 0 on the other."""
    rows = []
    for k in set(up) | set(zl):
        a = up.get(k, (0, 0.0, 0.0))[column]
        b = zl.get(k, (0, 0.0, 0.0))[column]
        rows.append((k, a, b, b - a))
    rows.sort(key=lambda r: r[3], reverse=True)
    return rows[:top]


def compare(work: Path, top: int) -> str:
    ops = sorted(d.name for d in work.iterdir()
                 if (d / "upstream" / PROFILE).is_file() and (d / "after1" / PROFILE).is_file())
    if not ops:
        raise ValueError(f"{work}: no operator with both upstream/{PROFILE} and after1/{PROFILE}")
    lines = ["# cProfile of upstream against zl_bench (after1), pytest's process",
             "", "Profiling slows Python-heavy code; read the differences, not the absolute seconds.", ""]
    for op in ops:
        up, zl = load(work / op / "upstream" / PROFILE), load(work / op / "after1" / PROFILE)
        lines += [f"## {op}", "",
                  f"Profiled time: upstream {total(up):.2f} s, zl_bench {total(zl):.2f} s "
                  f"(+{total(zl) - total(up):.2f} s).", ""]
        for title, column in (("own time (tottime)", 1), ("cumulative time", 2)):
            lines += [f"Largest increases in {title}, seconds:", "",
                      "| function | upstream | zl_bench | delta |", "|---|---|---|---|"]
            lines += [f"| `{k}` | {a:.3f} | {b:.3f} | {d:+.3f} |" for k, a, b, d in grew(up, zl, column, top)]
            lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="cost_profile.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("compare",))
    ap.add_argument("--work", required=True, help="a graph_timer_cost.py wall folder made with --profile")
    ap.add_argument("--out", required=True, help="the comparison (markdown)")
    ap.add_argument("--top", type=int, default=25, help="functions listed per table (default 25)")
    args = ap.parse_args(argv)
    work = Path(args.work)
    if not work.is_dir():
        ap.error(f"--work {work}: no such folder")
    if args.top < 1:
        ap.error("--top must be at least 1")
    try:
        text = compare(work, args.top)
    except ValueError as exc:
        print(f"cost_profile.py: {exc}", file=sys.stderr)
        return 2
    atomic.write_text(Path(args.out), text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
