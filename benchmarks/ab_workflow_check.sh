#!/usr/bin/env bash
# The A/B workflow on real FlagGems (one GPU): an A/A screen's noise floor, a code-changing
# switch detected by a screen and by 4 rounds, and the A/A false-verdict rate of the rounds.
#
#   FLAGGEMS_DIR=/path/to/FlagGems OUT=/tmp/out bash benchmarks/ab_workflow_check.sh
#   PARTS="1 2" ... ; PARTS="3 4" ...     # split across two calls if 10 min is too tight
#
# Parts (each ~2 min on an H200; a cell is one run_pytest.sh, ~20 s for these operators):
#   1  A/A screen: ab_rlc_test.sh with a switch nothing reads on softmax, relu, abs.
#      Expect NO_IR_DIFF for every operator and a small noise-floor range.
#   2  A/B screen whose switch changes code: DISABLE_LLVM_OPT=1 on softmax. It acts below
#      TTGIR, so the screen runs with IR_LEVEL=ptx; expect IR_CHANGED and a slowdown
#      (negative speedup %). With the default ttgir level it would read NO_IR_DIFF.
#   3  4-round ab_repeat.sh of the same switch on softmax: per-shape verdicts (expect slower).
#   4  4-round A/A ab_repeat.sh (switch nothing reads, SWITCH_ALLOW_NO_IR_DIFF=1) on relu:
#      every faster/slower verdict here is a false verdict; the rate is printed.
#
# Raw output goes to $OUT (at most 8 files come back): ab_validate_summary.txt (the report
# lines, the screen tables, the A/A false-verdict rate) and ab_validate_parts<...>.tar.gz
# (every run.log, run_identity.json, screen.tsv, status.tsv, summary.log, ab_rounds.json,
# telemetry.tsv; the IR dumps are left out for size, their fingerprints are in the logs).
# Exit: 2 FLAGGEMS_DIR unset or not a FlagGems checkout (no benchmark/).
set -uo pipefail
source "$(dirname "$0")/../zl/sh/entry.sh" "$@"   # --help, and no arguments

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${ZL_PYTHON:-$(command -v python || command -v python3)}"
OUT="${OUT:-$HERE/runs/ab_validate_out}"
zl_require_flaggems_and_out
PARTS="${PARTS:-1 2 3 4}"
mkdir -p "$OUT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/zl_ab_validate.XXXXXX")"
SUM="$OUT/ab_validate_summary.txt"
export FLAGGEMS_DIR ZL_BACKEND="${ZL_BACKEND:-cuda}" CELL_TIMEOUT="${CELL_TIMEOUT:-150}"
export NO_COLOR=1 SHAPE_MODE=upstream ZL_ISOLATE_TUNER_CACHE=1 TELEMETRY_INTERVAL="${TELEMETRY_INTERVAL:-2}"

{
  echo "# ab_validate $(date -u +%Y-%m-%dT%H:%M:%SZ) parts=$PARTS"
  echo "# host=$(hostname) flaggems=$(PYTHONPATH="$HERE" "$PY" -m zl.flaggems --commit-of "$FLAGGEMS_DIR" --short) dtypes=${DTYPES:-<all>}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader 2>&1 | head -2
} > "$SUM"

part() { [[ " $PARTS " == *" $1 "* ]]; }
# The drivers take dtypes per OPS entry (an exported DTYPES is ignored): DTYPES=float16 here
# becomes OP:OP:float16 entries, and the cell directories are OP@float16.
with_dtypes() { local op out=""; for op in $1; do out+=" $op${DTYPES:+:$op:${DTYPES// /,}}"; done; echo $out; }
cell() { echo "$1${DTYPES:+@${DTYPES// /+}}"; }
t_start=$(date +%s)

if part 1; then
  echo "## part 1: A/A screen (SWITCH=ZL_NOTHING_READS_THIS)" | tee -a "$SUM"
  SWITCH=ZL_NOTHING_READS_THIS OPS="$(with_dtypes "softmax relu abs")" AB_ROOT="$WORK/p1" \
    bash "$HERE/ab_rlc_test.sh" > "$WORK/p1.out" 2>&1
  grep -E '^>>> [a-z_]+: (IR_|NO_)|^\[ab\]|NOISE FLOOR|^!!!' "$WORK/p1.out" >> "$SUM"
  cat "$WORK/p1/screen.tsv" >> "$SUM" 2>/dev/null
fi

if part 2; then
  echo "## part 2: A/B screen DISABLE_LLVM_OPT on softmax (IR_LEVEL=ptx)" | tee -a "$SUM"
  SWITCH=DISABLE_LLVM_OPT IR_LEVEL=ptx OPS="$(with_dtypes softmax)" AB_ROOT="$WORK/p2" \
    bash "$HERE/ab_rlc_test.sh" > "$WORK/p2.out" 2>&1
  grep -E '^>>> [a-z_]+: (IR_|NO_)|^\[ab\]|^  torch|^!!!' "$WORK/p2.out" >> "$SUM"
  cat "$WORK/p2/screen.tsv" >> "$SUM" 2>/dev/null
  # the same pair judged at the TTGIR level, for the record
  for side in before after; do
    printf 'ttgir fingerprint %s: %s\n' "$side" \
      "$(PYTHONPATH="$HERE" "$PY" -m zl.ir.fingerprint "$WORK/p2/$(cell softmax)_$side" 2>&1)" >> "$SUM"
  done
fi

if part 3; then
  echo "## part 3: 4-round A/B DISABLE_LLVM_OPT on softmax" | tee -a "$SUM"
  SWITCH=DISABLE_LLVM_OPT IR_LEVEL=ptx OPS="$(with_dtypes softmax)" ROUNDS=4 AB_ROOT="$WORK/p3" \
    bash "$HERE/ab_repeat.sh" > "$WORK/p3.out" 2>&1
  grep -E '^\[ab-rounds\]|^  torch|^!!!|^\?\?\?|^>>> softmax' "$WORK/p3.out" >> "$SUM"
  cat "$WORK/p3/status.tsv" >> "$SUM" 2>/dev/null
fi

if part 4; then
  echo "## part 4: 4-round A/A on relu (switch nothing reads)" | tee -a "$SUM"
  SWITCH=ZL_NOTHING_READS_THIS SWITCH_ALLOW_NO_IR_DIFF=1 OPS="$(with_dtypes relu)" ROUNDS=4 AB_ROOT="$WORK/p4" \
    bash "$HERE/ab_repeat.sh" > "$WORK/p4.out" 2>&1
  grep -E '^\[ab-rounds\]|^  torch|^!!!|^\?\?\?' "$WORK/p4.out" >> "$SUM"
  "$PY" - "$WORK/p4/$(cell relu)/ab_rounds.json" >> "$SUM" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
v = [s["verdict"] for s in d["shapes"]]
false = sum(1 for x in v if x in ("faster", "slower"))
print(f"A/A false-verdict rate: {false}/{len(v)} shapes "
      f"({100.0 * false / max(1, len(v)):.1f}%), verdicts {d['verdict_counts']}, "
      f"geomean {d['geomean_speedup_pct']}, CI {d['geomean_ci95_pct']}")
EOF
fi

echo "## elapsed $(( $(date +%s) - t_start )) s" >> "$SUM"
tag="$(tr -d ' ' <<< "$PARTS")"
( cd "$WORK" && find . \( -name ttgir -o -name autotune_records -o -name '.flaggems_cache' \) -prune -o \
    -type f \( -name run.log -o -name run_identity.json -o -name '*.tsv' -o -name '*.out' \
    -o -name summary.log -o -name '*.json' -o -name telemetry.err \) -print0 \
  | tar --null -czf "$OUT/ab_validate_parts${tag}.tar.gz" -T - )
rm -rf "$WORK"
cat "$SUM"
