#!/usr/bin/env bash
# The IR plugin and the fingerprint rule on real FlagGems (one GPU): A/A fingerprints equal,
# a TTGIR-changing switch detected.
#
#   FLAGGEMS_DIR=/path/to/FlagGems OUT=/tmp/out bash benchmarks/ir_fingerprint_check.sh
#
# 1. softmax twice (fp16, core shapes): both ttgir trees are listed and the two
#    fingerprints must be EQUAL (same code, same caliber).
# 2. mm fp32 without and with a switch that changes TTGIR on NVIDIA (MM_SWITCH, default
#    TRITON_DEBUG=1: debug compilation adds integer-overflow checks to the kernel): the
#    fingerprints must DIFFER. The switched side replays the first side's autotune picks
#    so only the switch differs. Not TRITON_F32_DEFAULT=ieee, the first choice: FlagGems'
#    Hopper mm kernels pin their dot precision (allow_tf32=False / input_precision=
#    "tf32x3"), so that switch cannot reach them, and the H200 duly fingerprinted both
#    sides identical. MM_SWITCH=TRITON_F32_DEFAULT=ieee reruns that check.
# Writes to $OUT (at most 8 files; no .ttgir file is copied, only listings):
#   softmax_tree.txt  mm_tree.txt   `find ttgir | sort` of the runs
#   index_naming.txt  index.tsv + naming.md of softmax run 1 and mm_base
#   verdict.txt       fingerprints, compare exit codes, PASS/FAIL lines, converts JSON
#   runs.log          the tail of every run's stdout/stderr
#   <run>_identity.json  run_identity.json of softmax_1 and mm_base
# Exit 0 only when both checks pass; 2 FLAGGEMS_DIR unset or not a FlagGems checkout
# (no benchmark/). Budget: about 6 minutes on an H200.
set -u
source "$(dirname "$0")/../zl/sh/entry.sh" "$@"   # --help, and no arguments
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$HERE/runs/ir_validate_out}"
zl_require_flaggems_and_out
mkdir -p "$OUT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/zl_ir_validate.XXXXXX")"
source "$HERE/zl/sh/ir_fingerprint.sh"
export ZL_PYTHON="${ZL_PYTHON:-python3}"

run() {  # run NAME [VAR=VALUE ...]
  local name="$1"; shift
  validate_run "$name" 240 "$@"
}

fail=0
# CHECKS="mm" runs only the switch check (a short device call); default both.
CHECKS="${CHECKS:-softmax mm}"
if [[ "$CHECKS" == *softmax* ]]; then
  run softmax_1 OP=softmax OP_FILE=softmax DTYPES=float16 || fail=1
  run softmax_2 OP=softmax OP_FILE=softmax DTYPES=float16 || fail=1
fi
# One small shape: the switch shows in the dot lowering of any shape. Upstream's core list
# (up to 16x4096^3 in fp32) made one tf32 run outlast its 120 s cap on the H200, and small
# shapes are slow too: the tf32 side autotunes every config of each shape key from an
# isolated cache (163 compiled variants for one shape). Both yaml keys, so
# upstream's own lookup (by class) and zl_bench's (by op) agree.
MM_SHAPES="$WORK/mm_small.yaml"
cat >"$MM_SHAPES" <<'YAML'
mm:
  shapes: [[2, 512, 512, 512]]
  shape_desc: "B, M, N, K"
BlasBenchmark:
  shapes: [[2, 512, 512, 512]]
  shape_desc: "B, M, N, K"
YAML
MM_SWITCH="${MM_SWITCH:-TRITON_DEBUG=1}"
if [[ ! "$MM_SWITCH" =~ ^[A-Za-z_][A-Za-z0-9_]*=.+$ ]]; then
  echo "!!! MM_SWITCH must be VAR=VALUE, got '$MM_SWITCH'" >&2; exit 2
fi
if [[ "$CHECKS" == *mm* ]]; then
  run mm_base OP=mm OP_FILE=mm DTYPES=float32 ZL_ISOLATE_TUNER_CACHE=1 SHAPE_FILE="$MM_SHAPES" || fail=1
  run mm_switch OP=mm OP_FILE=mm DTYPES=float32 ZL_ISOLATE_TUNER_CACHE=1 SHAPE_FILE="$MM_SHAPES" \
      REPLAY_FROM="$WORK/mm_base" "$MM_SWITCH" || fail=1
fi

# The identity of one real run, to check the fields run_pytest.sh fills (device, commit, shapes).
for r in softmax_1 mm_base; do
  cp -f "$WORK/$r/run_identity.json" "$OUT/${r}_identity.json" 2>/dev/null
done
for r in softmax_1 softmax_2; do echo "## $r"; (cd "$WORK/$r" 2>/dev/null && find ttgir | LC_ALL=C sort); done >"$OUT/softmax_tree.txt"
for r in mm_base mm_switch; do echo "## $r"; (cd "$WORK/$r" 2>/dev/null && find ttgir | LC_ALL=C sort); done >"$OUT/mm_tree.txt"
for r in softmax_1 mm_base; do
  echo "## $r/ttgir/index.tsv"; cat "$WORK/$r/ttgir/index.tsv" 2>/dev/null
  echo "## $r/ttgir/naming.md"; cat "$WORK/$r/ttgir/naming.md" 2>/dev/null
done >"$OUT/index_naming.txt"

{
  echo "mm switch: $MM_SWITCH"
  for r in softmax_1 softmax_2 mm_base mm_switch; do
    fpv=$(ir_fingerprint "$WORK/$r" 2>&1); echo "fingerprint $r rc=$? $fpv"
  done
  ir_compare "$WORK/softmax_1" "$WORK/softmax_2"; s=$?
  echo "compare softmax_1 softmax_2 rc=$s (0 same, 10 different, 1 no IR)"
  ir_compare "$WORK/mm_base" "$WORK/mm_switch"; m=$?
  echo "compare mm_base mm_switch rc=$m"
  if [[ "$CHECKS" != *softmax* ]]; then echo "SKIP softmax A/A (CHECKS=$CHECKS)"
  elif (( s == 0 )); then echo "PASS softmax A/A fingerprints equal"; else echo "FAIL softmax A/A rc=$s"; fail=1; fi
  if [[ "$CHECKS" != *mm* ]]; then echo "SKIP mm switch (CHECKS=$CHECKS)"
  elif (( m == 10 )); then echo "PASS mm fingerprints differ under $MM_SWITCH"
  else echo "FAIL mm under $MM_SWITCH rc=$m (0 same, 10 different, 1 no IR)"; fail=1; fi
  for r in softmax_1 mm_base mm_switch; do echo "converts $r:"; ir_converts "$WORK/$r" 1; done
  grep -h "ir-meta-plugin" "$WORK"/*.out
  echo "overall_fail=$fail"
} >"$OUT/verdict.txt" 2>&1
cat "$OUT/verdict.txt"
rm -rf "$WORK"
exit $fail
