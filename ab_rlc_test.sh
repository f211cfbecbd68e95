#!/usr/bin/env bash
# One A/B pair per operator, as a screen before the expensive multi-round A/B.
#
# Side A runs with $SWITCH=0 and records its autotune picks; side B runs with
# $SWITCH=1 and replays them (REPLAY_FROM), so the two sides differ by the switch
# alone. Each pair takes about a minute where six rounds took 13-44 minutes on an
# S5000, so screen first and send only IR_CHANGED operators to ab_repeat.sh.
# The verdict is the fingerprint, not the convert_layout count: addmm kept 15 -> 15 converts
# while all 15 TTGIR files changed. The counts are kept because they explain the change.
#
# Examples:
#   OPS="softmax gelu_backward" bash ab_rlc_test.sh
#   OPS="perf_sort:sort topk:topk:float16,bfloat16" VENDOR=MUSA bash ab_rlc_test.sh
#   RESCORE=runs/ab_rlc_20260101-120000 bash ab_rlc_test.sh   # re-judge from disk only
#
# Variables:
#   OPS           space separated OP | OP:OP_FILE | OP:OP_FILE:DTYPES (dtypes comma separated;
#                 default softmax).
#                 Without dtypes the operator's own set (an exported DTYPES is ignored: a
#                 global DTYPES=float16 once made fft, complex64 only, look unrunnable).
#                 Names are [A-Za-z0-9_.@-]; a bad or repeated entry exits 2 before any cell.
#   SWITCH        the variable under test (default FLAGTREE_${VENDOR}_RLC_ENHANCE)
#   VENDOR        only names the default SWITCH (default MUSA); the backend is ZL_BACKEND
#   CELL_TIMEOUT  seconds per run (default 2400); a timeout prints `!!! CELL_TIMEOUT` (rc 124, or
#                 137 after the 30 s kill grace), any other kill `!!! CELL_KILLED signal=N`
#   AB_ROOT       output root (default $ZL_RUNS_ROOT or <repo>/runs, then ab_rlc_<timestamp>,
#                 claimed with mkdir); a root that already holds a campaign is refused (exit 2)
#   ZL_ISOLATE_TUNER_CACHE  default 1 here (a private tuner store per run); 0 shares ~/.flaggems
#   RESCORE       an existing root: recompute every verdict from the run directories on disk,
#                 keep the old table as screen.tsv.bak, measure nothing
#   IR_LEVEL      an extra IR level to dump as files for reading (the verdict compares every
#                 level the runs recorded, whatever this says)
#   ZL_RUN_PYTEST the run script (default <repo>/run_pytest.sh; tests point it at a stub)
#   Each run also takes run_pytest.sh's variables (FLAGGEMS_DIR, ZL_BACKEND, ...; its --help).
#
# Outputs:
#   <root>/<cell>_before, <cell>_after (explicit OUT_DIRs: never "the newest
#   runs/<op>_* is mine", which breaks as soon as two drivers share runs/), <root>/summary.log
#   (ANSI stripped), <root>/screen.tsv with one row per operator:
#     op op_file dtypes rows_before rows_after kernels_before kernels_after cvt_before cvt_after
#     elapsed_before elapsed_after rc_before rc_after verdict <caliber fields of side A>
#     results results_torch ir_levels fp_ttgir fp_llir fp_asm fp_binary variants_only
#   Verdicts (one column to filter on; zl.ir.fingerprint verdict and zl.results.compare):
#     WRONG_RESULTS     side B's outputs differ from side A's beyond tolerance, whatever the speed
#     IR_CHANGED@<lvl>  the first level (ttgir, llir, ptx/amdgcn) at which the code differs -> A/B it
#     BINARY_CHANGED    every IR level equal, the cubin/hsaco differs                     -> A/B it
#     NO_IR_DIFF  identical code at every level compared (ir_levels), binary included when
#                 recorded on both sides                             -> its range is the noise floor
#     VARIANTS_DIFFER  every variant both sides compiled is identical at every level; the sets
#                 differ (argument-value specialisations such as i32/i64 follow the inputs and
#                 the call counts; `variants_only` lists them)   -> not A/B'd; not the noise floor
#     NO_TRITON   rows measured but no .ttgir compiled on a side     -> the switch has nothing to act on
#     NO_ROWS     a side failed or measured no row                   -> fix runnability first
#   `results`: match | within_tol | MISMATCH (k/n shapes, worst error ...) | n/a (reason), B vs A;
#   `results_torch`: each side's gems output vs the torch baseline. fp_*: `A` or `A/B` (12 hex).
#   `variants_only`: variants compiled on one side only, e.g. `A: 64x64/k[philox_offset:i64]; B: -`.
#   <root>/screen.requested.tsv (cell op op_file dtypes) lists every requested cell, written
#   before the first one runs; <root>/screen.complete is written only when the list ran to its
#   end. A screen stopped early (signal, kill) has no screen.complete, and
#   `batch_summary.py --screen <root>` reports it INCOMPLETE with the cells never judged.
#
# Exit codes:
#   0      done (the verdicts carry the results)
#   1      every operator is NO_ROWS (nothing was measured)
#   2      bad variables, RESCORE input or an AB_ROOT already used
#   3      the interpreter cannot import triton / flag_gems (`!!! PREFLIGHT_FAILED check=interpreter`)
#   128+N  stopped by signal N (the running cell is stopped, the remaining ones not run)
set -uo pipefail

ZL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=zl/sh/ab_common.sh
source "$ZL_ROOT/zl/sh/ab_common.sh"

VENDOR="${VENDOR:-MUSA}"
SWITCH="${SWITCH:-FLAGTREE_${VENDOR}_RLC_ENHANCE}"
OPS="${OPS:-softmax}"
CELL_TIMEOUT="${CELL_TIMEOUT:-2400}"
RESCORE="${RESCORE:-}"
require_var_name SWITCH "$SWITCH"
require_positive_int CELL_TIMEOUT "$CELL_TIMEOUT"

CAL_HEADER="$("$PY" "$ZL_ROOT/batch_summary.py" --caliber-header)" || die2 "batch_summary.py --caliber-header failed"
EXTRA_COLS="$("$PY" -m zl.screen_verdict --header)" || die2 "zl.screen_verdict --header failed"
VO_COL="$(printf '%s\n' "$EXTRA_COLS" | tr '\t' '\n' | grep -nxF variants_only | cut -d: -f1)"
[[ -n "$VO_COL" ]] || die2 "zl.screen_verdict --header has no variants_only column"
LV_COL="$(printf '%s\n' "$EXTRA_COLS" | tr '\t' '\n' | grep -nxF ir_levels | cut -d: -f1)"
[[ -n "$LV_COL" ]] || die2 "zl.screen_verdict --header has no ir_levels column"
SCREEN_HEADER="op	op_file	dtypes	rows_before	rows_after	kernels_before	kernels_after	cvt_before	cvt_after	elapsed_before	elapsed_after	rc_before	rc_after	verdict	$CAL_HEADER	$EXTRA_COLS"

# "success failed ..." of a run through the one run.log parser.
rows_of() { "$PY" "$ZL_ROOT/batch_summary.py" --cell-stats "$1" | cut -f1; }

# "kernels converts" from the shared counter; "0 0" when the run compiled no TTGIR.
ir_counts() {
  local json
  if json="$(ir_converts "$1" 2>/dev/null)"; then
    printf '%s' "$json" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["ttgir_files"], d["measured_convert_count"])'
  else
    echo "0 0"
  fi
}

# judge rows_before rows_after rc_before rc_after before_dir after_dir
#   -> "verdict<TAB>$EXTRA_COLS cells" (results first: a wrong answer outranks any code verdict)
judge() {   # one rule with run_batch.py --switch (zl/screen_verdict.py)
  "$PY" -m zl.screen_verdict "${1:-0}" "${2:-0}" "$3" "$4" "$5" "$6" 2>/dev/null \
    || printf 'NO_ROWS\tn/a (verdict failed)\tn/a\t-\t-\t-\t-\t-\t-'
}

explain() {   # verdict rc_before rc_after
  case "$1" in
    NO_ROWS)
      if [[ "$2" == 124 || "$3" == 124 ]]; then
        echo "cut off by CELL_TIMEOUT=${CELL_TIMEOUT}s (rc=$2/$3): a duration problem, not a verdict on the switch"
      elif (( $2 > 128 || $3 > 128 )); then
        echo "a side was killed by a signal (rc=$2/$3; see the CELL_TIMEOUT / CELL_KILLED line): not a verdict on the switch"
      else
        echo "no comparable measurement (rc=$2/$3); read run.log: usually a dtype the operator rejects, or no config on this backend"
      fi ;;
    NO_TRITON) echo "rows measured but no .ttgir compiled: nothing went through Triton (aten or a vendor library), so a compiler switch has nothing to act on; not 'the switch does nothing'" ;;
    NO_IR_DIFF) echo "identical code at every level compared, with pinned configs: the switch changed no generated code here (check its spelling before concluding)" ;;
    VARIANTS_DIFFER) echo "every variant both sides compiled is identical; the sides compiled different variant sets (argument-value specialisations follow the inputs and call counts, not the code generator): the switch changed no common code, not sent to ab_repeat.sh" ;;
    IR_CHANGED@*) echo "generated code first differs at ${1#IR_CHANGED@}: worth a multi-round A/B (ab_repeat.sh)" ;;
    BINARY_CHANGED) echo "every IR level identical, the binary differs: worth a multi-round A/B (ab_repeat.sh)" ;;
    WRONG_RESULTS) echo "side B's outputs differ from side A's beyond tolerance: a speedup would be of a wrong answer" ;;
  esac
}

# ------------------------------------------------------------------ RESCORE
if [[ -n "$RESCORE" ]]; then
  [[ -d "$RESCORE" ]] || die2 "RESCORE directory does not exist: $RESCORE"
  TSV="$RESCORE/screen.tsv"
  [[ -f "$TSV" ]] || die2 "no screen.tsv in $RESCORE"
  cp -f "$TSV" "$TSV.bak"
  hdr="$(head -n 1 "$TSV.bak")"
  col() { printf '%s\n' "$hdr" | tr '\t' '\n' | grep -nxF "$1" | cut -d: -f1; }
  c_op=$(col op); c_dt=$(col dtypes); c_v=$(col verdict); c_rcb=$(col rc_before); c_rca=$(col rc_after)
  c_rb=$(col rows_before); c_ra=$(col rows_after)
  [[ -n "$c_op" && -n "$c_v" ]] || die2 "$TSV has no op/verdict column"
  tmp="$TSV.tmp.$$"
  printf '%s\n' "$hdr" > "$tmp"
  changed=0
  while IFS= read -r line; do
    [[ -n "$line" ]] || continue
    op=$(printf '%s' "$line" | cut -f"$c_op"); old=$(printf '%s' "$line" | cut -f"$c_v")
    dt=""; [[ -n "$c_dt" ]] && dt=$(printf '%s' "$line" | cut -f"$c_dt")
    [[ "$dt" == "<all>" ]] && dt=""
    cell="$(cell_name "$op" "${dt//,/ }")"
    B="$RESCORE/${cell}_before"; A="$RESCORE/${cell}_after"
    rcb=0; rca=0
    [[ -n "$c_rcb" ]] && rcb=$(printf '%s' "$line" | cut -f"$c_rcb")
    [[ -n "$c_rca" ]] && rca=$(printf '%s' "$line" | cut -f"$c_rca")
    # Rows are re-read from disk too: the parser may have been fixed since.
    rb=$( [[ -d "$B" ]] && rows_of "$B" || echo 0 ); ra=$( [[ -d "$A" ]] && rows_of "$A" || echo 0 )
    cells="$(judge "$rb" "$ra" "${rcb:-0}" "${rca:-0}" "$B" "$A")"; v="${cells%%$'\t'*}"
    # Columns an older screen.tsv lacks are left out, never appended unnamed.
    idx=""; for name in $EXTRA_COLS; do idx+="${idx:+,}$(col "$name")"; done
    printf '%s\n' "$line" | awk -v FS='\t' -v OFS='\t' -v i="$c_v" -v v="$v" \
      -v irb="${c_rb:-0}" -v rb="$rb" -v ira="${c_ra:-0}" -v ra="$ra" -v idx="$idx" -v cells="$cells" \
      '{ $i = v; if (irb > 0) $irb = rb; if (ira > 0) $ira = ra
         n = split(idx, ix, ","); split(cells, cv, "\t")
         for (k = 1; k <= n; k++) if (ix[k] != "") $(ix[k]) = cv[k + 1]
         print }' >> "$tmp"
    if [[ "$old" != "$v" ]]; then
      printf '  %-24s %-12s -> %s\n' "$op" "$old" "$v"
      changed=$((changed + 1))
    fi
  done < <(tail -n +2 "$TSV.bak")
  mv -f "$tmp" "$TSV"
  echo ">>> rescored $RESCORE: $changed verdict(s) changed; previous table kept as $TSV.bak"
  if [[ -f "$RESCORE/screen.requested.tsv" && ! -f "$RESCORE/screen.complete" ]]; then
    echo "!!! this screen is INCOMPLETE (stopped before its list ended, no screen.complete):" \
      "python batch_summary.py --screen $RESCORE lists the cells never judged"
  fi
  awk -F'\t' -v i="$c_v" 'NR > 1 { c[$i]++ } END { for (k in c) printf "  %-12s %d\n", k, c[k] }' "$TSV" | sort
  exit 0
fi

# ------------------------------------------------------------------ screen
parse_ops
campaign_preflight ab_rlc
if [[ -t 1 && -z "${NO_COLOR:-}" ]]; then export FLAGGEMS_PERF_COLOR=always; fi
claim_root ab_rlc
LOG="$ROOT/summary.log"
TSV="$ROOT/screen.tsv"
printf '%s\n' "$SCREEN_HEADER" > "$TSV"
# The requested list, before any cell: a screen stopped mid-list must not read as the whole
# list (zl/report/views.py reads these two files).
{
  printf 'cell\top\top_file\tdtypes\n'
  for i in "${!OPS_OP[@]}"; do
    printf '%s\t%s\t%s\t%s\n' "${OPS_CELL[$i]}" "${OPS_OP[$i]}" "${OPS_FILE[$i]}" "${OPS_DTYPES[$i]// /,}"
  done
} > "$ROOT/screen.requested.tsv.tmp" && mv -f "$ROOT/screen.requested.tsv.tmp" "$ROOT/screen.requested.tsv" \
  || die2 "cannot write $ROOT/screen.requested.tsv"
JUDGED=" "
screen_stopped() {   # DRIVER_STOP_HOOK: name the cells this screen never judged
  local c never=""
  for c in "${OPS_CELL[@]}"; do [[ "$JUDGED" == *" $c "* ]] || never+=" $c"; done
  echo "!!! screen INCOMPLETE: never judged:${never:- (none)}; screen.tsv holds the judged cells only"
}
DRIVER_STOP_HOOK=screen_stopped
driver_exit() {
  stop_pid_group "$CELL_PID"
  end_log
}
trap driver_exit EXIT

run_side() {   # label out_dir value dtypes op op_file [replay_from]
  run_cell_proc "$1" OP="$5" OP_FILE="$6" OUT_DIR="$2" DTYPES="$4" REPLAY_FROM="${7:-}" "$SWITCH=$3"
}

start_log
echo ">>> switch=$SWITCH  ops=$OPS  root=$ROOT  campaign=$ZL_CAMPAIGN_ID"
for i in "${!OPS_OP[@]}"; do
    op="${OPS_OP[$i]}"; op_file="${OPS_FILE[$i]}"; dtypes="${OPS_DTYPES[$i]}"; cell="${OPS_CELL[$i]}"
    BEFORE="$ROOT/${cell}_before"; AFTER="$ROOT/${cell}_after"

    echo "########## $cell | $SWITCH=0 before (record) ##########"
    t0=$(date +%s)
    run_side "op=$cell $SWITCH=0" "$BEFORE" 0 "$dtypes" "$op" "$op_file"; rc_before=$?
    el_before=$(( $(date +%s) - t0 ))

    echo "########## $cell | $SWITCH=1 after (replay $BEFORE) ##########"
    t0=$(date +%s)
    if [[ -d "$BEFORE" ]]; then
      run_side "op=$cell $SWITCH=1" "$AFTER" 1 "$dtypes" "$op" "$op_file" "$BEFORE"; rc_after=$?
    else
      echo "!!! side A left no run directory; side B not run"; rc_after=2
    fi
    el_after=$(( $(date +%s) - t0 ))
    rb=$( [[ -d "$BEFORE" ]] && rows_of "$BEFORE" || echo 0 )
    ra=$( [[ -d "$AFTER" ]] && rows_of "$AFTER" || echo 0 )
    read -r kb cb <<< "$(ir_counts "$BEFORE")"
    read -r ka ca <<< "$(ir_counts "$AFTER")"
    cells="$(judge "$rb" "$ra" "$rc_before" "$rc_after" "$BEFORE" "$AFTER")"
    verdict="${cells%%$'\t'*}"; extra="${cells#*$'\t'}"; res="${extra%%$'\t'*}"
    # The caliber columns come from batch_summary.py: CALIBER_FIELDS has one definition.
    cal="$("$PY" "$ZL_ROOT/batch_summary.py" --caliber "$BEFORE" 2>/dev/null)" || cal=""
    # An unreadable caliber keeps its cells ("-"), so the columns after it stay in place.
    [[ -n "$cal" ]] || cal="$(printf '%s' "$CAL_HEADER" | sed 's/[^\t][^\t]*/-/g')"
    dtypes_col="${dtypes// /,}"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
      "$op" "$op_file" "${dtypes_col:-<all>}" "$rb" "$ra" "$kb" "$ka" "$cb" "$ca" \
      "$el_before" "$el_after" "$rc_before" "$rc_after" "$verdict" "$cal" "$extra" >> "$TSV"
    JUDGED+="$cell "
    echo ">>> $cell: $verdict ($(explain "$verdict" "$rc_before" "$rc_after")); results: $res"

    # A verdict that says "not comparable" must not be followed by a range that reads like one.
    case "$verdict" in
      NO_ROWS)   echo "!!! $cell: no comparable measurement, no speedup range"; continue ;;
      NO_TRITON) echo "!!! $cell: nothing compiled through Triton, a speedup range would not be about $SWITCH"; continue ;;
      WRONG_RESULTS)
        echo "!!! $cell: WRONG_RESULTS: $res"
        echo "!!! $cell: the range below times a different answer, not a gain of $SWITCH." ;;
      NO_IR_DIFF)
        # An A/A only when the binary was compared too (as every report judges it): without
        # it the backend may still have emitted other machine code from the same PTX.
        levels="$(printf '%s' "$extra" | cut -f"$LV_COL")"
        if [[ ",$levels," == *",binary,"* ]]; then
          echo ">>> $cell: both sides ran the same generated code; the range below is this machine's"
          echo ">>> NOISE FLOOR for $cell, not a gain of $SWITCH."
        else
          echo ">>> $cell: identical at $levels only, no binary hash on both sides: the range below is"
          echo ">>> not shown to be the noise floor, nor a gain of $SWITCH."
        fi ;;
      VARIANTS_DIFFER)
        # Not the noise floor either: a side may have timed a specialisation the other never ran.
        echo ">>> $cell: the code both sides compiled is the same; a side also compiled variants the other"
        echo ">>> did not ($(printf '%s' "$extra" | cut -f"$VO_COL")): the range below is not a gain of $SWITCH." ;;
    esac
    echo "########## $cell | summary ##########"
    "$PY" "$ZL_ROOT/batch_summary.py" --ab "$BEFORE" "$AFTER" --label "$cell" \
      || echo "!!! summary refused or failed for $cell (rc=$?)"
done

echo "########## screen ##########"
awk -F'\t' 'NR > 1 { printf "  %-12s %-24s kernels %s/%s  cvt %s->%s  rows %s/%s  %ss\n",
     $14, $1 ($3 == "<all>" ? "" : "@" $3), $6, $7, $8, $9, $4, $5, $10 + $11 }' "$TSV" | sort
echo ">>> send only IR_CHANGED@*/BINARY_CHANGED operators to ab_repeat.sh (never WRONG_RESULTS ones)"
# A screen that measured nothing must not end like one that did.
measured="$(awk -F'\t' 'NR > 1 && $14 != "NO_ROWS"' "$TSV" | wc -l)"
if (( measured == 0 )); then
  echo "!!! every operator is NO_ROWS: nothing was measured (read the run.log files under $ROOT)"
fi
printf 'complete\t%s\tjudged %s of %s requested cells\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "$(( $(wc -l < "$TSV") - 1 ))" "${#OPS_CELL[@]}" > "$ROOT/screen.complete.tmp" \
  && mv -f "$ROOT/screen.complete.tmp" "$ROOT/screen.complete"
echo "########## ALL DONE ##########"
end_log
echo ">>> log: $LOG"
echo ">>> screen: $TSV"
(( measured > 0 )) || exit 1
exit 0
