#!/usr/bin/env bash
# Shape-set A/B: one switch on one operator, one record/replay pair per fold set (a shape yaml,
# usually the shapes of one serving scenario). Per set: FOLD_SWITCH=0 records the autotune picks,
# FOLD_SWITCH=1 replays them, so the pair differs by the switch alone; each pair's --ab summary
# is printed as it completes.
#
# Before measuring, it checks that the switch is still read somewhere under $FLAGGEMS_DIR/src
# (upstream removed this switch once; a dead switch runs the same code on both sides and the
# pair reports a false "no difference", silently), and that every set has OP's entry (without
# it the benchmark would measure its own shapes under the set's name).
#
# DeepSeek fold sets are yours to supply: the trace shapes are not public, so none ship
# (shape/DeepSeek-V4-Flash.md: the known dimensions and what each set still needs). One yaml per
# serving scenario, named after it (the name labels its pair), in FlagGems' --shape_file format
# with OP as the key, one row per MoE call shape of the trace:
#     fused_marlin_moe_mxfp4:
#       shapes:                        # num_tokens, experts, hidden, expert intermediate, topk
#         - [NUM_TOKENS, 256, 4096, 2048, 6]
# FlagGems from ed2508bcb on calls that benchmark fused_marlin_moe_w4a16_mxfp4 (OP and OP_FILE)
# and no longer reads FLAGGEMS_MXFP4_FOLDSCALE: name the switch under test in FOLD_SWITCH.
#
# Examples:
#   # The shipped public sets (shape/Llama-3-8B-decode-b1.yaml, -b8.yaml) on the CPU, from the
#   # repository root: the bundled fake FlagGems tree in Triton's interpreter, whose relu reads
#   # ZL_TEST_SWITCH (about 2 min; the latencies mean nothing, the pairs and summaries are the job)
#   FLAGGEMS_DIR=$PWD/tests/fake_flaggems PYTHONPATH=$PWD/tests/fake_flaggems/src TRITON_INTERPRET=1 \
#     FOLD_SWITCH=ZL_TEST_SWITCH OP=relu OP_FILE=relu bash ab_fold_test.sh
#   # The same sets on a GPU: your FlagGems checkout, a switch its src/ reads, and an operator
#   # the sets list (relu, silu_and_mul, rms_norm, softmax, mm, bmm, topk, sort)
#   FLAGGEMS_DIR=/path/to/FlagGems FOLD_SWITCH=MY_SWITCH OP=silu_and_mul OP_FILE=silu_and_mul \
#     bash ab_fold_test.sh
#   # DeepSeek-V4-Flash's MXFP4 MoE (the reference job; FOLD_SWITCH and OP default to it): your sets
#   SHAPE_SETS="ds/DeepSeek-V4-Flash-p1024d1024.yaml ds/DeepSeek-V4-Flash-p4096d1024.yaml" \
#     FLAGGEMS_DIR=/path/to/FlagGems bash ab_fold_test.sh
#
# Variables:
#   SHAPE_SETS     space separated yaml paths (default every shape/*.yaml of this repo: the
#                  shipped example sets)
#   FOLD_SWITCH    the variable under test (default FLAGGEMS_MXFP4_FOLDSCALE)
#   OP / OP_FILE   operator and benchmark file stem (default fused_marlin_moe_mxfp4 /
#                  fused_marlin_moe)
#   FLAGGEMS_DIR   the FlagGems checkout whose src/ must read FOLD_SWITCH
#   CELL_TIMEOUT   seconds per run (default 2400); `!!! CELL_TIMEOUT` / `!!! CELL_KILLED` say
#                  which ended a cell
#   AB_ROOT        output root (default <runs>/ab_fold_<timestamp>; claimed: one that already
#                  holds a campaign is refused)
#   ZL_ISOLATE_TUNER_CACHE  default 1 here (a private tuner store per run)
#   ZL_RUN_PYTEST  the run script (tests only)
#   Each run also takes run_pytest.sh's variables (ZL_BACKEND, ...; its --help).
#
# Outputs:
#   <root>/<set>_fold0, <set>_fold1 (run directories), <root>/summary.log (ANSI stripped).
#   Quick check: grep -E '^#####|FAILED|INCOMPLETE' <root>/summary.log
#
# Exit codes:
#   0      done
#   2      no shape set / a set without OP's entry / bad variables / an AB_ROOT already used
#   3      the switch is not read under $FLAGGEMS_DIR/src, or the interpreter cannot import
#          triton / flag_gems
#   128+N  stopped by signal N
set -uo pipefail

ZL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=zl/sh/ab_common.sh
source "$ZL_ROOT/zl/sh/ab_common.sh"

FOLD_SWITCH="${FOLD_SWITCH:-FLAGGEMS_MXFP4_FOLDSCALE}"
OP="${OP:-fused_marlin_moe_mxfp4}"
OP_FILE="${OP_FILE:-fused_marlin_moe}"
FLAGGEMS_DIR="${FLAGGEMS_DIR:-/workspace/dev/FlagGems}"
CELL_TIMEOUT="${CELL_TIMEOUT:-2400}"
require_var_name FOLD_SWITCH "$FOLD_SWITCH"
valid_name "$OP" && valid_name "$OP_FILE" || die2 "OP / OP_FILE are operator names ([A-Za-z0-9_.@-], no '/' or '..'): '$OP' '$OP_FILE'"
require_positive_int CELL_TIMEOUT "$CELL_TIMEOUT"

if [[ -n "${SHAPE_SETS:-}" ]]; then
  read -r -a SETS <<< "$SHAPE_SETS"
else
  set +f; shopt -s nullglob
  SETS=("$ZL_ROOT"/shape/*.yaml)
  shopt -u nullglob; set -f
fi
if (( ${#SETS[@]} == 0 )); then
  echo "!!! no shape set: $ZL_ROOT/shape/ holds no *.yaml and SHAPE_SETS is empty." >&2
  echo "!!! Put the real trace shape sets there (shape/README.md) or pass SHAPE_SETS=\"a.yaml b.yaml\"." >&2
  exit 2
fi
for s in "${SETS[@]}"; do
  [[ -f "$s" ]] || die2 "shape set not found: $s"
done

if [[ ! -d "$FLAGGEMS_DIR/src" ]]; then
  echo "!!! FLAGGEMS_DIR has no src/: $FLAGGEMS_DIR (cannot check that $FOLD_SWITCH is still read)" >&2
  exit 3
fi
if ! grep -rqs --include='*.py' -- "$FOLD_SWITCH" "$FLAGGEMS_DIR/src"; then
  echo "!!! $FOLD_SWITCH is not read anywhere under $FLAGGEMS_DIR/src." >&2
  echo "!!! Both sides would run the same code and report a false 'no difference'; refusing." >&2
  echo "!!! Pick a switch the checked-out source still reads (FOLD_SWITCH=...)." >&2
  exit 3
fi

campaign_preflight ab_fold
# Every set holds OP's entry, or its cells would fail one by one (or, with only a Benchmark
# class key, measure whatever that class resolves to): the shipped sets are the public Llama
# example, while OP defaults to the DeepSeek reference job's operator.
"$PY" - "$OP" "${SETS[@]}" <<'PY' || exit 2
import sys
from zl.shapefile import ShapeFileError, validate_shape_file
op, bad = sys.argv[1], []
for path in sys.argv[2:]:
    try:
        note = validate_shape_file(path, op)
    except ShapeFileError as exc:
        bad.append(path)
        print(f"!!! shape set {path}: {exc}", file=sys.stderr)
        continue
    if note:
        print(f">>> shape set {path}: {note}", file=sys.stderr)
if bad:
    print(f"!!! OP={op}: {len(bad)} shape set(s) unusable; set OP/OP_FILE to an operator the sets "
          "list, or SHAPE_SETS to your own sets (--help: the fold set format)", file=sys.stderr)
    sys.exit(2)
PY
if [[ -t 1 && -z "${NO_COLOR:-}" ]]; then export FLAGGEMS_PERF_COLOR=always; fi
claim_root ab_fold
LOG="$ROOT/summary.log"
driver_exit() {
  stop_pid_group "$CELL_PID"
  end_log
}
trap driver_exit EXIT

run_side() {   # out value shape_file [replay]
  run_cell_proc "op=$OP $FOLD_SWITCH=$2 set=$3" OP="$OP" OP_FILE="$OP_FILE" OUT_DIR="$1" \
    SHAPE_FILE="$3" REPLAY_FROM="${4:-}" FLAGGEMS_DIR="$FLAGGEMS_DIR" DTYPES= "$FOLD_SWITCH=$2"
}

start_log
echo ">>> switch=$FOLD_SWITCH  op=$OP  sets=${SETS[*]}  root=$ROOT  campaign=$ZL_CAMPAIGN_ID"
for s in "${SETS[@]}"; do
    name="$(basename "$s" .yaml)"
    abs="$(cd "$(dirname "$s")" && pwd)/$(basename "$s")"
    B="$ROOT/${name}_fold0"; A="$ROOT/${name}_fold1"
    echo "########## $name | $FOLD_SWITCH=0 (record) ##########"
    if ! run_side "$B" 0 "$abs"; then echo "!!! FAILED $name fold0; set skipped"; continue; fi
    echo "########## $name | $FOLD_SWITCH=1 (replay $B) ##########"
    if ! run_side "$A" 1 "$abs" "$B"; then echo "!!! FAILED $name fold1"; continue; fi
    echo "########## $name | summary ##########"
    "$PY" "$ZL_ROOT/batch_summary.py" --ab "$B" "$A" --label "$OP@$name" \
      || echo "!!! summary refused or failed for $name (rc=$?)"
done
echo "########## ALL DONE ##########"
end_log
echo ">>> log: $LOG"
