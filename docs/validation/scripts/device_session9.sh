#!/usr/bin/env bash
# Session 9's H200 plan: finish issue 17 in about three device calls of CALL_S (default 570) s.
# Every call runs the same sequence; each step is skipped once done and each resumes what an
# earlier call cut, so "call again until it prints ALL DONE" is the whole procedure:
#   run(carry=["runs/device_batch", ".fg", ".whl"], command="... PART=1 OUT=$OUT bash docs/validation/scripts/device_session9.sh")
# Later calls on a warm machine keep runs/device_batch and must not carry it (a carried folder
# replaces the machine's newer one). On a cold machine carry the last returned bundle and give
# CARRY_TGZ=<it> (device_batch.sh unpacks it only where runs/device_batch is missing).
# Order (why): session 7 left 34 of 40 screen cases, the longest piece (about 100 s per case at 6
# at once), so it goes first; the throughput pair comes after it, alone on the GPU, each stage in
# one piece where the budget allows (a stage split across calls pays one drain per call, and
# the upstream per-node stage goes before zl_bench's so any split lands on zl_bench's side):
#   1. the TRITON_DEBUG screen, resumed (OP_TIMEOUT=100: rms_norm, the slowest, took 79 s)
#   2. upstream `pytest --mode cudagraph`, one process per node, 6 at once, cold caches
#   3. zl_bench's 40-node batch again (plain_s8, --share-device 6, cold caches)
#   4. upstream's 40 nodes in one process, serial (a cut run still gives a rate)
#   5. results_cost_core.sh alone (issue 18's cost lines and the capture-prologue rows), if
#      time is left
set -uo pipefail
source "$(dirname "$0")/../../../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/../../.." || exit 2
# shellcheck source=docs/validation/scripts/call_clock.sh
source docs/validation/scripts/call_clock.sh
ROOT=$PWD/runs/device_batch
batch() {   # extra VAR=value settings for device_batch.sh
  env SHARE=6 UPSTREAM_JOBS=6 UPSTREAM_MIN_LEFT=70 BUDGET_S=$(( $(left) - 15 )) "$@" \
    python3 -m zl.supervise --parent "$$" -- bash docs/validation/batch/device_batch.sh
}
per_node_done() { [[ -f $ROOT/upstream/per_node.tsv ]] && (( $(wc -l < "$ROOT/upstream/per_node.tsv") >= 40 )); }
step() { echo "===== step $1 ($(( $(date +%s) - T0 )) s into the call, $(left) s left)"; }
if [[ ! -f $ROOT/plain/stage.done && -z ${CARRY_TGZ:-} ]]; then
  echo "!!! $ROOT holds no finished plain stage: carry runs/device_batch or give CARRY_TGZ" >&2; exit 2
fi
if [[ ! -f $ROOT/screen/stage.done ]] && (( $(left) > 230 )); then
  step "1 screen"; batch PLAIN_NAME=plain OP_TIMEOUT=100 SCREEN=1 UPSTREAM=0
fi
if [[ -f $ROOT/screen/stage.done ]] && ! per_node_done && (( $(left) > 100 )); then
  step "2 upstream per node"; batch PLAIN_NAME=plain OP_TIMEOUT=120 SCREEN=0 UPSTREAM=1 UPSTREAM_ONE_PROCESS=0
fi
if per_node_done && [[ ! -f $ROOT/plain_s8/stage.done ]] && (( $(left) > 200 )); then
  step "3 zl_bench plain_s8"; batch PLAIN_NAME=plain_s8 OP_TIMEOUT=120 SCREEN=0 UPSTREAM=0
fi
if [[ -f $ROOT/plain_s8/stage.done && ! -f $ROOT/upstream/one_process.rc ]] && (( $(left) > 150 )); then
  step "4 upstream one process"; batch PLAIN_NAME=plain_s8 OP_TIMEOUT=120 SCREEN=1 UPSTREAM=1 UPSTREAM_ONE_PROCESS=1
fi
if [[ ! -f runs/cost_core.done ]] && (( $(left) > 90 )); then
  step "5 cost_core"; cost_core $(( $(left) - 10 )) && touch runs/cost_core.done
fi
[[ -f $ROOT/upstream/one_process.rc ]] && echo "########## ALL DONE ##########"
echo "===== part $PART done in $(( $(date +%s) - T0 )) s"
