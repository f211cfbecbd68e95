#!/usr/bin/env bash
# Issue 16, second H200 call: (1) which cubin sections differ between two cache locations
# (binary_sections_probe.py, abs and gelu), (2) the A/A screen on abs and gelu again with
# zl.ir.binary leaving debug relocations out. OUT=dir bash docs/validation/scripts/issue16_aa_binary.sh
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
: "${OUT:?set OUT}"
source docs/validation/scripts/device_env.sh || exit 1
W="$OUT/w"; mkdir -p "$W"
printf 'abs: {shapes: [[64, 64], [4096, 4096]]}\ngelu: {shapes: [[64, 64], [4096, 4096]]}\n' > "$W/shapes.yaml"
for op in abs gelu; do
  timeout 60 python3 docs/validation/scripts/binary_sections_probe.py "$W/probe" "$op" > "$OUT/probe_$op.txt" 2>&1
  echo "probe $op rc=$?"; grep -E "^==|DIFF" "$OUT/probe_$op.txt" | head -20
done
SHAPE_FILE="$W/shapes.yaml" ZL_ISOLATE_TUNER_CACHE=1 NO_COLOR=1 SWITCH=ZL_AA_UNREAD_SWITCH \
  OPS="abs:abs:float16 gelu:gelu:float16" CELL_TIMEOUT=60 AB_ROOT="$W/aa" \
  timeout 150 bash ab_rlc_test.sh > "$OUT/aa.out" 2>&1
echo "aa rc=$?"
cp "$W/aa/screen.tsv" "$OUT/aa_screen.tsv" 2>/dev/null
python3 - "$W/aa/screen.tsv" <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1]), delimiter="\t"):
    print(f"  {r['op']:<8} {r['verdict']:<16} levels={r.get('ir_levels')} results={r.get('results')} "
          f"fp_binary={r.get('fp_binary')}")
PY
