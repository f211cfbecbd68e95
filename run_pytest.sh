#!/usr/bin/env bash
# zl_bench: run one FlagGems benchmark node under the zl_bench plugins and leave a
# run directory (run.log, run_config.json, run_identity.json, shapes.yaml, autotune_records/,
# ttgir/, results/).
#
# Every knob is an environment variable; any argument but --help / -h is refused (exit 2).
# An OUT_DIR holding an earlier run keeps that run's files in OUT_DIR/prev-<stamp>-<pid>/.
# OUT_DIR is locked for the whole run: a second run on it exits 2 naming the holder's pid.
#
# Examples:
#   OP=softmax OP_FILE=softmax FLAGGEMS_DIR=/path/to/FlagGems bash run_pytest.sh
#   TEST_NODE=/path/to/FlagGems/benchmark/test_softmax.py::test_softmax bash run_pytest.sh
#   REPLAY_FROM=runs/softmax_20261203-101500 OP=softmax OP_FILE=softmax bash run_pytest.sh
#
# Variables:
#   README.md, "Variables", has the full table with defaults and checks:
#   OP, OP_FILE, TEST_NODE, FLAGGEMS_DIR, SHAPE_FILE, SHAPE_MODE, DTYPES, ZL_DTYPE_FALLBACK,
#   BENCH_LEVEL, USE_FLAGTUNE, REPLAY_FROM, OUT_DIR, TMPDIR, ZL_BACKEND, ZL_DEVICE, ZL_DEVICE_SHARE,
#   ZL_ISOLATE_TUNER_CACHE, ZL_ENABLE_*, ZL_DIRECT_REPEAT, ZL_L2, ZL_COLD_CLOCK,
#   ZL_GRAPH_WARMUP_MS, ZL_IR_LEVELS, ZL_SEED, ZL_PYTHON, ZL_RUNS_ROOT, FLAGGEMS_PERF_COLOR.
#
# Outputs:
#   OUT_DIR (default runs/<op>_<YYYYmmdd-HHMMSS>): run.log (the console, ANSI stripped),
#   run_config.json, run_identity.json (the caliber), shapes.yaml, shapes.source.yaml,
#   autotune_records/, ttgir/, results/; README.md, "The run directory", lists them.
#
# Exit codes:
#   0      ok (pytest's status)
#   1      a test failed (pytest's status; a results/ write that fails on a full disk included)
#   2      a variable has a bad value (TMPDIR included), an argument was given, or OUT_DIR is
#          locked by another run (`!!! OUT_DIR_BUSY`)
#   3      a preflight check failed (`!!! PREFLIGHT_FAILED check=<name> detail=...`)
#   4      a bad option or variable word caught inside pytest (pytest's usage error)
#   5      no tests collected (pytest's status)
#   6      OUT_DIR cannot be written (full disk, read-only, no permission:
#          `!!! OUT_DIR_WRITE_FAILED`), at the start or when run.log fails mid-run
#   128+N  stopped by signal N
set -uo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# shellcheck source=zl/sh/entry.sh
source "$SCRIPT_DIR/zl/sh/entry.sh" "$@"
# shellcheck source=zl/sh/records.sh
source "$SCRIPT_DIR/zl/sh/records.sh"
die2() { echo "!!! $*" >&2; exit 2; }
[[ -n "$PY" ]] || die2 "no python on PATH (set ZL_PYTHON)"

# ------------------------------------------------------------------ cleanup + signals
# pytest runs under zl.supervise in its own process group with a parent-death signal:
# a SIGTERM here is forwarded to that group, and even a SIGKILL of this script ends it
# (an orphaned pytest once rewrote a rerun's autotune_records/meta.json). Temporaries
# carry this script's pid; a run after a SIGKILL reclaims them (zl.prepare).
CACHE_DIR=""; INLINE_FILE=""; TUNER_CACHE_DIR=""; CHILD_PID=""; TEE_PID=""
OUT_DIR_CREATED=0; OWNED=0; LOCKED=0; PREPARED=0
stop_child() {
  [[ -n "$CHILD_PID" ]] || return 0
  kill "-${1:-TERM}" -- "-$CHILD_PID" 2>/dev/null || kill "-${1:-TERM}" "$CHILD_PID" 2>/dev/null
  local i
  for ((i = 0; i < 100; i++)); do kill -0 "$CHILD_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$CHILD_PID" 2>/dev/null
  CHILD_PID=""
}
cleanup() {
  local status=$? tee_status=0
  stop_child TERM
  if [[ -n "$TEE_PID" ]]; then
    # Closing our end of the pipe lets the tee finish run.log before we return.
    exec 1>&3 2>&4 3>&- 4>&-
    wait "$TEE_PID" 2>/dev/null; tee_status=$?
    TEE_PID=""
  fi
  [[ -n "$CACHE_DIR" ]] && rm -rf "$CACHE_DIR"
  [[ -n "$INLINE_FILE" ]] && rm -f "$INLINE_FILE"
  [[ -n "$TUNER_CACHE_DIR" ]] && rm -rf "$TUNER_CACHE_DIR"
  # A run stopped before pytest leaves no directory it created itself (the lock file was
  # the only thing in it; prepare removed what it had made).
  if (( OWNED && OUT_DIR_CREATED && ! PREPARED )); then
    rm -f "$OUT_DIR/.zl.lock"; rmdir "$OUT_DIR" 2>/dev/null
  elif (( LOCKED )); then
    : 2>/dev/null > "$OUT_DIR/.zl.lock"   # no pid of a process that no longer holds it
  fi
  if (( tee_status == 6 || status == 6 )) && (( PREPARED )); then
    log_write_failed
    (( status < 128 )) && exit 6
  fi
  return 0
}
# run.log could not be written: the directory does not hold this run. Named on the console,
# run.log set aside as run.log.write-failed (no reader takes it for a whole log) and the
# identity marked, each as far as the disk still allows.
log_write_failed() {
  echo "!!! run_pytest.sh: OUT_DIR=$OUT_DIR could not be written (see OUT_DIR_WRITE_FAILED above); exit 6, this is not a run" >&2
  [[ -e "$OUT_DIR/run.log" ]] && mv -f "$OUT_DIR/run.log" "$OUT_DIR/run.log.write-failed" 2>/dev/null
  "$PY" -m zl.identity "$OUT_DIR" --set out_dir_write_failed=run.log >/dev/null 2>&1
  return 0
}
on_log_failure() {
  trap - USR1
  echo "!!! run_pytest.sh: run.log cannot be written; stopping pytest"
  stop_child TERM
  exit 6
}
on_signal() {   # NAME NUMBER
  trap - "$1"
  echo "!!! run_pytest.sh: SIG$1 received; stopping pytest" >&2
  stop_child "$1"
  exit $((128 + $2))
}
trap cleanup EXIT
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT
trap 'on_signal HUP 1' HUP
trap on_log_failure USR1

# Built-in shapes, used when neither SHAPE_FILE nor TEST_NODE says otherwise.
# Top-level keys are FlagGems op_name values (yaml lookup: op_name, then class chain).
read -r -d '' INLINE_YAML <<'YAML' || true
softmax:
  shapes:
    - [1024, 1024]
    - [4096, 4096]
    - [64, 512, 512]
  shape_desc: "M, N"
YAML

# ------------------------------------------------------------------ prepare
# zl/prepare.py in two steps around the OUT_DIR lock. `claim` validates the variables
# (exit 2), resolves the node, backend and plugin plan, runs the preflight checks (exit 3),
# checks TMPDIR (exit 2) and creates OUT_DIR, changing nothing inside an existing one.
# Its output is NUL-terminated records (zl/sh/records.sh), read as data, never run as code.
PREP_NOTES=(); PLUGINS=(); PYTEST_ARGS=()
zl_read_records < <("$PY" -m zl.prepare claim; printf 'ZL_RC=%s\0' "$?") || exit $?
# One run per OUT_DIR: two runs on one directory both exited 0 and left it mixed (the second
# one's log and identity, the first one's shapes, results and records). The flock belongs to
# this shell's descriptor and the children that inherit it (the tee, pytest's supervisor):
# it ends when they do, however they die; no stale lock after kill -9 (zl.locks).
if ! { exec {LOCK_FD}<>"$OUT_DIR/.zl.lock"; } 2>/dev/null; then
  echo "!!! OUT_DIR_WRITE_FAILED out=$OUT_DIR detail='cannot create $OUT_DIR/.zl.lock': OUT_DIR cannot take this run's files (full disk, read-only or no permission); nothing was run" >&2
  (( OUT_DIR_CREATED )) && rmdir "$OUT_DIR" 2>/dev/null
  exit 6
fi
lock_msg="$("$PY" -m zl.locks hold "$LOCK_FD" "$OUT_DIR/.zl.lock" --pid "$$" 2>&1)"; lock_rc=$?
case "$lock_rc" in
  0) LOCKED=1; OWNED=1 ;;
  1) echo "!!! OUT_DIR_BUSY out=$OUT_DIR: another run is writing this directory (${lock_msg#zl.locks: }); a run directory describes one run: wait for it to end or choose another OUT_DIR" >&2
     exit 2 ;;
  *) OWNED=1; PREP_NOTES+=("!!! OUT_DIR lock unavailable (${lock_msg#zl.locks: }): a second run on this OUT_DIR would not be refused") ;;
esac

# ------------------------------------------------------------------ colour
# Chosen here, where the console is known (claim checked the word), and recorded in the run
# configuration; run.log is always plain.
case "${FLAGGEMS_PERF_COLOR:-}" in
  [Aa][Ll][Ww][Aa][Yy][Ss]) USE_COLOR=1 ;;
  [Nn][Ee][Vv][Ee][Rr]) USE_COLOR=0 ;;
  *) if [[ -z "${NO_COLOR:-}" && -t 1 ]]; then USE_COLOR=1; else USE_COLOR=0; fi ;;
esac
if (( USE_COLOR )); then
  C_BOLD=$'\e[1m'; C_DIM=$'\e[2m'; C_GREEN=$'\e[32m'; C_RED=$'\e[31m'; C_RESET=$'\e[0m'
  PYTEST_COLOR=(--color=yes); COLOR_WORD=always
else
  C_BOLD=""; C_DIM=""; C_GREEN=""; C_RED=""; C_RESET=""
  PYTEST_COLOR=(--color=no); COLOR_WORD=never
fi

# `run` (OUT_DIR ours now) makes the private caches, checks OUT_DIR takes a write (exit 6),
# moves an earlier run's files to prev-*/, writes the identity stub and the run configuration
# (OUT_DIR/run_config.json); its `env.` records are the environment pytest gets
# (zl.childenv), derived from that configuration.
zl_read_records < <(OUT_DIR="$OUT_DIR" INLINE_YAML="$INLINE_YAML" "$PY" -m zl.prepare run --owner-pid "$$" \
                      --color "$COLOR_WORD"; printf 'ZL_RC=%s\0' "$?") || exit $?
PREPARED=1

# ------------------------------------------------------------------ run

# Everything from here goes to the console and, ANSI-stripped, to run.log. The tee ignores
# SIGINT so a Ctrl-C still lets it write pytest's last words.
exec 3>&1 4>&2
exec > >(trap '' INT; exec "$PY" -u -m zl.term --tee "$OUT_DIR/run.log" --notify "$$") 2>&1
TEE_PID=$!

for note in ${PREP_NOTES[@]+"${PREP_NOTES[@]}"}; do echo "$note"; done
echo "${C_BOLD}>>> op=$OP  backend=$ZL_BACKEND  mode=$MODE_DESC  USE_FLAGTUNE=$USE_FLAGTUNE  shape=$SHAPE_MODE  level=$BENCH_LEVEL  tuner=$TUNER_DESC${C_RESET}"
echo "${C_DIM}>>> node=$TEST_FILE${C_RESET}"
echo "${C_DIM}>>> out=$OUT_DIR${C_RESET}"
echo ">>> plugins: ${PLUGINS[*]}"
# From the checkout root, like upstream: its pytest.ini silences the operator markers and
# `benchmark` imports as a package.
"$PY" -m zl.supervise --parent "$$" --cwd "$FLAGGEMS_DIR" -- \
  "$PY" -u -m pytest -s "$TEST_FILE" "${PLUGINS[@]}" "${PYTEST_COLOR[@]}" \
  "${PYTEST_ARGS[@]}" --mode kernel &
CHILD_PID=$!
wait "$CHILD_PID"
status=$?
CHILD_PID=""
# CPU of the run's processes waited for so far (pytest, its supervisor, the preparation
# steps; not the log tee) for costs.tsv: with several cases per GPU the host's cores, not the
# GPU, may be what runs out. Read from this shell's own /proc stat (`read` forks nothing; a
# `$(times)` would report a subshell's zero): cutime and cstime, in Linux's USER_HZ of 100.
if read -r PROC_STAT < "/proc/$$/stat" 2>/dev/null; then
  read -ra PROC_FIELDS <<< "${PROC_STAT##*) }"
  if [[ "${PROC_FIELDS[13]:-}" =~ ^[0-9]+$ && "${PROC_FIELDS[14]:-}" =~ ^[0-9]+$ ]]; then
    printf "[run] the run's processes used CPU: user %d.%02d s sys %d.%02d s\n" \
      $((PROC_FIELDS[13] / 100)) $((PROC_FIELDS[13] % 100)) $((PROC_FIELDS[14] / 100)) $((PROC_FIELDS[14] % 100))
  fi
fi
if (( status == 0 )); then
  echo "${C_GREEN}>>> done. outputs in $OUT_DIR${C_RESET}"
else
  echo "${C_RED}>>> pytest exited $status. outputs in $OUT_DIR${C_RESET}"
fi
exit "$status"
