# Shared entry of the shell commands (run_pytest.sh and the A/B drivers), sourced with the
# caller's arguments: --help / -h prints the caller's header comment and starts nothing; any
# other argument is refused (every knob is an environment variable: `run_pytest.sh --help`
# once started a real run). PY is the interpreter the command runs.
case "${1:-}" in
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  "") ;;
  *) echo "!!! $(basename "$0") takes no arguments (got: $1); every knob is an environment variable, see --help" >&2
     exit 2 ;;
esac
PY="${ZL_PYTHON:-$(command -v python || command -v python3)}"
# `zl_require_flaggems_and_out`, for the GPU checks in benchmarks/ that read FLAGGEMS_DIR and
# write to OUT: FLAGGEMS_DIR must be a FlagGems checkout (its benchmark/ folder holds every
# node they run) and OUT must be set. Otherwise one `!!! <command>: ...` line naming the
# variable, exit 2, before any stage starts: a wrong path would otherwise fail each stage in
# turn, each after its own start-up.
zl_require_flaggems_and_out() {
  local me; me="$(basename "$0")"
  if [[ -z "${FLAGGEMS_DIR:-}" ]]; then
    echo "!!! $me: set FLAGGEMS_DIR to a FlagGems checkout (it is not set)" >&2
    exit 2
  elif [[ ! -d "$FLAGGEMS_DIR/benchmark" ]]; then
    echo "!!! $me: FLAGGEMS_DIR=$FLAGGEMS_DIR is not a FlagGems checkout (it has no benchmark/ folder)" >&2
    exit 2
  elif [[ -z "${OUT:-}" ]]; then
    echo "!!! $me: set OUT (an output folder)" >&2
    exit 2
  fi
}
# `validate_run NAME TIMEOUT_S [VAR=VALUE ...]`, for the same checks: one run_pytest.sh run
# into $WORK/NAME, its output tail and exit status appended to $OUT/runs.log. Needs HERE (the
# repo root), WORK and OUT set by the caller.
validate_run() {
  local name="$1" limit="$2"; shift 2
  echo "=== $name: $*" >>"$OUT/runs.log"
  local t0=$SECONDS
  ( cd "$HERE" && env OUT_DIR="$WORK/$name" BENCH_LEVEL=core "$@" timeout "$limit" bash run_pytest.sh ) \
      >"$WORK/$name.out" 2>&1
  local rc=$?
  tail -n 40 "$WORK/$name.out" >>"$OUT/runs.log"
  echo "=== $name rc=$rc elapsed=$((SECONDS - t0))s" >>"$OUT/runs.log"
  return $rc
}
# shellcheck source=kit.sh
source "$(dirname "${BASH_SOURCE[0]}")/kit.sh"
