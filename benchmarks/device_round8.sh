#!/usr/bin/env bash
# H200 round 8 (one call, ~7 min), timing-sensitive, nothing else on the GPU (issue 6):
# part 1, the A/A screen on softmax, relu, abs; part 4, a 4-round A/A on relu (the
# false-verdict rate). float16 only.
#   OUT=/some/dir bash benchmarks/device_round8.sh
set -uo pipefail
source benchmarks/device_env.sh || exit 1
W="${OUT:?set OUT}/work"; mkdir -p "$W"
bundle() { tar -czf "$OUT/round8.tgz" -C "$W" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' .; }
export DTYPES="${DTYPES:-float16}"
for p in 1 4; do
  echo "===== ab_validate part $p ($(date +%H:%M:%S))"
  PARTS=$p OUT="$W/ab$p" timeout "${PART_S:-260}" bash benchmarks/ab_validate.sh > "$W/ab$p.out" 2>&1
  echo "part $p rc=$?"; bundle
done
ls -la "$OUT"
