#!/usr/bin/env bash
# What the results capture costs on upstream's core shapes (one GPU, ~100 s). Upstream's core
# shapes of pointwise benchmarks include a 2^30-element tensor (a host-side capture copied,
# widened to float64 and hashed it, and timed every batch case out at 100 s on the H200). This
# runs abs and gelu_backward alone on the GPU: wall time, rows, the capture's own seconds per
# run, the graph timer's and IR plugin's cost lines, and the kernels the IR index filed under
# the operator. Writes $OUT/<op>/ (the run directory) and $OUT/<op>.console.
#   OUT=/some/dir bash benchmarks/results_capture_core_cost.sh
set -uo pipefail
source "$(dirname "$0")/../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/.." || exit 2
: "${OUT:?set OUT}"
mkdir -p "$OUT"
source benchmarks/_device_env.sh || exit 1
for cell in abs:abs gelu_backward:gelu; do
  op="${cell%%:*}"; file="${cell##*:}"
  s=$(date +%s%N)
  OP="$op" OP_FILE="$file" DTYPES=float16 BENCH_LEVEL=core OUT_DIR="$OUT/$op" NO_COLOR=1 \
    TELEMETRY_INTERVAL=0 timeout 100 bash run_pytest.sh > "$OUT/$op.console" 2>&1
  rc=$?
  e=$(date +%s%N)
  printf '%s rc=%s wall=%s ms rows=%s\n' "$op" "$rc" "$(( (e - s) / 1000000 ))" \
    "$(grep -c 'SUCCESS' "$OUT/$op/run.log" 2>/dev/null)"
  grep -h "outside the timed loops\|IR fingerprints" "$OUT/$op/run.log" | cut -c1-200
  # the kernels the IR dump filed under the operator: its own only (a capture run inside
  # use_gems() once filed FlagGems' isnan/sum/nonzero kernels there too)
  echo "kernels in the IR index: $(tail -n +2 "$OUT/$op/ttgir/index.tsv" 2>/dev/null | cut -f2 | sort -u | tr '\n' ' ')"
  # rows without a file (the graph capture prologue's fill_ launches)
  echo "placeholder rows: $(tail -n +2 "$OUT/$op/ttgir/index.tsv" 2>/dev/null | awk -F'\t' '$3 ~ /^\(/ {print $1":"$2":"$3}' | sort | uniq -c | tr '\n' ';')"
  grep -h "graph timer spent\|IR plugin spent" "$OUT/$op/run.log" | cut -c1-220
done
