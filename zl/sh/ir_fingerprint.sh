#!/bin/bash
# Source this file (ab_repeat.sh, the screening driver): it defines
#
#   ir_fingerprint RUN_DIR        prints the run's IR fingerprint; returns 1 when the run
#                                 dumped no .ttgir ("no comparable IR", never "identical"),
#                                 2 when RUN_DIR does not exist
#   ir_compare RUN_A RUN_B        returns 0 same, 10 different, 1 no IR on either side
#   ir_converts RUN_DIR [FLOOR]   prints convert_layout counts (JSON), scoped to variants
#                                 launched more than FLOOR (default 1) times
#   ir_verdict RUN_A RUN_B        prints the first-difference verdict (NO_IR_DIFF,
#                                 VARIANTS_DIFFER, IR_CHANGED@<level>, BINARY_CHANGED, NO_IR);
#                                 returns 0 same (NO_IR_DIFF, or VARIANTS_DIFFER: every common
#                                 variant identical), 10 changed, 1 no IR, 2 usage. `--tsv`
#                                 after the runs adds the screen columns (ir_levels fp_ttgir
#                                 fp_llir fp_asm fp_binary variants_only)
#
# All three call `python -m zl.ir.fingerprint`: the screen and the A/B step must use
# one rule, or an operator let through by one is stopped by the other. Nothing is
# re-implemented here. ZL_PYTHON picks the interpreter (default python3).

_ZL_IR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

_zl_ir_py() {
  "${ZL_PYTHON:-python3}" -m zl.ir.fingerprint "$@"
}

ir_fingerprint() {
  [[ $# -eq 1 ]] || { echo "usage: ir_fingerprint RUN_DIR" >&2; return 2; }
  _zl_ir_py "$1"
}

ir_compare() {
  [[ $# -eq 2 ]] || { echo "usage: ir_compare RUN_A RUN_B" >&2; return 2; }
  _zl_ir_py compare "$1" "$2"
}

ir_converts() {
  [[ $# -ge 1 && $# -le 2 ]] || { echo "usage: ir_converts RUN_DIR [LAUNCH_FLOOR]" >&2; return 2; }
  _zl_ir_py --converts "$1" --launch-floor "${2:-1}"
}

ir_verdict() {
  [[ $# -ge 2 && $# -le 3 ]] || { echo "usage: ir_verdict RUN_A RUN_B [--tsv]" >&2; return 2; }
  _zl_ir_py verdict "$@"
}
