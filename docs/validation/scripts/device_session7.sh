#!/usr/bin/env bash
# The next H200 session's plan (after session 6): re-measure what session 6 found broken or
# missed, then the batch. Three calls back to back (a warm machine keeps runs/ between them;
# CARRY_TGZ=<last batch_validation.tgz> continues the batch on a fresh one).
#   PART=1 OUT=$OUT bash docs/validation/scripts/device_session7.sh       (alone on the GPU)
#     a. results_cost_core.sh: abs and gelu_backward on upstream's core shapes (two 2^30-element
#        tensors): wall and result-capture seconds with the device-side capture
#     b. issue 18 wall for the session-6 misses (softmax, softmax_backward_out) and index_select's
#        A/A: upstream, after1, after2, two shapes, fresh caches
#     c. issue 18 A/A on core shapes: softmax, gelu_backward, with the new 25 ms warmup
#        (after1/after2) and the old one (before/before2) in one call: does the short warmup cost
#        A/A accuracy (session 5/6 read 0.20-0.28 % where earlier sessions read 0.05-0.12 %)?
#     d. issue 18 cold L2 with CUPTI records of a graph replay
#   PART=2: issue 16's A/A over 9 operators (three screens side by side: functional) next to the
#     batch's first part (device_batch.sh, SHARE cases at once: functional), until CALL_S.
#   PART=3: the batch again (resume, then the batch-wide screen) until CALL_S.
#   PART=B: a. alone, then PART=3 in what is left (after PART=A's aa16 passed).
#   PART=A: a. alone, then PART=2 in what is left (the capture fix first: without it every batch
#     case timed out in session 6, so it decides whether the batch is worth its device time).
set -uo pipefail
source "$(dirname "$0")/../../../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/../../.." || exit 2
# shellcheck source=docs/validation/scripts/call_clock.sh
source docs/validation/scripts/call_clock.sh
case "$PART" in
1)
  cost_core 200
  echo "===== issue18 wall, session-6 misses ($(( $(date +%s) - T0 )) s in)"
  WORK=issue18_wall OPS="softmax:softmax,softmax_backward_out:softmax,index_select:index_select" \
    RUNS=upstream,after1,after2 STAGES=wall,summary WALL_DEADLINE_S=170 RUN_TIMEOUT_S=60 \
    tied timeout 250 bash $S/device_issue18.sh
  echo "===== issue18 A/A on core shapes ($(( $(date +%s) - T0 )) s in)"
  WORK=issue18_core OPS="softmax:softmax,gelu_backward:gelu" RUNS=after1,after2,before,before2 SHAPES=core \
    STAGES=wall,summary WALL_DEADLINE_S=$(( $(left) - 150 )) RUN_TIMEOUT_S=60 \
    tied timeout $(( $(left) - 80 )) bash $S/device_issue18.sh
  echo "===== issue18 cold ($(( $(date +%s) - T0 )) s in)"
  WORK=issue18_cold STAGES=cold,summary tied timeout $(( $(left) - 5 )) bash $S/device_issue18.sh
  ;;
A|2)
  if [[ "$PART" == A ]]; then
    cost_core 200
    echo "===== batch beside aa16 ($(( $(date +%s) - T0 )) s in)"
  fi
  # zl.supervise itself goes in the background, not `tied`: a backgrounded function runs in a
  # subshell whose parent is $$, and zl.supervise refuses such a tie (session 7's first call).
  SHARE="${SHARE:-4}" BUDGET_S=$(( $(left) - 15 )) OP_TIMEOUT=120 \
    python3 -m zl.supervise --parent "$$" -- bash docs/validation/batch/device_batch.sh \
    > "$OUT/batch_part2.console" 2>&1 &
  batch_pid=$!
  LIMIT_S=240 tied timeout 255 bash $S/issue16_aa_wide.sh
  wait "$batch_pid"; echo "batch (part 2) rc=$?"; tail -n 25 "$OUT/batch_part2.console"
  ;;
B)
  cost_core 200
  echo "===== batch ($(( $(date +%s) - T0 )) s in)"
  SHARE="${SHARE:-4}" BUDGET_S=$(( $(left) - 15 )) OP_TIMEOUT=120 tied bash docs/validation/batch/device_batch.sh
  ;;
3)
  SHARE="${SHARE:-4}" BUDGET_S=$(( $(left) - 15 )) OP_TIMEOUT=120 tied bash docs/validation/batch/device_batch.sh
  ;;
*)
  echo "PART must be 1, 2, 3, A or B (got $PART)" >&2; exit 2
  ;;
esac
echo "===== part $PART done in $(( $(date +%s) - T0 )) s"
