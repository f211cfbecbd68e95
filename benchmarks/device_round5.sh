#!/usr/bin/env bash
# H200 round 5 (one call, ~9 min), timing-sensitive, nothing else on the GPU: the A/B
# workflow's multi-round parts (issue 6): part 3, a 4-round ab_repeat of DISABLE_LLVM_OPT
# on softmax; part 4, a 4-round A/A on relu (the false-verdict rate). float16 only, so
# each cell stays near 25 s.
#   OUT=/some/dir bash benchmarks/device_round5.sh
set -uo pipefail
source benchmarks/device_env.sh || exit 1
W="${OUT:?set OUT}/work"; mkdir -p "$W"
# re-bundled after every stage: a call cut at its limit still returns what finished
bundle() { tar -czf "$OUT/round5.tgz" -C "$W" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' .; }
export DTYPES="${DTYPES:-float16}"
for p in 3 4; do
  echo "===== ab_validate part $p ($(date +%H:%M:%S))"
  PARTS=$p OUT="$W/ab$p" timeout "${PART_S:-270}" bash benchmarks/ab_validate.sh > "$W/ab$p.out" 2>&1
  echo "part $p rc=$?"; bundle
done
ls -la "$OUT"
