#!/usr/bin/env bash
# Provenance refusals on real FlagGems: what a GPU run records about where its configs came
# from, and what zl_bench refuses before or after measuring.
#
#   FLAGGEMS_DIR=/path/FlagGems OUT=/tmp/out bash benchmarks/provenance_checks.sh
#
# Stages (each alone on the GPU, each with its own time limit):
#   edited  side A records OP (default amax) in DTYPE (default float16; amax is a LibTuner
#           kernel), a copy of A gets one
#           recorded config edited (num_warps flipped), side E replays the copy. Expected:
#           E's log flags the config its tuner does not list (AUTOTUNE_REPLAY_FOREIGN_CONFIG),
#           and `batch_summary.py --ab A E` and `--ab A' E` both exit 4 (record link).
#   memory  a SHAPE_FILE with a [300000, 300000] float16 shape: preflight exit 3, naming the
#           device's memory.
#   home    `python -m zl.prepare campaign` (the A/B drivers' interpreter check) with HOME
#           pointed at an empty folder: lists every file it created there (none may be under
#           .flaggems, FlagGems' tuner cache).
#   resume  run_batch.py on softmax and relu (float16), then --resume with --dtypes bfloat16
#           (expected exit 2 naming dtypes) and --resume as started (expected exit 0, reused).
# Writes $OUT/checks.txt (one line per expectation: PASS/FAIL and what was seen) and
# $OUT/provenance_checks.tgz (logs, identities, records; compiled IR left out).
# Each stage runs under zl.supervise: killed, even by SIGKILL, this script takes the running
# stage along.
# Exit: 0 every expectation held; 1 one did not; 2 FLAGGEMS_DIR unset or not a FlagGems
# checkout (no benchmark/), or OUT unset.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$HERE/zl/sh/entry.sh" "$@"   # --help, no arguments, the kit installed for PY
zl_require_flaggems_and_out
OP="${OP:-amax}"; OP_FILE="${OP_FILE:-$OP}"; DTYPE="${DTYPE:-float16}"
export FLAGGEMS_DIR NO_COLOR=1 ZL_ISOLATE_TUNER_CACHE=1
W="$OUT/work"; rm -rf "$W"; mkdir -p "$W"
CHECKS="$OUT/checks.txt"; : > "$CHECKS"
failed=0
expect() {   # NAME CONDITION-RESULT(0/1) WHAT-WAS-SEEN
  if [[ "$2" == 0 ]]; then echo "PASS $1: $3" >> "$CHECKS"; else echo "FAIL $1: $3" >> "$CHECKS"; failed=1; fi
}
bundle() {
  tar -czf "$OUT/provenance_checks.tgz" -C "$W" --exclude='ttgir' --exclude='results' . 2>/dev/null
}
# `stage SECONDS CMD...`: CMD in the repo root under zl.supervise (tied to this shell) and a
# time limit. Called directly, never from a subshell: zl.supervise checks that --parent is
# its own parent.
stage() { local limit="$1"; shift; "$PY" -m zl.supervise --parent "$$" --cwd "$HERE" -- timeout -k 10 "$limit" "$@"; }
run() { stage "$1" bash run_pytest.sh > "$2" 2>&1; }

# edited: a replay of an edited record
OUT_DIR="$W/A" OP="$OP" OP_FILE="$OP_FILE" DTYPES="$DTYPE" run 180 "$W/A.out"; rc=$?
expect "record" "$([[ $rc == 0 ]]; echo $?)" "side A rc=$rc"
cp -r "$W/A" "$W/A_edited"
"$PY" - "$W/A_edited/autotune_records/$OP.json" > "$W/edit.out" 2>&1 <<'PY'
import json, sys
path = sys.argv[1]
data = json.load(open(path))
def flip(node):
    if isinstance(node, dict):
        if "num_warps" in node:
            node["num_warps"] = 8 if node["num_warps"] != 8 else 4
            return True
        return any(flip(v) for v in node.values())
    return isinstance(node, list) and any(flip(v) for v in node)
print("edited one config:", flip(data))
json.dump(data, open(path, "w"))
PY
OUT_DIR="$W/E" REPLAY_FROM="$W/A_edited" OP="$OP" OP_FILE="$OP_FILE" DTYPES="$DTYPE" run 180 "$W/E.out"
foreign=$(grep -c AUTOTUNE_REPLAY_FOREIGN_CONFIG "$W/E/run.log" 2>/dev/null)
expect "foreign-config marker" "$([[ ${foreign:-0} -ge 1 ]]; echo $?)" "$(cat "$W/edit.out"); $foreign marker(s) in E's run.log"
"$PY" "$HERE/batch_summary.py" --ab "$W/A" "$W/E" > "$W/ab_A_E.out" 2>&1; rc=$?
expect "--ab A E refused" "$([[ $rc == 4 ]]; echo $?)" "rc=$rc: $(grep -m1 'record link' "$W/ab_A_E.out" | cut -c1-200)"
"$PY" "$HERE/batch_summary.py" --ab "$W/A_edited" "$W/E" > "$W/ab_Aedit_E.out" 2>&1; rc=$?
expect "--ab A' E refused" "$([[ $rc == 4 ]]; echo $?)" "rc=$rc: $(grep -m1 'record link' "$W/ab_Aedit_E.out" | cut -c1-200)"
bundle

# memory: a shape that cannot fit the device
printf '%s:\n  shapes:\n    - [64, 128]\n    - [300000, 300000]\n' relu > "$W/big.yaml"
OUT_DIR="$W/big" OP=relu OP_FILE=relu SHAPE_FILE="$W/big.yaml" DTYPES=float16 ZL_DEVICE="${ZL_DEVICE:-0}" \
  run 60 "$W/big.out"; rc=$?
expect "device memory bound" "$([[ $rc == 3 ]] && grep -q "memory" "$W/big.out"; echo $?)" \
  "rc=$rc: $(grep -m1 PREFLIGHT_FAILED "$W/big.out" | cut -c1-220)"

# home: the drivers' interpreter check and the user's tuner cache
mkdir -p "$W/home"; touch "$W/home/.stamp"
HOME="$W/home" stage 60 "$PY" -m zl.prepare campaign --driver check > "$W/home.out" 2>&1
created="$(cd "$W/home" && find . -newer .stamp -type f | sort)"
printf '%s\n' "$created" > "$W/home_files.txt"
expect "no tuner cache written" "$([[ "$created" != *".flaggems"* ]]; echo $?)" \
  "files created under HOME: $(printf '%s' "$created" | tr '\n' ' ' | cut -c1-200)"
bundle

# resume: a batch resumed under other conditions
B="$W/batch"
stage 200 "$PY" run_batch.py --ops softmax relu --devices "${ZL_DEVICE:-0}" --batch-dir "$B" \
  --dtypes float16 --op-timeout 150 > "$W/batch1.out" 2>&1; rc=$?
expect "batch" "$([[ $rc == 0 ]]; echo $?)" "rc=$rc"
stage 60 "$PY" run_batch.py --resume --batch-dir "$B" --dtypes bfloat16 > "$W/batch2.out" 2>&1; rc=$?
expect "resume with other dtypes refused" "$([[ $rc == 2 ]] && grep -q "dtypes" "$W/batch2.out"; echo $?)" \
  "rc=$rc: $(grep -m1 'dtypes:' "$W/batch2.out")"
stage 120 "$PY" run_batch.py --resume --batch-dir "$B" > "$W/batch3.out" 2>&1; rc=$?
expect "resume as started" "$([[ $rc == 0 ]]; echo $?)" "rc=$rc: $(grep -m1 -i 'reused' "$W/batch3.out" | cut -c1-160)"
bundle
cat "$CHECKS"
exit "$failed"
