#!/usr/bin/env bash
# H200 round 3, functional checks: autotune record/replay (issue 4), IR fingerprints
# (issue 8) and the A/B screen whose switch changes code (issue 6 part 2) run side by
# side (their verdicts do not depend on quiet timing); then, alone on the GPU, the A/A
# screen (issue 6 part 1). Each stage has a wall-clock cap so the bundle is always written.
#   OUT=/some/dir bash docs/validation/scripts/device_round3.sh
set -uo pipefail
source docs/validation/scripts/device_env.sh || exit 1
round_dir round3
echo "===== parallel functional checks ($(date +%H:%M:%S))"
OUT="$W/autotune" timeout "${STAGE1_S:-390}" bash docs/validation/scripts/autotune_validate.sh > "$W/autotune.out" 2>&1 & p1=$!
OUT="$W/ir" timeout "${STAGE1_S:-390}" bash docs/validation/scripts/ir_validate.sh > "$W/ir.out" 2>&1 & p2=$!
PARTS=2 OUT="$W/ab2" timeout "${STAGE1_S:-390}" bash docs/validation/scripts/ab_validate.sh > "$W/ab2.out" 2>&1 & p3=$!
wait $p1; echo "autotune rc=$?"; wait $p2; echo "ir rc=$?"; wait $p3; echo "ab part 2 rc=$?"
echo "===== A/A screen alone ($(date +%H:%M:%S))"
PARTS=1 OUT="$W/ab1" timeout "${STAGE2_S:-150}" bash docs/validation/scripts/ab_validate.sh > "$W/ab1.out" 2>&1; echo "ab part 1 rc=$?"
bundle && ls -la "$OUT"
