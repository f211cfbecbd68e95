#!/usr/bin/env bash
# H200 round 10 (one short call): issue 8's mm fingerprint check with a switch that reaches
# FlagGems' mm kernel (MM_SWITCH, default TRITON_DEBUG=1; round 9 showed TRITON_F32_DEFAULT
# cannot: the kernels pin their dot precision).
#   OUT=/some/dir bash docs/validation/scripts/device_round10.sh
set -uo pipefail
source docs/validation/scripts/device_env.sh || exit 1
round_dir round10
echo "===== ir_validate mm ($(date +%H:%M:%S))"
CHECKS=mm OUT="$W/ir" timeout "${IR_S:-150}" bash docs/validation/scripts/ir_validate.sh > "$W/ir.out" 2>&1
echo "ir rc=$?"
bundle
cat "$W/ir/verdict.txt" | head -12
