# Helper, not a tool: sourced by autotune_replay_check.sh and ir_fingerprint_check.sh: one
# run_pytest.sh run into $WORK/<name>, its output tail and exit status appended to
# $OUT/runs.log. Needs HERE (repo root), WORK and OUT set by the caller.
validate_run() {  # validate_run NAME TIMEOUT_S [VAR=VALUE ...]
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
