#!/usr/bin/env bash
# The next H200 session's plan (after session 7): finish issue 17 on the H200, then issue 18.
# Carry the batch state session 7 left (git-ignored runs/device_batch: the finished plain stage
# and the first 6 of 40 screen cases, side A's autotune records included) and FlagGems:
#   run(carry=["runs/device_batch", ".fg", ".whl"], command="... PART=1 OUT=$OUT bash docs/validation/scripts/device_session8.sh")
# Without that folder, carry runs/screen_state_s7.tgz and set CARRY_TGZ=runs/screen_state_s7.tgz
# (the screen's state only; PART=1 measures its own plain stage anyway).
#   PART=1  results_cost_core.sh (session 7's CPU-only changes on the H200), then the
#           same-session throughput pair, alone on the GPU: zl_bench's 40-node batch again
#           (plain_s8, 6 cases at once, cold caches) then upstream `pytest --mode cudagraph` one
#           process per node, 6 at once, cold caches of its own: cases/hour by stage wall.
#   PART=2  what PART=1 left, then the batch-wide TRITON_DEBUG screen resumed (34 cases left).
#   PART=3  what is left of both, then upstream's 40 nodes in one process (serial; a cut run still
#           gives a rate), then issue 18's A/A on core shapes (session 7 PART=1 c) in what remains.
#   PART=4  issue 18's six-operator cost table with every run on cold caches of its own (the
#           session-6 table was biased) and the new per-run cost ledger: upstream, after1,
#           after2, two shapes, alone on the GPU (~450 s: mm's sweep is paid by every run now).
# Each call: CALL_S (default 570) bounds it; device_batch.sh resumes whatever a call cut.
set -uo pipefail
source "$(dirname "$0")/../../../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/../../.." || exit 2
# shellcheck source=docs/validation/scripts/call_clock.sh
source docs/validation/scripts/call_clock.sh
batch() {   # extra VAR=value settings for device_batch.sh
  env SHARE=6 OP_TIMEOUT=120 PLAIN_NAME=plain_s8 UPSTREAM=1 UPSTREAM_JOBS=6 BUDGET_S=$(( $(left) - 15 )) "$@" \
    python3 -m zl.supervise --parent "$$" -- bash docs/validation/batch/device_batch.sh
}
case "$PART" in
1)
  # first, alone (~60 s): session 7's CPU-only changes seen on the H200 (capture-prologue rows
  # in the IR index, the graph timer's and the IR plugin's cost lines, the capture cost)
  cost_core 150
  batch SCREEN=0 UPSTREAM_ONE_PROCESS=0
  ;;
2) batch SCREEN=1 UPSTREAM_ONE_PROCESS=0 ;;
3)
  batch SCREEN=1 UPSTREAM_ONE_PROCESS=1
  if (( $(left) > 150 )); then
    echo "===== issue18 A/A on core shapes ($(( $(date +%s) - T0 )) s in)"
    WORK=issue18_core OPS="softmax:softmax" RUNS=after1,after2,before,before2 SHAPES=core \
      STAGES=wall,summary WALL_DEADLINE_S=$(( $(left) - 90 )) RUN_TIMEOUT_S=60 \
      tied timeout $(( $(left) - 10 )) bash $S/device_issue18.sh
  fi
  ;;
4)
  WORK=issue18_wall RUNS=upstream,after1,after2 STAGES=wall,summary WALL_DEADLINE_S=$(( $(left) - 100 )) \
    RUN_TIMEOUT_S=90 tied timeout $(( $(left) - 10 )) bash $S/device_issue18.sh
  ;;
*)
  echo "PART must be 1, 2, 3 or 4 (got $PART)" >&2; exit 2
  ;;
esac
echo "===== part $PART done in $(( $(date +%s) - T0 )) s"
