# Shared prologue of the A/B drivers (ab_repeat.sh, ab_rlc_test.sh, ab_fold_test.sh): interpreter,
# run script, the one IR fingerprint rule and the IR level it judges. Sourced after the
# driver sets ZL_ROOT; one copy so the drivers cannot judge IR differently.
PY="${ZL_PYTHON:-$(command -v python || command -v python3)}"
export ZL_PYTHON="$PY"
RUN_PYTEST="${ZL_RUN_PYTEST:-$ZL_ROOT/run_pytest.sh}"
# shellcheck source=ir_fingerprint.sh
source "$ZL_ROOT/zl/sh/ir_fingerprint.sh"

# IR_LEVEL: an extra level the runs dump as files (ZL_IR_LEVELS), for reading. The verdict
# (ir_verdict) compares every level each run recorded in ir_fingerprints.json whatever it
# says: DISABLE_LLVM_OPT once read NO_IR_DIFF because only TTGIR was compared by default.
IR_LEVEL="${IR_LEVEL:-ttgir}"
[[ "$IR_LEVEL" =~ ^[a-z][a-z0-9_]*$ ]] || { echo "!!! IR_LEVEL is not an IR level name: '$IR_LEVEL'" >&2; exit 2; }
if [[ "$IR_LEVEL" != ttgir && ",${ZL_IR_LEVELS:-}," != *",$IR_LEVEL,"* ]]; then
  export ZL_IR_LEVELS="${ZL_IR_LEVELS:+$ZL_IR_LEVELS,}$IR_LEVEL"
fi

# The screen cells of the first-difference rule (verdict ir_levels fp_*); NO_IR when a
# side is not a run directory (exit 2), so a row never loses its columns.
ir_verdict_cells() {
  local cells
  cells="$(ir_verdict "$1" "$2" --tsv 2>/dev/null)"
  if [[ -z "$cells" ]]; then cells=$'NO_IR\t-\t-\t-\t-\t-'; fi
  printf '%s' "$cells"
}
# `results<TAB>results_torch` of side B vs side A (zl.results.compare).
results_cells() {
  local cells
  cells="$(PYTHONPATH="$ZL_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m zl.results.compare "$1" "$2" --tsv 2>/dev/null)"
  if [[ -z "$cells" ]]; then cells=$'n/a (results unreadable)\tn/a'; fi
  printf '%s' "$cells"
}

die2() { echo "!!! $*" >&2; exit 2; }
# The drivers' variable checks, one wording: exit 2 with the variable's name and value.
require_var_name() { [[ "$2" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die2 "$1 is not a variable name: '$2'"; }
require_positive_int() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die2 "$1 must be a positive integer (got: $2)"; }

# One OPS entry: OP | OP:OP_FILE | OP:OP_FILE:DTYPES (dtypes comma separated; empty = the
# operator's own set, or $DTYPES). Sets op, op_file, dtypes; returns 1 (with a message) for a
# malformed entry. Per-operator dtypes exist because one global DTYPES once judged fft (which
# only takes complex64) "unrunnable".
parse_ops_entry() {
  local extra dtypes_csv
  IFS=: read -r op op_file dtypes_csv extra <<< "$1"
  if [[ -z "$op" || -n "${extra:-}" ]]; then
    echo "!!! bad OPS entry '$1' (OP, OP:OP_FILE or OP:OP_FILE:DTYPES); skipped"
    return 1
  fi
  op_file="${op_file:-$op}"
  dtypes="${dtypes_csv//,/ }"
  [[ -n "$dtypes" ]] || dtypes="${DTYPES:-}"
  return 0
}
