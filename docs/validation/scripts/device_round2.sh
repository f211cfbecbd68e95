#!/usr/bin/env bash
# H200 round 2, timing-sensitive work only (nothing else runs on the GPU meanwhile):
# timer A/A noise + profiler cross-check (issue 7), then a 4-round ab_repeat (issue 6 part 3).
#   OUT=/some/dir bash docs/validation/scripts/device_round2.sh
set -uo pipefail
source docs/validation/scripts/device_env.sh || exit 1
round_dir round2
echo "===== timer noise ($(date +%H:%M:%S))"
python3 benchmarks/timer_noise.py --flaggems-dir "$FLAGGEMS_DIR" --ops softmax,gelu_backward \
  --budget-s "${TIMER_BUDGET_S:-330}" --out "$W/timer"; echo "rc=$?"
echo "===== ab_validate part 3 ($(date +%H:%M:%S))"
PARTS=3 OUT="$W/ab3" bash docs/validation/scripts/ab_validate.sh; echo "rc=$?"
tar -czf "$OUT/round2.tgz" -C "$W" . && ls -la "$OUT"
