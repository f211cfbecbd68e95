# Shared prologue of the A/B drivers (ab_repeat.sh, ab_rlc_test.sh, ab_fold_test.sh): usage,
# interpreter, run script, the one IR fingerprint rule and the IR level it judges, OPS parsing,
# the campaign preflight, root claiming, the summary log and the cell runner. Sourced after the
# driver sets ZL_ROOT; one copy so the drivers cannot judge, name or stop cells differently.

# Nothing a user types is glob-expanded: OPS='*' once ran file names as operators.
set -f

# shellcheck source=entry.sh
source "$ZL_ROOT/zl/sh/entry.sh" "$@"
# shellcheck source=records.sh
source "$ZL_ROOT/zl/sh/records.sh"
export ZL_PYTHON="$PY"
RUN_PYTEST="${ZL_RUN_PYTEST:-$ZL_ROOT/run_pytest.sh}"
# shellcheck source=ir_fingerprint.sh
source "$ZL_ROOT/zl/sh/ir_fingerprint.sh"

die2() { echo "!!! $*" >&2; exit 2; }

# IR_LEVEL: an extra level the runs dump as files (ZL_IR_LEVELS), for reading. The verdict
# (ir_verdict) compares every level each run recorded in ir_fingerprints.json whatever it
# says: DISABLE_LLVM_OPT once read NO_IR_DIFF because only TTGIR was compared by default.
IR_LEVEL="${IR_LEVEL:-ttgir}"
[[ "$IR_LEVEL" =~ ^[a-z][a-z0-9_]*$ ]] || die2 "IR_LEVEL is not an IR level name: '$IR_LEVEL'"
if [[ "$IR_LEVEL" != ttgir && ",${ZL_IR_LEVELS:-}," != *",$IR_LEVEL,"* ]]; then
  export ZL_IR_LEVELS="${ZL_IR_LEVELS:+$ZL_IR_LEVELS,}$IR_LEVEL"
fi

# `results<TAB>results_torch` of side B vs side A (zl.results.compare).
results_cells() {
  local cells
  cells="$("$PY" -m zl.results.compare "$1" "$2" --tsv 2>/dev/null)"
  if [[ -z "$cells" ]]; then cells=$'n/a (results unreadable)\tn/a'; fi
  printf '%s' "$cells"
}

# The drivers' variable checks, one wording: exit 2 with the variable's name and value.
require_var_name() { [[ "$2" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die2 "$1 is not a variable name: '$2'"; }
require_positive_int() { [[ "$2" =~ ^[1-9][0-9]{0,8}$ ]] || die2 "$1 must be a positive integer (got: $2)"; }
# An operator name becomes a directory name and a pytest node: no '/', no '..', no glob.
valid_name() { [[ "$1" =~ ^[A-Za-z0-9_.@-]+$ && "$1" != *..* ]]; }

# Directory / status name of one OPS entry: dtypes are part of it, so relu:relu:float16 and
# relu:relu:float32 never share cells or a report.
cell_name() {   # op dtypes(space separated)
  if [[ -n "$2" ]]; then printf '%s@%s' "$1" "${2// /+}"; else printf '%s' "$1"; fi
}

# parse_ops: every OPS entry (OP | OP:OP_FILE | OP:OP_FILE:DTYPES, dtypes comma separated) is
# checked before the first cell; a bad or repeated entry exits 2. Fills the arrays OPS_OP,
# OPS_FILE, OPS_DTYPES (space separated), OPS_CELL. An entry without dtypes means the
# operator's own set, never an exported DTYPES: one global DTYPES=float16 once judged fft
# (complex64 only) "unrunnable".
parse_ops() {
  local entry op op_file dtypes_csv extra dtypes dt cell seen=" "
  local -a entries
  OPS_OP=(); OPS_FILE=(); OPS_DTYPES=(); OPS_CELL=()
  read -r -a entries <<< "$OPS"
  (( ${#entries[@]} > 0 )) || die2 "OPS is empty"
  for entry in "${entries[@]}"; do
    IFS=: read -r op op_file dtypes_csv extra <<< "$entry"
    [[ -n "$op" && -z "${extra:-}" ]] || die2 "bad OPS entry '$entry' (OP, OP:OP_FILE or OP:OP_FILE:DTYPES)"
    op_file="${op_file:-$op}"
    valid_name "$op" && valid_name "$op_file" \
      || die2 "bad OPS entry '$entry': operator names are [A-Za-z0-9_.@-], without '/' or '..'"
    dtypes="${dtypes_csv//,/ }"
    for dt in $dtypes; do
      [[ "$dt" =~ ^[A-Za-z0-9_]+$ ]] || die2 "bad OPS entry '$entry': '$dt' is not a dtype name"
    done
    dtypes="$(echo $dtypes)"
    cell="$(cell_name "$op" "$dtypes")"
    [[ "$seen" != *" $cell "* ]] || die2 "OPS names the cell '$cell' twice"
    seen+="$cell "
    OPS_OP+=("$op"); OPS_FILE+=("$op_file"); OPS_DTYPES+=("$dtypes"); OPS_CELL+=("$cell")
  done
  if [[ -n "${DTYPES:-}" ]]; then
    echo ">>> DTYPES=$DTYPES is ignored by the drivers: give dtypes per OPS entry (OP:OP_FILE:DTYPES)" >&2
  fi
}

# campaign_preflight DRIVER: imports triton and flag_gems once, for real, in the interpreter
# the cells use (exit 3 `!!! PREFLIGHT_FAILED check=interpreter`), reads the drivers' on/off
# variables through zl.switches (exit 2), and sets ZL_CAMPAIGN_ID (written into every cell's
# run_identity.json as campaign_id) and the marker names (M_CELL_TIMEOUT, M_CELL_KILLED ...).
# The drivers isolate the tuner cache unless told ZL_ISOLATE_TUNER_CACHE=0.
campaign_preflight() {
  zl_read_records < <("$PY" -m zl.prepare campaign --driver "$1"; printf 'ZL_RC=%s\0' "$?") || exit $?
}

# claim_root PREFIX: sets ROOT. With AB_ROOT: that directory, claimed by creating
# campaign.id exclusively; a root that holds another campaign (finished or running) is
# refused with exit 2 and never merged. Without: <runs>/<PREFIX>_<stamp>, claimed with mkdir
# and stepping to -2, -3 ... (two drivers started in the same second got one root once).
claim_root() {
  local base="${ZL_RUNS_ROOT:-$ZL_ROOT/runs}" stem cand n=1 f
  if [[ -n "${AB_ROOT:-}" ]]; then
    mkdir -p -- "$AB_ROOT" || die2 "cannot create AB_ROOT=$AB_ROOT"
    ROOT="$(cd -- "$AB_ROOT" && pwd)"
  else
    mkdir -p -- "$base" || die2 "cannot create $base"
    stem="$base/${1}_$(date +%Y%m%d-%H%M%S)"; cand="$stem"
    until mkdir -- "$cand" 2>/dev/null; do
      n=$((n + 1)); cand="$stem-$n"
      (( n < 1000 )) || die2 "cannot claim a campaign root under $base"
    done
    ROOT="$(cd -- "$cand" && pwd)"
  fi
  if ! (set -C; printf '%s\n' "$ZL_CAMPAIGN_ID" > "$ROOT/campaign.id") 2>/dev/null; then
    die2 "AB_ROOT=$ROOT already holds campaign $(head -c 120 "$ROOT/campaign.id" 2>/dev/null); a second campaign never merges into another's root: choose a new AB_ROOT or leave it unset"
  fi
  for f in status.tsv screen.tsv summary.log; do
    if [[ -e "$ROOT/$f" ]]; then
      rm -f "$ROOT/campaign.id"
      die2 "AB_ROOT=$ROOT already holds an earlier campaign ($f); choose a new AB_ROOT or leave it unset"
    fi
  done
}

# Everything the driver prints from here goes to the console and to $LOG (ANSI stripped at the
# end). The driver's own process writes it, not a pipeline subshell, so its traps see signals.
TEE_PID=""
start_log() {
  exec 3>&1 4>&2
  exec > >(trap '' INT; exec tee "$LOG") 2>&1
  TEE_PID=$!
}
end_log() {
  [[ -n "$TEE_PID" ]] || return 0
  exec 1>&3 2>&4 3>&- 4>&-
  wait "$TEE_PID" 2>/dev/null
  TEE_PID=""
  sed -i -E $'s/\x1b\\[[0-9;?]*[A-Za-z]//g' "$LOG"
}

# run_cell_proc LABEL VAR=VALUE...: one run_pytest.sh under CELL_TIMEOUT, tied to this driver
# (zl.supervise: a signal here stops it, a SIGKILL here takes it along). Prints
# `!!! CELL_TIMEOUT` when the timeout cut it off (124, or 137 after the -k grace) and
# `!!! CELL_KILLED signal=N` when something else killed it; returns the cell's status.
CELL_PID=""
run_cell_proc() {
  local label="$1" start=$SECONDS rc; shift
  "$PY" -m zl.supervise --parent "$$" -- \
    timeout -k 30 "$CELL_TIMEOUT" env "$@" bash "$RUN_PYTEST" &
  CELL_PID=$!
  wait "$CELL_PID"; rc=$?
  CELL_PID=""
  if (( rc == 124 || (rc == 137 && SECONDS - start >= CELL_TIMEOUT) )); then
    echo "!!! $M_CELL_TIMEOUT ${CELL_TIMEOUT}s $label rc=$rc"
  elif (( rc > 128 )); then
    echo "!!! $M_CELL_KILLED signal=$((rc - 128)) $label rc=$rc"
  fi
  return "$rc"
}
stop_pid_group() {   # PID: TERM its group, give it 10 s, then KILL
  local pid="$1" i
  [[ -n "$pid" ]] || return 0
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}
# A signal stops the whole campaign: the running cell, the driver's helpers, the rest of the
# cells. DRIVER_STOP_HOOK (a function name) runs first, e.g. to stop telemetry.
on_driver_signal() {   # NAME NUMBER
  trap - "$1"
  echo "!!! $(basename "$0"): SIG$1 received; campaign stopped, remaining cells not run"
  stop_pid_group "$CELL_PID"; CELL_PID=""
  [[ -n "${DRIVER_STOP_HOOK:-}" ]] && "$DRIVER_STOP_HOOK"
  exit $((128 + $2))
}
trap 'on_driver_signal TERM 15' TERM
trap 'on_driver_signal INT 2' INT
trap 'on_driver_signal HUP 1' HUP
