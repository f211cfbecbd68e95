#!/usr/bin/env bash
# H200 round 7 (one call, <= 10 min), each stage alone on the GPU, in priority order:
# 1) timer A/A for gelu_backward (graph capture now runs the forward on a side stream)
#    and sum, the reduction operator (issue 7); 2) mm tf32 vs ieee fingerprints (issue 8);
# 3) mm record / replay / edited record, latencies compared alone (issue 4).
#   OUT=/some/dir bash docs/validation/scripts/device_round7.sh
set -uo pipefail
source docs/validation/scripts/device_env.sh || exit 1
round_dir round7
for op in gelu_backward sum; do
  echo "===== timer noise $op ($(date +%H:%M:%S))"
  python3 benchmarks/timer_noise.py --flaggems-dir "$FLAGGEMS_DIR" --ops "$op" \
    --timers zl_graph,up_kernel,up_cudagraph --skip-profile --budget-s "${TIMER_BUDGET_S:-110}" \
    --out "$W/timer_$op" > "$W/timer_$op.out" 2>&1
  echo "$op rc=$?"; bundle
done
echo "===== ir_validate mm ($(date +%H:%M:%S))"
CHECKS=mm OUT="$W/ir" timeout "${IR_S:-120}" bash docs/validation/scripts/ir_validate.sh > "$W/ir.out" 2>&1
echo "ir rc=$?"; bundle
echo "===== autotune_validate mm ($(date +%H:%M:%S))"
CHECK_OPS=mm OUT="$W/autotune" timeout "${AUTOTUNE_S:-150}" bash docs/validation/scripts/autotune_validate.sh > "$W/autotune.out" 2>&1
echo "autotune rc=$?"; bundle
ls -la "$OUT"
