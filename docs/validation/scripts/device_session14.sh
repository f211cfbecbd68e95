#!/usr/bin/env bash
# The H200 plan for issue 18's last open measurement (after session 13): cold sum read 8-9 %
# above eager CUPTI because a graph reading holds each kernel's in-graph start. Session 14 adds
# the kernel clock (ZL_COLD_CLOCK=kernels: CUPTI's per-kernel durations of the cold graph).
# Carry .fg and .whl:
#   run(carry=[".fg", ".whl"], command="... PART=1 OUT=$OUT bash docs/validation/scripts/device_session14.sh")
#   PART=1  kernel_clock_payload.py (the traces the CPU tests split, torch-native kernels);
#           issue18_cold_gap.py with both clocks, seven cases (two single kernels of 10-12 us
#           added); then real FlagGems nodes (sum, softmax; 64x64 and 4096x4096) under
#           run_pytest.sh with ZL_L2=cold on each clock, alone, for rows, identity and cost
#           (~450 s).
#   PART=3  with ZL_COLD_CLOCK=auto the default: the payload again (now with each trace's host
#           seconds and a timer traced inside another profiler), then cold runs of the six
#           cost-table operators on the default clock, and clamp warm (~400 s).
#   PART=4  after the kernel clock refuses to trace inside another profiler: the payload again
#           (its nested check), then two cold runs each of softmax, sum and clamp on the
#           default clock, back to back: the kernel clock's A/A in real runs (~250 s).
#   PART=5  with the kernel clock's samples as group means (32 ns CUPTI tick): the payload and
#           cold_gap again, then A/A pairs of softmax and sum cold on the default clock and on
#           the events clock (~450 s).
#   PART=2  PART=1's payload and cold_gap again (call 1 bundled only its run folders), then the
#           cold runs in the other order and warm runs of the same nodes: what the kernel clock
#           costs a run next to the events clock and the default (~400 s).
set -uo pipefail
source "$(dirname "$0")/../../../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/../../.." || exit 2
# shellcheck source=docs/validation/scripts/call_clock.sh
source docs/validation/scripts/call_clock.sh
export FLAGGEMS_DIR="${FLAGGEMS_DIR:-$PWD/.fg}"
FG_PATH="/tmp/site:$FLAGGEMS_DIR/src${PYTHONPATH:+:$PYTHONPATH}"
# Only a few files under $OUT come back one by one: everything travels in one tarball,
# rewritten after every stage (compiled IR left out: never committed).
bundle_runs() {
  local parts=() p
  for p in payload cold_gap clock_runs; do [[ -e "$OUT/$p" ]] && parts+=("$p"); done
  tar -czf "$OUT/session14.tgz" -C "$OUT" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' \
    --exclude='*.cubin' --exclude='*.json.ir' --exclude='ttgir' "${parts[@]}" 2>/dev/null
}
payload_and_gap() {
  mkdir -p "$OUT/payload" "$OUT/cold_gap"
  tied timeout 90 python3 $S/kernel_clock_payload.py --out "$OUT/payload/kernel_clock_h200.json"
  echo "payload rc=$?"
  bundle_runs
  PYTHONPATH="$FG_PATH" tied timeout "$1" python3 $S/issue18_cold_gap.py run --work "$OUT/cold_gap" \
    > "$OUT/cold_gap/run.out" 2>&1
  echo "cold_gap rc=$?"
  python3 $S/issue18_cold_gap.py summary --work "$OUT/cold_gap" --out "$OUT/cold_gap" | tail -12
  bundle_runs
}
# `node_run OP[:FILE] L2 CLOCK [TAG]`: one run_pytest.sh run of OP's node (in test_FILE.py,
# default test_OP.py) into $OUT/clock_runs/OP_L2_CLOCK[TAG], alone on the GPU, its wall
# seconds in wall.txt.
node_run() {
  local op=${1%%:*} file=${1#*:} d t0 rc
  d="$OUT/clock_runs/${op}_${2}_${3}${4:-}"
  mkdir -p "$d"; t0=$(date +%s%N)
  PYTHONPATH="$FG_PATH" OP=$op OP_FILE=$file DTYPES=float16 BENCH_LEVEL=core OUT_DIR="$d/zl" \
    SHAPE_FILE=$S/issue18_shapes.yaml ZL_L2=$2 ZL_COLD_CLOCK=$3 \
    TRITON_CACHE_DIR="$d/triton_cache" FLAGGEMS_CACHE_DIR="$d/flaggems_cache" \
    tied timeout 120 bash run_pytest.sh > "$d/output.log" 2>&1
  rc=$?
  echo "rc=$rc wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" > "$d/wall.txt"
  echo "$op l2=$2 clock=$3: $(cat "$d/wall.txt"); $(grep -c '^SUCCESS' "$d/output.log") SUCCESS rows;" \
    "$(grep -c 'BENCHMARK_DIRECT_NO_CUDAGRAPH op=' "$d/output.log") fallback markers"
  rm -rf "$d/triton_cache" "$d/flaggems_cache"
  bundle_runs
}
case "$PART" in
1)
  payload_and_gap 300
  for op in sum softmax; do
    for clock in events kernels; do
      (( $(left) > 40 )) && node_run $op cold $clock
    done
  done
  ;;
2)
  payload_and_gap 200
  for op in softmax sum; do
    for spec in "cold kernels" "cold events" "warm events"; do
      # shellcheck disable=SC2086
      (( $(left) > 40 )) && node_run $op $spec
    done
  done
  ;;
3)
  mkdir -p "$OUT/payload"
  tied timeout 90 python3 $S/kernel_clock_payload.py --out "$OUT/payload/kernel_clock_h200.json"
  echo "payload rc=$?"
  bundle_runs
  # the default clock (auto) on the six operators of the cost table, and warm beside the cold
  # clamp: the third memory-bound operator of the warm-vs-cold comparison
  for spec in "clamp cold auto" "clamp warm auto" "softmax_backward_out:softmax cold auto" \
              "index_select cold auto" "sum cold auto" "softmax cold auto" "mm cold auto"; do
    # shellcheck disable=SC2086
    (( $(left) > 60 )) && node_run $spec
  done
  ;;
4)
  mkdir -p "$OUT/payload"
  tied timeout 90 python3 $S/kernel_clock_payload.py --out "$OUT/payload/kernel_clock_h200.json"
  echo "payload rc=$?"
  bundle_runs
  for op in softmax sum clamp; do
    for tag in a b; do
      (( $(left) > 60 )) && node_run $op cold auto "_$tag"
    done
  done
  ;;
5)
  payload_and_gap 200
  for spec in "softmax cold auto _a" "softmax cold auto _b" "sum cold auto _a" "sum cold auto _b" \
              "softmax cold events _a" "softmax cold events _b" "sum cold events _a" "sum cold events _b"; do
    # shellcheck disable=SC2086
    (( $(left) > 45 )) && node_run $spec
  done
  ;;
*)
  echo "PART must be 1 to 5 (got $PART)" >&2; exit 2
  ;;
esac
echo "===== part $PART done in $(( $(date +%s) - T0 )) s"
