#!/usr/bin/env bash
# Reference A/B: FlagGems' FLAGGEMS_MXFP4_FOLDSCALE switch on fused_marlin_moe_mxfp4 over
# the real trace shape sets in shape/. Per set: FOLD=0 records the autotune picks, FOLD=1
# replays them, so the pair differs by the switch alone; each pair's summary is printed
# as it completes. What is reusable is the caliber (pinned configs, graph timing, real
# trace shapes, one pair per set); for another switch or operator change the variables.
#
#   FLAGGEMS_DIR=/path/to/FlagGems bash ab_fold_test.sh
#   SHAPE_SETS="shape/DeepSeek-V4-Flash-p1024d1024.yaml" bash ab_fold_test.sh
#
# Variables: SHAPE_SETS (space separated yaml paths; default every shape/*.yaml of this
# repo), FOLD_SWITCH (default FLAGGEMS_MXFP4_FOLDSCALE), OP / OP_FILE (default
# fused_marlin_moe_mxfp4 / fused_marlin_moe), FLAGGEMS_DIR, CELL_TIMEOUT (default 2400 s;
# `!!! CELL_TIMEOUT` / `!!! CELL_KILLED` say which ended a cell), AB_ROOT (claimed; one that
# already holds a campaign is refused), ZL_ISOLATE_TUNER_CACHE (default 1 here),
# ZL_RUN_PYTEST (tests only).
#
# Before measuring, it checks that the switch is still read somewhere under
# $FLAGGEMS_DIR/src. Upstream removed this switch once; a dead switch runs the same code on
# both sides and the pair reports a false "no difference", silently.
#
# Output: <root>/<set>_fold0, <set>_fold1, <root>/summary.log (ANSI stripped).
# Quick check: grep -E '^#####|FAILED|INCOMPLETE' <root>/summary.log
# Exit: 0 done; 2 no shape set / bad variables / an AB_ROOT already used; 3 the switch is not
# read under $FLAGGEMS_DIR/src, or the interpreter cannot import triton / flag_gems; 128+N
# stopped by signal N.
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
