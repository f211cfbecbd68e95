#!/usr/bin/env bash
# H200 round 3, functional checks: autotune record/replay (issue 4), IR fingerprints
# (issue 8) and the A/B screen whose switch changes code (issue 6 part 2) run side by
# side (their verdicts do not depend on quiet timing); then, alone on the GPU, the A/A
# screen (issue 6 part 1) and a quick identity rerun of the single-op evidence (issue 3).
#   OUT=/some/dir bash benchmarks/device_round3.sh
set -uo pipefail
source benchmarks/device_env.sh || exit 1
W="${OUT:?set OUT}/work"; mkdir -p "$W"
echo "===== parallel functional checks ($(date +%H:%M:%S))"
OUT="$W/autotune" bash benchmarks/autotune_validate.sh > "$W/autotune.out" 2>&1 & p1=$!
OUT="$W/ir" bash benchmarks/ir_validate.sh > "$W/ir.out" 2>&1 & p2=$!
PARTS=2 OUT="$W/ab2" bash benchmarks/ab_validate.sh > "$W/ab2.out" 2>&1 & p3=$!
wait $p1; echo "autotune rc=$?"; wait $p2; echo "ir rc=$?"; wait $p3; echo "ab part 2 rc=$?"
echo "===== A/A screen alone ($(date +%H:%M:%S))"
PARTS=1 OUT="$W/ab1" bash benchmarks/ab_validate.sh > "$W/ab1.out" 2>&1; echo "ab part 1 rc=$?"
echo "===== single-op identity rerun ($(date +%H:%M:%S))"
OP=softmax OP_FILE=softmax OUT_DIR="$W/run_softmax" bash run_pytest.sh > "$W/run_softmax.out" 2>&1; echo "rc=$?"
OP=gelu_backward OP_FILE=gelu SHAPE_FILE=upstream DTYPES="float16 bfloat16" ZL_ISOLATE_TUNER_CACHE=1 \
  OUT_DIR="$W/run_gelu_backward" bash run_pytest.sh > "$W/run_gelu_backward.out" 2>&1; echo "rc=$?"
tar -czf "$OUT/round3.tgz" -C "$W" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' . && ls -la "$OUT"
