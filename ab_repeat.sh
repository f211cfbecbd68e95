#!/usr/bin/env bash
# Multi-round A/B: the same comparison in N rounds of fresh processes, reported per
# shape as medians over rounds with their spread and a significance verdict.
#
# Why: one pair cannot say whether its own verdict is stable. On an S5000, topk lost 32
# convert_layout ops, yet 17 of its 42 shapes flipped the sign of their delta between
# two equally valid runs; the gain itself sat near zero.
#
# Caliber: round 1 side A records the autotune picks; every other cell (A's later rounds
# included) replays them, so configs are pinned across rounds and sides and only the
# switch and the noise remain. Odd rounds run A then B, even rounds B then A, so a
# one-directional drift (clock ramp, heating) does not land on one side.
#
# Examples:
#   SWITCH=FLAGTREE_MUSA_RLC_ENHANCE OPS="topk masked_select" ROUNDS=6 \
#     ZL_BACKEND=musa FLAGGEMS_DIR=/path/to/FlagGems bash ab_repeat.sh
#   SWITCH=MY_SWITCH OPS="mm:mm:float16" ROUNDS=6 bash ab_repeat.sh
#
# Variables:
#   SWITCH (required)   variable under test: side A =0, side B =1
#   OPS (required)      OP | OP:OP_FILE | OP:OP_FILE:DTYPES (dtypes comma separated; without
#                       dtypes the operator's own set: an exported DTYPES is ignored). Names are
#                       [A-Za-z0-9_.@-]; a bad or repeated entry exits 2 before any cell runs
#   ROUNDS              default 6 (per-shape verdicts need >= 4: batch_summary.py explains)
#   CELL_TIMEOUT        seconds per cell (default 2400); a timeout prints `!!! CELL_TIMEOUT` (rc
#                       124, or 137 after the 30 s kill grace), any other kill `!!! CELL_KILLED`
#   AB_ROOT             output root (default <runs>/ab_repeat_<SWITCH>_<timestamp>, claimed with
#                       mkdir); a root that already holds a campaign is refused (exit 2)
#   SWITCH_ALLOW_NO_IR_DIFF=1  keep going when round 1 compiled identical code on both sides
#                       (NO_IR_DIFF, or VARIANTS_DIFFER: every variant both compiled identical;
#                       only for a switch that acts at run time, not on generated code)
#   ZL_ISOLATE_TUNER_CACHE  default 1 here (a private tuner store per cell); 0 shares ~/.flaggems
#   TELEMETRY_INTERVAL  seconds between clock/temperature samples (default 5, 0 = off)
#   IR_LEVEL            an extra IR level to dump as files; the round-1 check compares every
#                       level recorded (ttgir, llir, ptx/amdgcn, binary), as the screen does
#   ZL_RUN_PYTEST       the run script (default <repo>/run_pytest.sh; tests point it at a stub)
#   Each cell also takes run_pytest.sh's variables (FLAGGEMS_DIR, ZL_BACKEND, ...; its --help).
#
# Outputs:
#   <root>/campaign.id; <root>/<cell>/r<k>_<A|B>/ (run directories; <cell> is OP or
#   OP@DTYPE+DTYPE); <root>/status.tsv (one row per cell as it finishes: round op dtypes side
#   switch rc elapsed_s success failed replay_fallback no_cudagraph capture_poisoned),
#   <root>/telemetry.tsv, <root>/summary.log (ANSI stripped), and per cell the report of
#   `batch_summary.py --ab-rounds <root>/<cell>`. Every cell's run_identity.json carries the
#   campaign's campaign_id. An operator with a failed cell gets no report: a report with
#   missing rounds reads like a complete one.
#
# Exit codes:
#   0      done
#   2      bad variables or an AB_ROOT already used
#   3      the interpreter cannot import triton / flag_gems (`!!! PREFLIGHT_FAILED check=interpreter`)
#   128+N  stopped by signal N (the running cell and telemetry are stopped, the remaining cells
#          not run)
set -uo pipefail

ZL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=zl/sh/ab_common.sh
source "$ZL_ROOT/zl/sh/ab_common.sh"

SWITCH="${SWITCH:-}"
OPS="${OPS:-}"
ROUNDS="${ROUNDS:-6}"
CELL_TIMEOUT="${CELL_TIMEOUT:-2400}"
SWITCH_ALLOW_NO_IR_DIFF="${SWITCH_ALLOW_NO_IR_DIFF:-0}"
TELEMETRY_INTERVAL="${TELEMETRY_INTERVAL:-5}"
[[ -n "$SWITCH" ]] || die2 "SWITCH is required (e.g. SWITCH=FLAGTREE_MUSA_RLC_ENHANCE)"
require_var_name SWITCH "$SWITCH"
[[ -n "$OPS" ]] || die2 "OPS is required (e.g. OPS=\"topk masked_select\")"
require_positive_int ROUNDS "$ROUNDS"
require_positive_int CELL_TIMEOUT "$CELL_TIMEOUT"
[[ "$TELEMETRY_INTERVAL" =~ ^[0-9]+([.][0-9]+)?$ ]] || die2 "TELEMETRY_INTERVAL must be a number of seconds (got: $TELEMETRY_INTERVAL)"

parse_ops
campaign_preflight ab_repeat

if [[ -t 1 && -z "${NO_COLOR:-}" ]]; then export FLAGGEMS_PERF_COLOR=always; fi
claim_root "ab_repeat_${SWITCH}"
LOG="$ROOT/summary.log"
STATUS="$ROOT/status.tsv"
printf 'round\top\tdtypes\tside\tswitch\trc\telapsed_s\tsuccess\tfailed\treplay_fallback\tno_cudagraph\tcapture_poisoned\n' > "$STATUS"

# Clocks and temperature for the whole campaign: throttling moves latency by more than the
# per-side noise a six-round A/B claims, and leaves no trace in run.log. telemetry.py exits
# quietly (reason in telemetry.err) where the backend has no sampler.
TELE_PID=""
if [[ "$TELEMETRY_INTERVAL" != "0" ]]; then
  # Under zl.supervise: a SIGKILLed campaign once left its sampler appending forever.
  "$PY" -m zl.supervise --parent "$$" -- "$PY" "$ZL_ROOT/telemetry.py" "$ROOT/telemetry.tsv" \
    --interval "$TELEMETRY_INTERVAL" --backend "${ZL_BACKEND:-cuda}" --device "${ZL_DEVICE:-}" \
    >/dev/null 2>&1 &
  TELE_PID=$!
fi
stop_telemetry() {
  stop_pid_group "$TELE_PID"
  TELE_PID=""
}
DRIVER_STOP_HOOK=stop_telemetry
driver_exit() {
  stop_pid_group "$CELL_PID"
  stop_telemetry
  end_log
}
trap driver_exit EXIT

# Run one cell and log it in status.tsv at once: missing cells, timeouts and markers going
# from 0 to non-zero must be visible while the campaign runs, not after someone greps.
run_cell() {   # round side op op_file dtypes out_dir [replay_from]
  local round="$1" side="$2" op="$3" op_file="$4" dtypes="$5" dir="$6" replay="${7:-}"
  local val=0 start rc elapsed stats dcol="${5// /,}"
  [[ "$side" == B ]] && val=1
  start=$(date +%s)
  run_cell_proc "op=$op dtypes=${dcol:-<all>} round=$round side=$side" \
    OP="$op" OP_FILE="$op_file" OUT_DIR="$dir" DTYPES="$dtypes" REPLAY_FROM="$replay" "$SWITCH=$val"
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  stats="$("$PY" "$ZL_ROOT/batch_summary.py" --cell-stats "$dir")" || stats=$'0\t1\t0\t0\t0'
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$op" "${dcol:-<all>}" "$side" "$val" "$rc" "$elapsed" "$stats" >> "$STATUS"
  # A cell that exits 0 without one measured row is not a measurement either.
  if (( rc == 0 )) && [[ "$(cut -f1 <<< "$stats")" == 0 ]]; then
    echo "!!! $op round $round side $side: exit 0 but no measured row"
    return 1
  fi
  return "$rc"
}

start_log
echo ">>> switch=$SWITCH  rounds=$ROUNDS  ops=$OPS  root=$ROOT  campaign=$ZL_CAMPAIGN_ID"
for i in "${!OPS_OP[@]}"; do
    op="${OPS_OP[$i]}"; op_file="${OPS_FILE[$i]}"; dtypes="${OPS_DTYPES[$i]}"; cell="${OPS_CELL[$i]}"
    out="$ROOT/$cell"
    mkdir -p -- "$out"

    echo "########## $cell | round 1 | A ($SWITCH=0, record) ##########"
    if ! run_cell 1 A "$op" "$op_file" "$dtypes" "$out/r1_A"; then
      echo "!!! $op: round 1 side A failed; operator skipped, artifacts in $out"
      continue
    fi
    REC="$out/r1_A"
    ok=1; reason="a cell failed"
    for ((k = 1; k <= ROUNDS && ok; k++)); do
      if (( k % 2 == 1 )); then order="A B"; else order="B A"; fi
      for side in $order; do
        [[ $k -eq 1 && $side == A ]] && continue
        val=0; [[ $side == B ]] && val=1
        echo "########## $cell | round $k | $side ($SWITCH=$val, replay) ##########"
        if ! run_cell "$k" "$side" "$op" "$op_file" "$dtypes" "$out/r${k}_${side}" "$REC"; then
          echo "!!! $op: round $k side $side failed"
          ok=0; break
        fi
      done
      if (( k == 1 && ok )); then
        # The screen's first-difference rule (zl.ir.fingerprint verdict), every level.
        irv="$(ir_verdict "$out/r1_A" "$out/r1_B" 2>/dev/null)" || true
        res1="$(results_cells "$out/r1_A" "$out/r1_B")"; res1="${res1%%$'\t'*}"
        if [[ "$res1" == *"MISMATCH ("* ]]; then echo "!!! $op: round 1 WRONG_RESULTS: B vs A $res1"
        else echo ">>> $op: round 1 results B vs A: $res1"; fi
        if [[ "$irv" != NO_IR_DIFF && "$irv" != VARIANTS_DIFFER && "$irv" != IR_CHANGED@* \
              && "$irv" != BINARY_CHANGED ]]; then
          echo "??? $op: a side compiled no .ttgir (not through Triton, or the IR dump is off);"
          echo "??? the switch-has-an-effect check is skipped. This is not 'the switch does nothing'."
        elif [[ "$irv" == NO_IR_DIFF || "$irv" == VARIANTS_DIFFER ]]; then
          # VARIANTS_DIFFER: every variant both sides compiled is identical; only the set of
          # argument-value specialisations differs (inputs, call counts), not the code generator.
          echo "!!! $M_SWITCH_NO_IR_DIFF op=$cell switch=$SWITCH"
          [[ "$irv" == VARIANTS_DIFFER ]] && echo "!!! round 1 is VARIANTS_DIFFER: the sides compiled different" \
            "variant sets (argument-value specialisations), every variant both compiled is identical."
          echo "!!! round 1 compiled identical code at every level on both sides: $SWITCH did not change"
          if [[ "$SWITCH_ALLOW_NO_IR_DIFF" != "1" ]]; then
            echo "!!! $op's generated code, and $((ROUNDS - 1)) more rounds would measure noise and"
            echo "!!! report it as 'no difference'. Check the switch name and where the source reads"
            echo "!!! it; for a switch that acts at run time only, rerun with SWITCH_ALLOW_NO_IR_DIFF=1."
            ok=0; reason="the switch did not change its generated code"
          else
            echo "!!! $op's generated code; continuing because SWITCH_ALLOW_NO_IR_DIFF=1 (a run-time"
            echo "!!! switch, or an A/A check): any difference below comes from run time, not codegen."
          fi
        else
          echo ">>> $op: the switch changes generated code ($irv)"
        fi
      fi
    done

    echo "########## $cell | report ##########"
    if (( ok )); then
      "$PY" "$ZL_ROOT/batch_summary.py" --ab-rounds "$out" --label "$cell" \
        --json "$out/ab_rounds.json" || echo "!!! report refused or failed for $op (rc=$?)"
    else
      echo "!!! $op: $reason; no report (artifacts in $out)"
    fi
done
echo "########## ALL DONE ##########"
end_log
stop_telemetry
echo ">>> log: $LOG"
echo ">>> per-cell status: $STATUS"
[[ -s "$ROOT/telemetry.tsv" ]] && echo ">>> clocks/temperature: $ROOT/telemetry.tsv"
[[ -s "$ROOT/telemetry.err" ]] && echo ">>> telemetry note: $(head -c 300 "$ROOT/telemetry.err")"
echo ">>> rerun a report: python batch_summary.py --ab-rounds $ROOT/<cell> --label <cell>"
exit 0
