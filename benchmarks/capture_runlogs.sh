#!/usr/bin/env bash
# Capture real FlagGems run.logs on a GPU for the parser tests (tests/fixtures/runlogs/).
#
#   FLAGGEMS_DIR=/path/to/FlagGems OUT=/tmp/out bash benchmarks/capture_runlogs.sh
#
# Variety wanted by runlog/parse.py: several dtype tables (softmax), a TFLOPS column (mm),
# GBPS columns (softmax at --level comprehensive), the cudagraph-mode failure on
# gelu_backward (upstream prints no table, only pytest's failure text), and a table folded
# by the pretty-report plugin (run_pytest.sh, a multi-input operator). Each log lands in
# one tarball ($OUT/runlogs_<date>.tar.gz; at most 8 files come back) with a MANIFEST.
# About 3-4 minutes on an H200. Exit: 2 FLAGGEMS_DIR unset or not a FlagGems checkout
# (no benchmark/).
set -uo pipefail
source "$(dirname "$0")/../zl/sh/entry.sh" "$@"   # --help, and no arguments

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${ZL_PYTHON:-$(command -v python || command -v python3)}"
OUT="${OUT:-$HERE/runs/capture_runlogs_out}"
zl_require_flaggems_and_out
mkdir -p "$OUT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/zl_capture.XXXXXX")/runlogs"
mkdir -p "$WORK"
MAN="$WORK/MANIFEST.txt"
echo "# captured $(date -u +%FT%TZ) flaggems=$(PYTHONPATH="$HERE" "$PY" -m zl.flaggems --commit-of "$FLAGGEMS_DIR" --short)" > "$MAN"

plain() {   # name node args... : upstream's own pytest, output as-is (no zl_bench plugins)
  local name="$1" node="$2"; shift 2
  ( cd "$FLAGGEMS_DIR" && timeout 600 "$PY" -m pytest -s "$node" --color=no "$@" ) \
    > "$WORK/$name.log" 2>&1
  echo "$name.log rc=$? : pytest -s $node $*" >> "$MAN"
}

plain softmax_core_kernel benchmark/test_softmax.py::test_softmax --level core --mode kernel \
  --dtypes float16 --dtypes bfloat16 --dtypes float32
plain softmax_comprehensive benchmark/test_softmax.py::test_softmax --level comprehensive --mode kernel
plain mm_tflops benchmark/test_mm.py::test_mm --level core --mode kernel --dtypes float16
plain gelu_backward_cudagraph benchmark/test_gelu.py::test_gelu_backward --level core --mode cudagraph

# Through zl_bench: pretty-report folding (a multi-input operator folds its constant inputs).
for spec in "addmm:addmm" "layer_norm:layer_norm"; do
  op="${spec%%:*}"; file="${spec#*:}"
  OP="$op" OP_FILE="$file" SHAPE_FILE=upstream OUT_DIR="$WORK/zl_$op" NO_COLOR=1 \
    timeout 600 bash "$HERE/run_pytest.sh" > /dev/null 2>&1
  rc=$?
  cp -f "$WORK/zl_$op/run.log" "$WORK/zl_${op}_folded.log" 2>/dev/null
  cp -f "$WORK/zl_$op/run_identity.json" "$WORK/zl_${op}_run_identity.json" 2>/dev/null
  rm -rf "$WORK/zl_$op"
  echo "zl_${op}_folded.log rc=$rc : run_pytest.sh OP=$op (grep '[same for all rows]')" >> "$MAN"
done

tar -czf "$OUT/runlogs_$(date +%Y%m%d-%H%M%S).tar.gz" -C "$(dirname "$WORK")" runlogs
cat "$MAN"
rm -rf "$(dirname "$WORK")"
