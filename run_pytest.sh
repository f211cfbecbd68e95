#!/usr/bin/env bash
# zl_bench: run one FlagGems benchmark node under the zl_bench plugins and leave a
# run directory (run.log, shapes.yaml, run_identity.json, autotune_records/, ttgir/).
#
#   OP=softmax OP_FILE=softmax FLAGGEMS_DIR=/path/to/FlagGems bash run_pytest.sh
#   TEST_NODE=/path/to/FlagGems/benchmark/test_softmax.py::test_softmax bash run_pytest.sh
#   REPLAY_FROM=runs/softmax_20261203-101500 OP=softmax OP_FILE=softmax bash run_pytest.sh
#
# Every knob is an environment variable (README.md has the full table): OP, OP_FILE,
# TEST_NODE, FLAGGEMS_DIR, SHAPE_FILE, SHAPE_MODE, DTYPES, BENCH_LEVEL, USE_FLAGTUNE,
# REPLAY_FROM, OUT_DIR, ZL_BACKEND, ZL_DEVICE, ZL_DEVICE_SHARE, ZL_ISOLATE_TUNER_CACHE, ZL_ENABLE_*,
# ZL_DIRECT_REPEAT, ZL_SEED, ZL_PYTHON, ZL_RUNS_ROOT, FLAGGEMS_PERF_COLOR.
# An OUT_DIR holding an earlier run keeps that run's files in OUT_DIR/prev-<stamp>-<pid>/.
# Exit status: pytest's own; 2 = a variable has a bad value; 3 = a preflight check
# failed (printed as `!!! PREFLIGHT_FAILED check=<name>`); 128+N = stopped by signal N.
set -uo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# shellcheck source=zl/sh/entry.sh
source "$SCRIPT_DIR/zl/sh/entry.sh" "$@"
die2() { echo "!!! $*" >&2; exit 2; }
[[ -n "$PY" ]] || die2 "no python on PATH (set ZL_PYTHON)"
export PYTHONPATH="$SCRIPT_DIR${PYTHONPATH:+:$PYTHONPATH}"

# ------------------------------------------------------------------ cleanup + signals
# pytest runs under zl.supervise in its own process group with a parent-death signal:
# a SIGTERM here is forwarded to that group, and even a SIGKILL of this script ends it
# (an orphaned pytest once rewrote a rerun's autotune_records/meta.json). Temporaries
# carry this script's pid; a run after a SIGKILL reclaims them (zl.prepare).
CACHE_DIR=""; INLINE_FILE=""; TUNER_CACHE_DIR=""; CHILD_PID=""; TEE_PID=""
stop_child() {
  [[ -n "$CHILD_PID" ]] || return 0
  kill "-${1:-TERM}" -- "-$CHILD_PID" 2>/dev/null || kill "-${1:-TERM}" "$CHILD_PID" 2>/dev/null
  local i
  for ((i = 0; i < 100; i++)); do kill -0 "$CHILD_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$CHILD_PID" 2>/dev/null
  CHILD_PID=""
}
cleanup() {
  stop_child TERM
  if [[ -n "$TEE_PID" ]]; then
    # Closing our end of the pipe lets the tee finish run.log before we return.
    exec 1>&3 2>&4 3>&- 4>&-
    wait "$TEE_PID" 2>/dev/null
  fi
  [[ -n "$CACHE_DIR" ]] && rm -rf "$CACHE_DIR"
  [[ -n "$INLINE_FILE" ]] && rm -f "$INLINE_FILE"
  [[ -n "$TUNER_CACHE_DIR" ]] && rm -rf "$TUNER_CACHE_DIR"
  return 0
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
# One interpreter (zl/prepare.py) validates the variables (exit 2), resolves the node,
# backend and plugin plan, runs the preflight checks (exit 3), claims OUT_DIR (an earlier
# run's files moved to prev-*/), makes the private caches and writes the identity stub.
prepared="$(INLINE_YAML="$INLINE_YAML" "$PY" -m zl.prepare run --owner-pid "$$")" || exit $?
eval "$prepared"

# ------------------------------------------------------------------ colour
FLAGGEMS_PERF_COLOR="${FLAGGEMS_PERF_COLOR:-}"
case "${FLAGGEMS_PERF_COLOR,,}" in
  always) USE_COLOR=1 ;;
  never) USE_COLOR=0 ;;
  *) if [[ -z "${NO_COLOR:-}" && -t 1 ]]; then USE_COLOR=1; else USE_COLOR=0; fi ;;
esac
if (( USE_COLOR )); then
  C_BOLD=$'\e[1m'; C_DIM=$'\e[2m'; C_GREEN=$'\e[32m'; C_RED=$'\e[31m'; C_RESET=$'\e[0m'
  PYTEST_COLOR=(--color=yes); export FLAGGEMS_PERF_COLOR=always
else
  C_BOLD=""; C_DIM=""; C_GREEN=""; C_RED=""; C_RESET=""
  PYTEST_COLOR=(--color=no); export FLAGGEMS_PERF_COLOR=never
fi

# ------------------------------------------------------------------ run
export ZL_DEVICE="${ZL_DEVICE:-}"
export ZL_OP="$OP" ZL_OP_FILE="$OP_FILE" FLAGGEMS_PERF_CURRENT_OP="$OP"
export ZL_BENCH_LEVEL="$BENCH_LEVEL" ZL_SHAPE_MODE="$SHAPE_MODE"
export FLAGGEMS_PERF_TTGIR_DUMP_DIR="$OUT_DIR/ttgir"
export PYTHONUNBUFFERED=1

# Everything from here goes to the console and, ANSI-stripped, to run.log. The tee ignores
# SIGINT so a Ctrl-C still lets it write pytest's last words.
exec 3>&1 4>&2
exec > >(trap '' INT; exec "$PY" -u -m zl.term --tee "$OUT_DIR/run.log") 2>&1
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
  ${SHAPE_ARGS[@]+"${SHAPE_ARGS[@]}"} ${DTYPE_ARGS[@]+"${DTYPE_ARGS[@]}"} \
  --level "$BENCH_LEVEL" --mode kernel &
CHILD_PID=$!
wait "$CHILD_PID"
status=$?
CHILD_PID=""
if (( status == 0 )); then
  echo "${C_GREEN}>>> done. outputs in $OUT_DIR${C_RESET}"
else
  echo "${C_RED}>>> pytest exited $status. outputs in $OUT_DIR${C_RESET}"
fi
exit "$status"
