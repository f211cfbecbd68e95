#!/usr/bin/env bash
# zl_bench: run one FlagGems benchmark node under the zl_bench plugins and leave a
# run directory (run.log, shapes.yaml, run_identity.json, autotune_records/, ttgir/).
#
#   OP=softmax OP_FILE=softmax FLAGGEMS_DIR=/path/to/FlagGems bash run_pytest.sh
#
# Every knob is an environment variable; README.md has the full table.
# Exit status: pytest's own; 2 = a variable has a bad value; 3 = a preflight check
# failed (printed as `!!! PREFLIGHT_FAILED check=<name>`).
set -uo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${ZL_PYTHON:-$(command -v python || command -v python3)}"

die2() { echo "!!! $*" >&2; exit 2; }

# ------------------------------------------------------------------ variables
TEST_NODE="${TEST_NODE:-${ZL_TEST_NODE:-}}"
# softmax is in every FlagGems checkout and needs no third-party baseline (the
# seed's MoE default needs vLLM, so a fresh machine could not run the default).
OP="${OP:-softmax}"
OP_FILE="${OP_FILE:-softmax}"
FLAGGEMS_DIR="${FLAGGEMS_DIR:-/workspace/dev/FlagGems}"
SHAPE_FILE="${SHAPE_FILE:-}"
SHAPE_MODE="${SHAPE_MODE:-}"
DTYPES="${DTYPES:-}"
BENCH_LEVEL="${BENCH_LEVEL:-core}"
USE_FLAGTUNE="${USE_FLAGTUNE:-0}"
REPLAY_FROM="${REPLAY_FROM:-}"
OUT_DIR="${OUT_DIR:-}"
FLAGGEMS_PERF_COLOR="${FLAGGEMS_PERF_COLOR:-}"
ZL_BACKEND="${ZL_BACKEND:-cuda}"
ZL_DEVICE="${ZL_DEVICE:-}"
ZL_ISOLATE_TUNER_CACHE="${ZL_ISOLATE_TUNER_CACHE:-0}"

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

# `--level comprehensive` merges each subclass's set_more_shapes() (mm: 5 -> 29
# shapes) and doubles BLAS cases; the two levels are different measurements.
case "$BENCH_LEVEL" in
  core|comprehensive) ;;
  *) die2 "BENCH_LEVEL must be core or comprehensive (got: $BENCH_LEVEL)" ;;
esac
case "$USE_FLAGTUNE" in 0|1) ;; *) die2 "USE_FLAGTUNE must be 0 or 1 (got: $USE_FLAGTUNE)" ;; esac
case "$ZL_ISOLATE_TUNER_CACHE" in 0|1) ;; *) die2 "ZL_ISOLATE_TUNER_CACHE must be 0 or 1 (got: $ZL_ISOLATE_TUNER_CACHE)" ;; esac
case "${FLAGGEMS_PERF_COLOR,,}" in ""|always|never) ;; *) die2 "FLAGGEMS_PERF_COLOR must be always, never or empty (got: $FLAGGEMS_PERF_COLOR)" ;; esac
[[ -n "$PY" ]] || die2 "no python on PATH (set ZL_PYTHON)"
AUTOTUNE_SWITCH="${ZL_ENABLE_AUTOTUNE:-1}"
AUTOTUNE_ON=1
case "${AUTOTUNE_SWITCH,,}" in 0|false|no|off) AUTOTUNE_ON=0 ;; esac   # plugin_plan.py's words
if (( ! AUTOTUNE_ON )) && [[ -n "$REPLAY_FROM" ]]; then
  die2 "REPLAY_FROM needs the autotune plugin, but ZL_ENABLE_AUTOTUNE=$AUTOTUNE_SWITCH"
fi

export PYTHONPATH="$SCRIPT_DIR${PYTHONPATH:+:$PYTHONPATH}"

# Resolve node / op / shapes in one place (zl/flaggems.py) so every driver agrees.
resolved="$("$PY" -m zl.flaggems --emit-shell \
  --parse-node "$TEST_NODE" --op "$OP" --op-file "$OP_FILE" \
  --flaggems-dir "$FLAGGEMS_DIR" --shape-file "$SHAPE_FILE" --shape-mode "$SHAPE_MODE")" || exit 2
eval "$resolved"

# Backend and plugin plan; an unknown backend name fails closed here (exit 2).
# One probe gives the canonical name, FlagGems vendor and visibility variable.
backend_facts="$("$PY" -c 'import sys; from zl.backends import get_backend, UnknownBackendError
try:
    b = get_backend(sys.argv[1])
except UnknownBackendError as exc:
    print(f"!!! {exc}", file=sys.stderr); sys.exit(2)
print(b.name, b.flaggems_vendor or "-", b.visibility_env_keys[0] if b.visibility_env_keys else "-")' "$ZL_BACKEND")" \
  || exit 2
read -r ZL_BACKEND VENDOR_DEFAULT VIS_KEY <<< "$backend_facts"
[[ "$VENDOR_DEFAULT" == "-" ]] && VENDOR_DEFAULT=""
[[ "$VIS_KEY" == "-" ]] && VIS_KEY=""
plan="$("$PY" "$SCRIPT_DIR/plugin_plan.py" --backend "$ZL_BACKEND" --pytest-args)" || exit 2
read -r -a PLUGINS <<< "$plan"
(( ${#PLUGINS[@]} > 0 )) || die2 "plugin_plan.py produced no plugins"
# ZL_DEVICE pins the card through the backend's own visibility variable, unless the
# caller already chose one (run_batch binds cards that way and sets both).
if [[ -n "$ZL_DEVICE" && -n "$VIS_KEY" && -z "${!VIS_KEY:-}" ]]; then
  export "$VIS_KEY=$ZL_DEVICE"
fi

# ------------------------------------------------------------------ preflight
# Silent failures point the wrong way: a missing benchmark dir means its conftest
# (which registers --level/--mode) never loads and pytest says "unrecognized
# arguments", which reads like a version problem. Each check names itself.
preflight() {
  local check="$1" detail="$2"; shift 2
  if ! "$@"; then
    echo "!!! PREFLIGHT_FAILED check=$check detail='$detail'" >&2
    exit 3
  fi
}
BENCH_FILE="${TEST_FILE%%::*}"
preflight flaggems_dir "FlagGems directory exists: $FLAGGEMS_DIR" test -d "$FLAGGEMS_DIR"
# Only the file half of the node: pytest itself reports a missing function clearly.
preflight benchmark_file "benchmark file exists: $BENCH_FILE" test -f "$BENCH_FILE"
if [[ -n "$SHAPE_FILE" ]]; then
  preflight shape_file "shape file exists: $SHAPE_FILE" test -f "$SHAPE_FILE"
fi
if [[ -n "$REPLAY_FROM" ]]; then
  preflight replay_from "replay run directory exists: $REPLAY_FROM" test -d "$REPLAY_FROM"
fi
# The interpreter, not only the paths: triton usually comes from a compiler build on
# PYTHONPATH and flag_gems from a checkout, so a shell that reaches the right files
# can still run the wrong Python. Unchecked, this shows up as one `pytest exit 4`
# per cell, and a campaign once burnt 12 cells + 160 runs that way.
# The check locates the packages (importlib find_spec) instead of importing them:
# `import triton, flag_gems` cost ~10 s per run (9.5 s on a CPU box; on the H200 a
# run took ~40 s wall for ~15 s of pytest), paid again by pytest a moment later. A
# package that is found but breaks on import still fails loudly, inside pytest.
import_check() {
  "$PY" -c 'import importlib.util as u, sys
sys.exit(0 if all(u.find_spec(m) is not None for m in ("triton", "flag_gems")) else 1)' \
    >/dev/null 2>&1
}
preflight interpreter "interpreter finds triton + flag_gems ($PY)" import_check

# ------------------------------------------------------------------ run directory
# Timestamps are to the second, so two runs started together would collide: claim
# the directory with a plain mkdir (fails if it exists) and step to -2, -3, ...
if [[ -n "$OUT_DIR" ]]; then
  mkdir -p "$OUT_DIR" || die2 "cannot create OUT_DIR=$OUT_DIR"
else
  RUNS_ROOT="${ZL_RUNS_ROOT:-$SCRIPT_DIR/runs}"
  mkdir -p "$RUNS_ROOT" || die2 "cannot create $RUNS_ROOT"
  base="$RUNS_ROOT/${OP}_$(date +%Y%m%d-%H%M%S)"
  OUT_DIR="$base"; n=1
  until mkdir "$OUT_DIR" 2>/dev/null; do
    n=$((n + 1)); OUT_DIR="$base-$n"
    (( n < 1000 )) || die2 "cannot claim a run directory under $RUNS_ROOT"
  done
fi
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
mkdir -p "$OUT_DIR/autotune_records" "$OUT_DIR/ttgir"
# A rerun into the same OUT_DIR (driver retry) keeps the earlier log.
if [[ -f "$OUT_DIR/run.log" ]]; then
  mv "$OUT_DIR/run.log" "$OUT_DIR/run.log.prev-$(date +%Y%m%d-%H%M%S)-$$"
fi

CACHE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/zl_triton_cache.XXXXXX")"
INLINE_FILE=""
TUNER_CACHE_DIR=""
cleanup() {
  rm -rf "$CACHE_DIR"
  [[ -n "$INLINE_FILE" ]] && rm -f "$INLINE_FILE"
  [[ -n "$TUNER_CACHE_DIR" ]] && rm -rf "$TUNER_CACHE_DIR"
  return 0
}
trap cleanup EXIT

# ------------------------------------------------------------------ shapes
SHAPE_ARGS=()
case "$SHAPE_MODE" in
  upstream)
    # FlagGems' own set at $BENCH_LEVEL; the shape plugin rewrites shapes.yaml with
    # what each benchmark really used.
    if [[ -f "$FLAGGEMS_DIR/benchmark/core_shapes.yaml" ]]; then
      cp -f "$FLAGGEMS_DIR/benchmark/core_shapes.yaml" "$OUT_DIR/shapes.yaml"
    else
      printf 'source: upstream\nlevel: %s\n' "$BENCH_LEVEL" > "$OUT_DIR/shapes.yaml"
    fi
    ZL_SHAPE_FILE="" ;;
  inline)
    INLINE_FILE="$(mktemp "${TMPDIR:-/tmp}/zl_inline_shapes.XXXXXX.yaml")"
    # Upstream's --shape_file replaces core_shapes.yaml instead of merging, so an op
    # the inline yaml does not list would fall to DEFAULT_SHAPES (seen on the H200:
    # mm got 1-D shapes and died with "expected 4, got 1"). Lay the inline entries
    # over upstream's own file so unlisted ops keep upstream's shapes.
    INLINE_YAML="$INLINE_YAML" "$PY" - "$FLAGGEMS_DIR/benchmark/core_shapes.yaml" "$INLINE_FILE" <<'PY' \
      || die2 "cannot build the inline shape yaml"
import os, sys, yaml
base = {}
if os.path.isfile(sys.argv[1]):
    with open(sys.argv[1], encoding="utf-8") as handle:
        base = yaml.safe_load(handle) or {}
base.update(yaml.safe_load(os.environ["INLINE_YAML"]) or {})
with open(sys.argv[2], "w", encoding="utf-8") as handle:
    yaml.safe_dump(base, handle, default_flow_style=None, sort_keys=False)
PY
    cp -f "$INLINE_FILE" "$OUT_DIR/shapes.yaml"
    SHAPE_ARGS=(--shape_file "$INLINE_FILE"); ZL_SHAPE_FILE="$INLINE_FILE" ;;
  file)
    SHAPE_FILE="$(cd "$(dirname "$SHAPE_FILE")" && pwd)/$(basename "$SHAPE_FILE")"
    cp -f "$SHAPE_FILE" "$OUT_DIR/shapes.yaml"
    SHAPE_ARGS=(--shape_file "$SHAPE_FILE"); ZL_SHAPE_FILE="$SHAPE_FILE" ;;
esac

DTYPE_ARGS=()
for dt in $DTYPES; do DTYPE_ARGS+=(--dtypes "$dt"); done

# ------------------------------------------------------------------ autotune + tuner cache
if (( ! AUTOTUNE_ON )); then
  # Without the plugin nothing pins or records configs: say so in the caliber
  # instead of letting the stub claim record/replay.
  unset FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR
  MODE_DESC=off
elif [[ -n "$REPLAY_FROM" ]]; then
  REPLAY_FROM="$(cd "$REPLAY_FROM" && pwd)"
  export FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR="$REPLAY_FROM/autotune_records"
  unset FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR
  MODE_DESC=replay
else
  export FLAGGEMS_PERF_AUTOTUNE_RECORD_DIR="$OUT_DIR/autotune_records"
  unset FLAGGEMS_PERF_AUTOTUNE_REPLAY_DIR
  MODE_DESC=record
fi

# FlagGems keeps LibTuner winners in a sqlite store that outlives runs. Shared, the
# side that runs first hands its winners to the other (mm's compiled variants fell
# 945 -> 33 from that alone). Isolated: a private store, deleted afterwards (the
# picks themselves are kept in autotune_records/).
if [[ "$ZL_ISOLATE_TUNER_CACHE" == "1" ]]; then
  TUNER_CACHE_DIR="$OUT_DIR/.flaggems_cache"
  rm -rf "$TUNER_CACHE_DIR"; mkdir -p "$TUNER_CACHE_DIR/config_cache"
  export FLAGGEMS_CACHE_DIR="$TUNER_CACHE_DIR"
  export FLAGGEMS_DB_URL="sqlite:///$TUNER_CACHE_DIR/config_cache/zl_isolated.db"
  TUNER_DESC=isolated
else
  if [[ -n "${FLAGGEMS_DB_URL:-}" ]]; then
    TUNER_DESC="shared(${FLAGGEMS_DB_URL})"
  else
    TUNER_DESC="shared(${FLAGGEMS_CACHE_DIR:-$HOME/.flaggems})"
  fi
fi

# ------------------------------------------------------------------ identity stub
# Only when FLAGGEMS_DIR is itself a git checkout: an exported tree inside another
# repository would otherwise report that repository's commit (or the word HEAD).
FLAGGEMS_COMMIT="$("$PY" -m zl.flaggems --commit-of "$FLAGGEMS_DIR")"
"$PY" -m zl.identity "$OUT_DIR" \
  --set schema_version=1 --set provider=flaggems \
  --set "op=$OP" --set "op_file=$OP_FILE" --set "test_file=$TEST_FILE" \
  --set "flaggems_dir=$FLAGGEMS_DIR" --set "flaggems_commit=$FLAGGEMS_COMMIT" \
  --set "backend=$ZL_BACKEND" --set "device=$ZL_DEVICE" \
  --set "bench_level=$BENCH_LEVEL" --set "shape_mode=$SHAPE_MODE" \
  --set "tuner_cache=$TUNER_DESC" --set "autotune_mode=$MODE_DESC" \
  --set "use_flagtune=$USE_FLAGTUNE" --set "dtypes=$DTYPES" \
  ${REPLAY_FROM:+--set "replay_from=$REPLAY_FROM"} || die2 "cannot write $OUT_DIR/run_identity.json"

# ------------------------------------------------------------------ colour
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
export OUT_DIR ZL_BACKEND ZL_DEVICE USE_FLAGTUNE
export ZL_OP="$OP" ZL_OP_FILE="$OP_FILE" FLAGGEMS_PERF_CURRENT_OP="$OP"
export ZL_BENCH_LEVEL="$BENCH_LEVEL" ZL_SHAPE_MODE="$SHAPE_MODE" ZL_SHAPE_FILE
export FLAGGEMS_PERF_TTGIR_DUMP_DIR="$OUT_DIR/ttgir"
export TRITON_CACHE_DIR="$CACHE_DIR"   # private per run: every kernel really compiles
export PYTHONUNBUFFERED=1

run_node() {
  echo "${C_BOLD}>>> op=$OP  backend=$ZL_BACKEND  mode=$MODE_DESC  USE_FLAGTUNE=$USE_FLAGTUNE  shape=$SHAPE_MODE  level=$BENCH_LEVEL  tuner=$TUNER_DESC${C_RESET}"
  echo "${C_DIM}>>> node=$TEST_FILE${C_RESET}"
  echo "${C_DIM}>>> out=$OUT_DIR${C_RESET}"
  echo ">>> plugins: ${PLUGINS[*]}"
  local rc=0
  # From the checkout root, like upstream: its pytest.ini silences the operator
  # markers and `benchmark` imports as a package.
  (cd "$FLAGGEMS_DIR" && exec "$PY" -u -m pytest -s "$TEST_FILE" \
      "${PLUGINS[@]}" "${PYTEST_COLOR[@]}" \
      ${SHAPE_ARGS[@]+"${SHAPE_ARGS[@]}"} ${DTYPE_ARGS[@]+"${DTYPE_ARGS[@]}"} \
      --level "$BENCH_LEVEL" --mode kernel) || rc=$?
  if (( rc == 0 )); then
    echo "${C_GREEN}>>> done. outputs in $OUT_DIR${C_RESET}"
  else
    echo "${C_RED}>>> pytest exited $rc. outputs in $OUT_DIR${C_RESET}"
  fi
  return "$rc"
}

run_node 2>&1 | "$PY" -u -m zl.term --tee "$OUT_DIR/run.log"
status=${PIPESTATUS[0]}
exit "$status"
