#!/usr/bin/env bash
# H200 round 8 (one call, ~8 min), timing-sensitive stages first, nothing else on the GPU:
# issue 6 part 1 (A/A screen on softmax, relu, abs, now with path-normalised fingerprints)
# and part 4 (4-round A/A on relu: the false-verdict rate), float16 only; then issue 8's
# mm tf32 vs ieee fingerprint check on small shapes (functional).
#   OUT=/some/dir bash docs/validation/scripts/device_round8.sh
set -uo pipefail
source docs/validation/scripts/device_env.sh || exit 1
round_dir round8
export DTYPES="${DTYPES:-float16}"
for p in 1 4; do
  echo "===== ab_validate part $p ($(date +%H:%M:%S))"
  PARTS=$p OUT="$W/ab$p" timeout "${PART_S:-230}" bash docs/validation/scripts/ab_validate.sh > "$W/ab$p.out" 2>&1
  echo "part $p rc=$?"; bundle
done
echo "===== ir_validate mm ($(date +%H:%M:%S))"
CHECKS=mm OUT="$W/ir" timeout "${IR_S:-110}" bash docs/validation/scripts/ir_validate.sh > "$W/ir.out" 2>&1
echo "ir rc=$?"; bundle
ls -la "$OUT"
