#!/usr/bin/env bash
# H200 round 9 (one call, <= 10 min), each stage alone on the GPU:
# 1) issue 8's mm tf32 vs ieee fingerprint check on two small shapes. Round 8 cut it at
#    110 s: the tf32 side autotunes mm from an isolated cache (163 compiled variants,
#    109 s), so it gets 230 s now;
# 2) issue 6 part 3: 4-round ab_repeat of DISABLE_LLVM_OPT on softmax, a slowdown
#    measured alone, with per-shape verdicts.
#   OUT=/some/dir bash benchmarks/device_round9.sh
set -uo pipefail
source benchmarks/device_env.sh || exit 1
W="${OUT:?set OUT}/work"; mkdir -p "$W"
# re-bundled after every stage: a call cut at its limit still returns what finished
bundle() { tar -czf "$OUT/round9.tgz" -C "$W" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' .; }
echo "===== ir_validate mm ($(date +%H:%M:%S))"
CHECKS=mm OUT="$W/ir" timeout "${IR_S:-230}" bash benchmarks/ir_validate.sh > "$W/ir.out" 2>&1
echo "ir rc=$?"; bundle
echo "===== ab_validate part 3 ($(date +%H:%M:%S))"
PARTS=3 DTYPES="${DTYPES:-float16}" OUT="$W/ab3" timeout "${PART_S:-320}" \
  bash benchmarks/ab_validate.sh > "$W/ab3.out" 2>&1
echo "part 3 rc=$?"; bundle
ls -la "$OUT"
