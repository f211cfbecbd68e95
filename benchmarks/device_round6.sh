#!/usr/bin/env bash
# H200 round 6 (one call, ~9.5 min), timing-sensitive, nothing else on the GPU:
# 1) the A/A screen on softmax, relu, abs (issue 6 part 1); 2) timer A/A noise for
# gelu_backward (graph timing now captures: the forward runs on a side stream)
# and sum, the reduction operator (issue 7).
#   OUT=/some/dir bash benchmarks/device_round6.sh
set -uo pipefail
source benchmarks/device_env.sh || exit 1
W="${OUT:?set OUT}/work"; mkdir -p "$W"
# re-bundled after every stage: a call cut at its limit still returns what finished
bundle() { tar -czf "$OUT/round6.tgz" -C "$W" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' .; }
echo "===== ab_validate part 1 ($(date +%H:%M:%S))"
DTYPES="${DTYPES:-float16}" PARTS=1 OUT="$W/ab1" timeout "${PART1_S:-170}" \
  bash benchmarks/ab_validate.sh > "$W/ab1.out" 2>&1; echo "part 1 rc=$?"; bundle
echo "===== timer noise gelu_backward ($(date +%H:%M:%S))"
python3 benchmarks/timer_noise.py --flaggems-dir "$FLAGGEMS_DIR" --ops gelu_backward --timers zl_graph,up_kernel,up_cudagraph \
  --skip-profile --budget-s "${GELU_BUDGET_S:-150}" --out "$W/timer_gelu" > "$W/timer_gelu.out" 2>&1
echo "gelu rc=$?"; bundle
echo "===== timer noise sum ($(date +%H:%M:%S))"
python3 benchmarks/timer_noise.py --flaggems-dir "$FLAGGEMS_DIR" --ops sum \
  --timers zl_graph,up_cudagraph,up_kernel --skip-profile --budget-s "${SUM_BUDGET_S:-130}" \
  --out "$W/timer_sum" > "$W/timer_sum.out" 2>&1
echo "sum rc=$?"; bundle
ls -la "$OUT"
