#!/usr/bin/env bash
# H200 round 4 (one call, ~9 min): functional checks, each ALONE on the GPU, since the
# autotune check compares latencies (round 3 ran them side by side and that comparison
# was void). 1) autotune record/replay + edited record (issue 4); 2) IR fingerprints
# softmax A/A and mm tf32 vs ieee (issue 8), keeping one run_identity.json (issue 3).
#   OUT=/some/dir bash benchmarks/device_round4.sh
set -uo pipefail
source benchmarks/device_env.sh || exit 1
W="${OUT:?set OUT}/work"; mkdir -p "$W"
# re-bundled after every stage: a call cut at its limit still returns what finished
bundle() { tar -czf "$OUT/round4.tgz" -C "$W" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' .; }
echo "===== autotune_validate alone ($(date +%H:%M:%S))"
OUT="$W/autotune" timeout "${AUTOTUNE_S:-300}" bash benchmarks/autotune_validate.sh > "$W/autotune.out" 2>&1
echo "autotune rc=$?"; bundle
echo "===== ir_validate alone ($(date +%H:%M:%S))"
OUT="$W/ir" timeout "${IR_S:-250}" bash benchmarks/ir_validate.sh > "$W/ir.out" 2>&1
echo "ir rc=$?"; bundle
ls -la "$OUT"
