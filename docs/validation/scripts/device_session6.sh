#!/usr/bin/env bash
# Session 6 on one H200: three device calls back to back (a warm machine keeps runs/ between
# them; CARRY_TGZ continues the batch on a fresh one). Every call ends inside CALL_S.
#   PART=1 OUT=$OUT bash docs/validation/scripts/device_session6.sh
#     issue 18 wall stage, alone on the GPU: 6 operators x (upstream cudagraph, zl after1,
#     zl after2), fresh Triton caches, mm first.
#   PART=2: functional checks side by side: the issue 17 batch (device_batch.sh, SHARE cases at
#     once: a functional sweep, its first BATCH1_S seconds) next to issue 16's A/A over 9
#     operators (three screens side by side); then, alone on the GPU, issue 18's A/A on
#     upstream's core shapes (softmax, gelu_backward) and its cold-L2 check.
#   PART=3: the batch again (resume, then the batch-wide screen) until CALL_S.
set -uo pipefail
source "$(dirname "$0")/../../../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/../../.." || exit 2
# shellcheck source=docs/validation/scripts/call_clock.sh
source docs/validation/scripts/call_clock.sh
case "$PART" in
1)
  OPS="mm:mm,clamp:clamp,sum:sum,softmax:softmax,softmax_backward_out:softmax,index_select:index_select" \
    RUNS=upstream,after1,after2 STAGES=wall,summary WALL_DEADLINE_S=$(( $(left) - 170 )) RUN_TIMEOUT_S=150 \
    timeout $(( $(left) - 5 )) bash $S/device_issue18.sh
  ;;
2)
  SHARE="${SHARE:-8}" BUDGET_S="${BATCH1_S:-200}" OP_TIMEOUT=100 bash docs/validation/batch/device_batch.sh \
    > "$OUT/batch_part2.console" 2>&1 &
  batch_pid=$!
  LIMIT_S=200 timeout 215 bash $S/issue16_aa_wide.sh
  wait "$batch_pid"; echo "batch (part 2) rc=$?"; tail -n 25 "$OUT/batch_part2.console"
  echo "===== issue18 A/A on core shapes ($(( $(date +%s) - T0 )) s in)"
  WORK=issue18_core OPS="softmax:softmax,gelu_backward:gelu" RUNS=after1,after2 SHAPES=core \
    STAGES=wall,summary WALL_DEADLINE_S=90 RUN_TIMEOUT_S=60 timeout 170 bash $S/device_issue18.sh
  echo "===== issue18 cold ($(( $(date +%s) - T0 )) s in)"
  WORK=issue18_cold STAGES=cold,summary timeout 130 bash $S/device_issue18.sh
  ;;
3)
  SHARE="${SHARE:-10}" BUDGET_S=$(( $(left) - 15 )) OP_TIMEOUT=100 bash docs/validation/batch/device_batch.sh
  ;;
*)
  echo "PART must be 1, 2 or 3 (got $PART)" >&2; exit 2
  ;;
esac
echo "===== part $PART done in $(( $(date +%s) - T0 )) s"
