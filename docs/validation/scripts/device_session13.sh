#!/usr/bin/env bash
# The next H200 plan for issue 18 (after session 12). Carry .fg, .whl and .device_out:
#   run(carry=[".fg", ".whl", ".device_out"], command="... PART=1 OUT=$OUT bash docs/validation/scripts/device_session13.sh")
# Session 12 found a process's first large-output record costs ~230 ms, ~175 ms of it CUDA
# loading kernels on first use (72 ms with CUDA_MODULE_LOADING=EAGER), and clamp, whose runs
# carry 0.18-0.49 s of results capture, the one operator whose pytest ratio of medians
# (1.16) is above 1.1. capture.py now records a large output with fewer distinct kernels
# (after the session's device calls, so not yet measured). So:
#   PART=1  describe_cost.py: session 12's capture.py (.device_out/capture_0d1f879.py, made by
#           `git show 0d1f879:zl/results/capture.py`) against this one, fresh processes; then
#           two more repetitions of clamp, softmax and sum, the order rotated (~400 s).
#   PART=2  (no GPU, here) the pooled table over session 12's repetitions 3-7 and these, with
#           OUT the folder they were gathered into -> $OUT/pooled.md.
#   PART=3  issue18_cold_gap.py: the cold reading against eager CUPTI per kernel, with three
#           flush-only graphs that tell the kernel boundary's cost from kernel time (sum and
#           relu also at 8192x8192); then repetition REP (default 10) of clamp and softmax
#           (~250 s).
#   PART=4  after the capture's kernels moved to a start-up prewarm (ZL_RESULTS_PREWARM):
#           issue18_cold_gap.py again (B3 as a one-element add), then repetitions 12 and 13 of
#           softmax, clamp and sum (~330 s).
#   PART=5  (no GPU, here) the pooled table over repetitions 12-16 (those present) -> $OUT/pooled_prewarm.md.
#   PART=6  with the prewarm: repetition 14 of all six operators (rotated), 15 of softmax, clamp
#           and sum, 16 of clamp and softmax, as the call's time allows (~450 s).
set -uo pipefail
source "$(dirname "$0")/../../../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/../../.." || exit 2
# shellcheck source=docs/validation/scripts/call_clock.sh
source docs/validation/scripts/call_clock.sh
# shellcheck source=docs/validation/scripts/cost_reps.sh
source docs/validation/scripts/cost_reps.sh
OLD=.device_out/capture_0d1f879.py
# `cold_gap LIMIT_S`: issue18_cold_gap.py run and summary into $OUT/cold_gap. The run imports
# flag_gems in this process (device_issue18.sh sets the same path).
cold_gap() {
  mkdir -p "$OUT/cold_gap"
  PYTHONPATH="/tmp/site:$PWD/.fg/src${PYTHONPATH:+:$PYTHONPATH}" \
  tied timeout "$1" python3 $S/issue18_cold_gap.py run --work "$OUT/cold_gap" > "$OUT/cold_gap/run.out" 2>&1
  echo "cold_gap rc=$?"
  python3 $S/issue18_cold_gap.py summary --work "$OUT/cold_gap" --out "$OUT/cold_gap"
}
case "$PART" in
1)
  [[ -f $OLD ]] || { echo "$OLD missing: git show 0d1f879:zl/results/capture.py > $OLD, and carry .device_out" >&2; exit 2; }
  tied timeout 90 python3 $S/describe_cost.py --impl "session12=$OLD" --impl "session13=zl/results/capture.py" \
    --repeat 3 --out "$OUT/describe_cost"
  cost_rep issue18_rep8 "clamp:clamp,softmax:softmax,sum:sum" 60
  cost_rep issue18_rep9 "sum:sum,clamp:clamp,softmax:softmax" 60
  ;;
2)
  pool_reps rep3 rep4a rep4b rep5 rep6 rep7 rep8 rep9 rep10 rep11 || exit $?
  ;;
3)
  cold_gap 200
  cost_rep "issue18_rep${REP:-10}" "softmax:softmax,clamp:clamp" 60
  ;;
4)
  cold_gap 150
  cost_rep issue18_rep12 "softmax:softmax,clamp:clamp,sum:sum" 60
  cost_rep issue18_rep13 "clamp:clamp,sum:sum,softmax:softmax" 60
  grep -h "prewarmed in the background\|recorded under" "$OUT"/issue18_rep1[23]/*/after1/zl/run.log
  ;;
5)
  pool_reps rep12 rep13 rep14 rep15 rep16 || exit $?
  mv "$OUT/pooled.md" "$OUT/pooled_prewarm.md"
  ;;
6)
  cost_rep issue18_rep14 "$(rotated 3)" 60
  cost_rep issue18_rep15 "sum:sum,softmax:softmax,clamp:clamp" 40
  cost_rep issue18_rep16 "clamp:clamp,softmax:softmax" 40
  ;;
*)
  echo "PART must be 1 to 6 (got $PART)" >&2; exit 2
  ;;
esac
echo "===== part $PART done in $(( $(date +%s) - T0 )) s"
