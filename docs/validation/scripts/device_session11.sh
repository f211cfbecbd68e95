#!/usr/bin/env bash
# The next H200 session's plan for issue 18 (after session 10). Carry .fg and .whl only:
#   run(carry=[".fg", ".whl"], command="... PART=1 OUT=$OUT bash docs/validation/scripts/device_session11.sh")
# Session 10 showed one run pair per operator cannot decide a 1.1x target: the wall ratio of
# one operator moved by up to 0.2 between two calls (clamp 1.24 and 1.05, index_select 1.01
# and 1.22). So:
#   PART=1  two repetitions of the six-operator cost table (upstream and after1 only: the
#           record runs, which both pay the autotune sweep), the operator order rotated
#           between repetitions so each operator's upstream run changes places with its
#           partner (issue18.py alternates by position) (~500 s).
#   PART=2  (changed after PART=1 ran: index_select read 1.17 and 1.31x upstream's pytest
#           time, softmax 1.24 and 1.15, with nothing in the graph timer's ledger to say why)
#           index_select and softmax, upstream and after1, under cProfile (issue18_profile.py
#           compare -> profile.md); the cold stage with the in-graph call period (relu read
#           0.7-0.9 us above the kernel time; is it the gap between calls?); the warmup A/A on
#           softmax core shapes at 25 ms, MID_WARMUP_MS (default 100) and the caller's 1000 ms
#           (~420 s).
#   PART=3  repetitions 3 and 4 of the cost table (~500 s).
#   PART=4  (no GPU, here) the pooled table over the repetitions, with OUT the folder the calls'
#           issue18_rep*/ were gathered into: issue18_pooled.py -> $OUT/pooled.md.
set -uo pipefail
source "$(dirname "$0")/../../../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/../../.." || exit 2
# shellcheck source=docs/validation/scripts/call_clock.sh
source docs/validation/scripts/call_clock.sh
# shellcheck source=docs/validation/scripts/cost_reps.sh
source docs/validation/scripts/cost_reps.sh
rep() { cost_rep "issue18_rep$1" "$(rotated "$1")" 100; }
case "$PART" in
1) rep 1; rep 2 ;;
2)
  WORK=issue18_profile OPS="index_select:index_select,softmax:softmax" RUNS=upstream,after1 PROFILE=1 \
    STAGES=wall,profile WALL_DEADLINE_S=150 RUN_TIMEOUT_S=70 tied timeout 240 bash $S/device_issue18.sh
  WORK=issue18_cold STAGES=cold,summary tied timeout 130 bash $S/device_issue18.sh
  WORK=issue18_aa OPS="softmax:softmax" RUNS=after1,after2,mid1,mid2,before,before2 \
    SHAPES=core STAGES=wall,summary WALL_DEADLINE_S=$(( $(left) - 60 )) RUN_TIMEOUT_S=50 \
    tied timeout $(( $(left) - 10 )) bash $S/device_issue18.sh
  ;;
3) rep 3; rep 4 ;;
4)
  pool_reps rep1 rep2 rep3 rep4 rep5 rep6 || exit $?
  ;;
*)
  echo "PART must be 1, 2, 3 or 4 (got $PART)" >&2; exit 2
  ;;
esac
echo "===== part $PART done in $(( $(date +%s) - T0 )) s"
