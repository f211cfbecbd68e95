#!/usr/bin/env bash
# run_batch.py against upstream on real FlagGems: statuses and failure reasons over a fixed list
# of 40 nodes, a batch-wide screen of one switch over the same nodes, and cases per hour against
# upstream `pytest --mode cudagraph` (per node and in one process). Call it again and again, from the repo
# root on the GPU machine, until it prints "ALL DONE"; every call ends inside BUDGET_S:
#
#   OUT=$OUT bash benchmarks/batch_vs_upstream.sh        # real FlagGems at $PWD/.fg
#
# Stage 1  run_batch.py over NODES, DTYPES=float16, --op-timeout 120, --budget-s (what is left of
#          this call); exit 3 = budget reached, the next call resumes (--resume --batch-dir).
# Stage 2  run_batch.py --switch $SWITCH over the same nodes (side A records, side B replays),
#          also resumed across calls.
# Stage 3  (UPSTREAM=1 only) upstream `pytest --mode cudagraph` over the same nodes, one process
#          per node (UPSTREAM_JOBS at a time, default 1), then once in one process, each with
#          cold caches of its own, for the cases-per-hour comparison (UPSTREAM_JOBS=SHARE compares
#          at equal concurrency; report.txt gives cases/hour by stage wall for both sides).
# After every stage $OUT/batch_validation.tgz is rewritten (IR dumps left out): ops_status.csv,
# summary.csv, screen.tsv, run.logs, console logs, commands.tsv (every command with its start,
# end, wall seconds and exit code) and report.txt (statuses, failure reasons counted, fallbacks,
# cases per hour, verdicts).
#
# State lives in BATCH_ROOT (default runs/device_batch: git-ignored, so a warm machine keeps it
# between calls). On a fresh machine give CARRY_TGZ=<the last batch_validation.tgz> to continue.
# Variables: OUT (required), BUDGET_S=540, OP_TIMEOUT=120, SWITCH=TRITON_DEBUG (changes the TTGIR of
# kernels with device asserts, e.g. mm; the screen fingerprints every level), DEVICES=0, UPSTREAM=0,
# UPSTREAM_JOBS=1, UPSTREAM_MIN_LEFT=130, UPSTREAM_ONE_PROCESS=1, SCREEN=1 (0 skips the screen this call), PLAIN_NAME=plain,
# SHARE=1 (run_batch.py --share-device for both stages: SHARE > 1 runs that many cases at once per
# GPU, a FUNCTIONAL sweep only: statuses and screen verdicts hold, every latency was measured under
# contention and is refused by the comparison tools; report.txt says so). Keep one SHARE per
# BATCH_ROOT: run_batch.py --resume refuses mixing 1 and > 1 (exit 2).
set -uo pipefail
source "$(dirname "$0")/../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "${BASH_SOURCE[0]}")/.."
T_START=$(date +%s)
: "${OUT:?set OUT}"
BUDGET_S="${BUDGET_S:-540}"
OP_TIMEOUT="${OP_TIMEOUT:-120}"
SWITCH="${SWITCH:-TRITON_DEBUG}"
DEVICES="${DEVICES:-0}"
UPSTREAM="${UPSTREAM:-0}"
UPSTREAM_JOBS="${UPSTREAM_JOBS:-1}"
SHARE="${SHARE:-1}"
# PLAIN_NAME: the plain stage's folder and name in commands.tsv; a new name measures the plain
# batch again (e.g. in the same session as the upstream stage, for a same-session throughput).
PLAIN_NAME="${PLAIN_NAME:-plain}"
UPSTREAM_ONE_PROCESS="${UPSTREAM_ONE_PROCESS:-1}"   # 0: upstream per node only this call
SCREEN="${SCREEN:-1}"   # 0: no screen stage this call (the throughput stages first)
# an upstream node starts only with more than this many seconds of the call left
UPSTREAM_MIN_LEFT="${UPSTREAM_MIN_LEFT:-130}"
ROOT="${BATCH_ROOT:-$PWD/runs/device_batch}"
export PYTHONPATH="${PYTHONPATH:-}"
# shellcheck source=benchmarks/_device_env.sh
source benchmarks/_device_env.sh
mkdir -p "$ROOT" "$OUT"
if [[ -n "${CARRY_TGZ:-}" && ! -f "$ROOT/plain/ops_status.csv" ]]; then
  tar -xzf "$CARRY_TGZ" -C "$ROOT" && echo ">>> continued from $CARRY_TGZ"
fi

# 40 nodes: fast and varied (pointwise, comparisons, reductions, norms, indexing, tensor
# construction). Left out on purpose: weight_int8pack_mm (120 s timeout on the H200 where upstream
# took 108 s), mm (its core shapes autotune from an isolated cache: minutes, past --op-timeout),
# whole-file sort / layer_norm nodes (minutes each); group_norm, var_mean, pow_tensor_tensor, cat,
# stack and triu went to fit the batch and its screen into one session's 30 device minutes.
# NODES_OVERRIDE (space separated) replaces the list, for a dry rehearsal on a CPU with a stub.
NODES=(
  abs exp relu gelu sigmoid tanh neg sin cos silu rsqrt isnan
  add mul sub true_divide clamp where_self eq lt bitwise_and
  sum mean amax max min argmax prod softmax log_softmax cumsum
  rms_norm
  index_select gather embedding masked_fill index_add flip zeros full
)
[[ -n "${NODES_OVERRIDE:-}" ]] && read -r -a NODES <<< "$NODES_OVERRIDE"

left() { echo $(( BUDGET_S - ($(date +%s) - T_START) )); }
record() {   # stage rc start end command...
  local stage="$1" rc="$2" s="$3" e="$4"; shift 4
  [[ -f "$ROOT/commands.tsv" ]] || printf 'stage\tstart\tend\twall_s\trc\tcommand\n' > "$ROOT/commands.tsv"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$stage" "$(date -d "@$s" +%FT%T)" "$(date -d "@$e" +%FT%T)" \
    "$((e - s))" "$rc" "$*" >> "$ROOT/commands.tsv"
}
bundle() {
  python3 benchmarks/batch_report.py "$ROOT" "$SHARE" "$UPSTREAM_JOBS" "$PLAIN_NAME" > "$ROOT/report.txt"
  tar -czf "$OUT/batch_validation.tgz" -C "$ROOT" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' \
    --exclude='.flaggems_cache' --exclude='upstream/cache*' .
  cat "$ROOT/report.txt"
}
# A stage: run_batch with what is left of this call; `timeout` is the outer guard (TERM makes
# run_batch kill its cases, mark them INTERRUPTED and exit 130; the next call reruns them).
stage() {   # name batch_dir extra-args...
  local name="$1" dir="$2"; shift 2
  local budget rc s e sides=1
  # Once a stage ran to its end its TIMEOUT/FAIL cases are final here: run_batch.py --resume
  # reruns them, and one H200 call spent 135 s of its 345 on one TIMEOUT again.
  if [[ -f "$dir/stage.done" ]]; then echo ">>> $name: finished in an earlier call"; return 0; fi
  [[ " $* " == *" --switch "* ]] && sides=2
  budget=$(left)
  # run_batch.py starts a case only if its worst case (OP_TIMEOUT per side + grace) fits: a
  # screen case with less than that left starts nothing (180 s is too little for 2 x 120 s).
  if (( budget < OP_TIMEOUT * sides + 30 )); then echo ">>> $name: $budget s left in this call; call again"; return 3; fi
  local args=(--devices "$DEVICES" --dtypes float16 --op-timeout "$OP_TIMEOUT" --kill-grace 10
              --budget-s "$budget" --batch-dir "$dir" --share-device "$SHARE" "$@")
  if [[ -f "$dir/ops_status.csv" || -f "$dir/before/ops_status.csv" ]]; then args+=(--resume); else args+=(--ops "${NODES[@]}"); fi
  echo "===== $name ($(date +%T)): python3 run_batch.py ${args[*]}"
  s=$(date +%s)
  timeout -s TERM -k 30 "$((budget + 20))" python3 run_batch.py "${args[@]}" 2>&1 | tee -a "$ROOT/$name.console"
  rc=${PIPESTATUS[0]}
  e=$(date +%s)
  record "$name" "$rc" "$s" "$e" python3 run_batch.py "${args[@]}"
  (( rc == 0 )) && touch "$dir/stage.done"
  bundle
  return "$rc"
}

stage "$PLAIN_NAME" "$ROOT/$PLAIN_NAME"; rc=$?
if (( rc != 0 )); then echo ">>> stage plain rc=$rc: call again to resume"; exit 0; fi
if [[ "$SCREEN" == 1 ]]; then
  stage screen "$ROOT/screen" --switch "$SWITCH"; rc=$?
  if (( rc != 0 )); then echo ">>> stage screen rc=$rc: call again to resume"; exit 0; fi
fi

if [[ "$UPSTREAM" == 1 ]]; then
  mkdir -p "$ROOT/upstream"
  mapfile -t tests < <(upstream_node_ids "${NODES[@]}")
  (( ${#tests[@]} == ${#NODES[@]} )) || { echo "!!! upstream stage: node ids not resolved" >&2; exit 2; }
  # each node's output is kept (without it, upstream's rc 1 on index_select and index_add
  # could not be explained)
  mkdir -p "$ROOT/upstream/logs"; touch "$ROOT/upstream/per_node.tsv"
  # UPSTREAM_JOBS nodes at once (default 1: one at a time). Set it to SHARE to compare cases per
  # hour with a --share-device batch at equal concurrency: a throughput figure, not a timing.
  s=$(date +%s); started=0
  for t in "${tests[@]}"; do
    grep -qF "$t	" "$ROOT/upstream/per_node.tsv" && continue
    while (( $(jobs -rp | wc -l) >= UPSTREAM_JOBS )); do wait -n; done
    (( $(left) > UPSTREAM_MIN_LEFT )) || break
    # A node gets 120 s, or what is left of the call when that is less; a node cut by the call
    # (not by its own 120 s) writes no line, so the next call runs it again instead of counting it.
    cap=$(( $(left) - 5 )); (( cap > 120 )) && cap=120
    (
      n0=$(date +%s)
      # Caches of its own, shared by the upstream nodes only, as the zl_bench cases share theirs:
      # after a zl_bench stage on the same machine, a shared cache would hand upstream compiled
      # kernels and FlagGems' generated code (H200: 32.8 s vs 5.8 s of pytest on mm).
      (cd "$FLAGGEMS_DIR" && TRITON_CACHE_DIR="$ROOT/upstream/cache/triton" \
         FLAGGEMS_CACHE_DIR="$ROOT/upstream/cache/flaggems" timeout "$cap" \
         python3 -m pytest -s "$t" --level core --mode cudagraph --dtypes float16 \
         > "$ROOT/upstream/logs/${t##*::test_}.log" 2>&1); r=$?
      (( r == 124 && cap < 120 )) && exit 0
      # one short line per node: O_APPEND keeps concurrent appends whole
      printf '%s\t%s\t%s\n' "$t" "$r" "$(( $(date +%s) - n0 ))" >> "$ROOT/upstream/per_node.tsv"
    ) &
    started=$((started + 1))
  done
  wait
  (( started )) && record "upstream_per_node_jobs$UPSTREAM_JOBS" 0 "$s" "$(date +%s)" pytest "$started nodes" --mode cudagraph
  if [[ $(wc -l < "$ROOT/upstream/per_node.tsv") -ge ${#tests[@]} ]]; then
  # Then all nodes in one pytest process (serial), once: a run cut by the call's end still
  # gives a rate (nodes finished, from -v's PASSED/FAILED lines, over its wall time).
    if [[ "$UPSTREAM_ONE_PROCESS" == 1 && ! -f "$ROOT/upstream/one_process.rc" ]] && (( $(left) > 130 )); then
      s=$(date +%s)
      (cd "$FLAGGEMS_DIR" && TRITON_CACHE_DIR="$ROOT/upstream/cache_one/triton" \
         FLAGGEMS_CACHE_DIR="$ROOT/upstream/cache_one/flaggems" timeout "$(( $(left) - 20 ))" \
         python3 -m pytest -s -v -p no:cacheprovider "${tests[@]}" --level core --mode cudagraph --dtypes float16 \
         > "$ROOT/upstream/one_process.log" 2>&1); rc=$?
      e=$(date +%s); record upstream_one_process "$rc" "$s" "$e" pytest "${#tests[@]} nodes" --mode cudagraph
      echo "$rc" > "$ROOT/upstream/one_process.rc"
    fi
  fi
  bundle
  if [[ $(wc -l < "$ROOT/upstream/per_node.tsv") -lt ${#tests[@]} ]] \
     || [[ "$UPSTREAM_ONE_PROCESS" == 1 && ! -f "$ROOT/upstream/one_process.rc" ]]; then
    echo ">>> upstream stage cut by the budget: call again"; exit 0
  fi
fi
[[ "$SCREEN" == 1 ]] || { echo ">>> screen skipped this call (SCREEN=0)"; exit 0; }
echo "########## ALL DONE ##########"
