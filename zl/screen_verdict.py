"""The screen's verdict for one before/after pair: one rule for ab_rlc_test.sh (RESCORE
included) and run_batch.py --switch, so the two screens can never judge a pair differently.

Precedence: NO_ROWS (a side failed or measured nothing) > WRONG_RESULTS (B's outputs differ
from A's beyond tolerance, whatever the speed) > NO_TRITON (no IR on a side) > the first
level at which the code differs (zl.ir.fingerprint.verdict: IR_CHANGED@<level>,
BINARY_CHANGED, VARIANTS_DIFFER (every variant both sides compiled identical, the sets
differ; the `variants_only` column lists the one-sided ones), NO_IR_DIFF).

CLI: python -m zl.screen_verdict ROWS_A ROWS_B RC_A RC_B RUN_A RUN_B
     -> `verdict<TAB>` + COLUMNS cells;  --header prints the COLUMNS names.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from zl.ir import fingerprint as fp
from zl.results import compare as results

COLUMNS = ("results", "results_torch") + tuple(fp.VERDICT_COLUMNS)
NO_ROWS, NO_TRITON, WRONG_RESULTS = "NO_ROWS", "NO_TRITON", "WRONG_RESULTS"


def code_verdict(run_a: Path, run_b: Path, read: Optional[Callable[[Path], Tuple]] = None) -> Dict:
    """zl.ir.fingerprint.verdict for the pair (every level, binary included), or a NO_IR
    verdict with `error` when a side has no readable run directory. The screen and every
    report view (batch_summary.py --ab / --ab-rounds / --screen) judge code through this.
    `read(run)`: a side's (run_levels, load_record) as a report loaded it with the run."""
    try:
        return fp.verdict(run_a, run_b, None if read is None else (read(run_a), read(run_b)))
    except (fp.RunDirError, fp.NoIRError, OSError) as exc:
        return {"verdict": fp.NO_IR, "exit_code": fp.EXIT_NO_IR, "a": {}, "b": {},
                "compared": [], "one_sided": [], "variants_only": "-", "error": str(exc)}


def identical_everywhere(code: Dict) -> Tuple[bool, str]:
    """(is this pair an A/A, why): only NO_IR_DIFF with every level either side recorded
    compared on both sides, the binary among them. A level one side lacks was never
    compared, and without the binary LLVM's backend may still have produced other code, so
    neither is shown to be identical; VARIANTS_DIFFER may have timed a specialisation the
    other side never ran."""
    word = code.get("verdict")
    compared = list(code.get("compared") or [])
    if word != fp.NO_IR_DIFF:
        why = {fp.NO_IR: "no IR recorded on one side or both",
               fp.VARIANTS_DIFFER: "the sides compiled different variant sets"}.get(
                   word, f"the code differs ({word})")
        return False, why
    one_sided = list(code.get("one_sided") or [])
    if one_sided:
        sides = "; ".join(f"{lv} on side {'A' if lv in code.get('a', {}) else 'B'} only"
                          for lv in one_sided)
        return False, (f"identical at {','.join(compared)}, but {sides}: not compared, so not "
                       "shown to be identical")
    if "binary" not in compared:
        return False, (f"identical at {','.join(compared)} only: no binary hash on both sides, "
                       "so the binaries are not shown to be identical")
    return True, f"every recorded level identical on both sides ({','.join(compared)})"


def _ir_cells(run_a: Path, run_b: Path) -> List[str]:
    return fp.verdict_row(code_verdict(run_a, run_b))


def _result_cells(run_a: Path, run_b: Path) -> List[str]:
    try:
        res = results.compare_runs(run_a, run_b)
    except (results.ResultsError, OSError):
        return ["n/a (results unreadable)", "n/a"]
    return [" ".join(str(res["value"]).split()), " ".join(str(res["torch_value"]).split())]


def judge(rows_a: int, rows_b: int, rc_a: str, rc_b: str, run_a: Path, run_b: Path) -> Dict[str, str]:
    """{'verdict': ..., plus every COLUMNS cell} for side A = run_a (before), B = run_b (after)."""
    ir = _ir_cells(Path(run_a), Path(run_b))
    res = _result_cells(Path(run_a), Path(run_b))
    verdict = ir[0]
    if str(rc_a) != "0" or str(rc_b) != "0" or not rows_a or not rows_b:
        verdict = NO_ROWS
    elif "MISMATCH (" in res[0]:
        verdict = WRONG_RESULTS
    elif verdict == fp.NO_IR:
        verdict = NO_TRITON
    return {"verdict": verdict, **dict(zip(COLUMNS, res + ir[1:]))}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--header"],):
        print("\t".join(COLUMNS))
        return 0
    if len(args) != 6 or args[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr if len(args) != 1 else sys.stdout)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    try:
        rows_a, rows_b = int(args[0] or 0), int(args[1] or 0)
    except ValueError:
        print(f"!!! rows must be integers (got {args[0]!r}, {args[1]!r})", file=sys.stderr)
        return 2
    cells = judge(rows_a, rows_b, args[2], args[3], Path(args[4]), Path(args[5]))
    print("\t".join([cells["verdict"]] + [cells[c] for c in COLUMNS]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
