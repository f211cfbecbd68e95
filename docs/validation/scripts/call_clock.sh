# Sourced by the device_session*.sh call plans, from the repo root: checks OUT and PART, starts
# the call's clock (CALL_S, default 570 s: the device's 600 s per call less the bundling) and
# defines `left` (seconds of it left), S (this folder) and `tied CMD...`: CMD under
# zl.supervise, so a killed call (even by SIGKILL) takes each stage and its children along.
# Never background `tied` (`tied CMD &`): that runs it in a subshell and zl.supervise refuses
# the tie (exit 2); put `python3 -m zl.supervise --parent "$$" -- CMD &` in the background.
: "${OUT:?set OUT}" "${PART:?set PART=1|2|3}"
T0=$(date +%s)
CALL_S="${CALL_S:-570}"
left() { echo $(( CALL_S - ($(date +%s) - T0) )); }
S=docs/validation/scripts
tied() { python3 -m zl.supervise --parent "$$" -- "$@"; }
# The plans' capture-cost stage: results_cost_core.sh alone on the GPU, into $OUT/cost_core,
# killed after $1 seconds.
# Only files two levels under the device's OUT come back: the run folders travel as a tarball
# (compiled IR left out: never committed).
cost_core() {
  local rc
  mkdir -p "$OUT/cost_core"; OUT="$OUT/cost_core" tied timeout "$1" bash $S/results_cost_core.sh; rc=$?
  tar -czf "$OUT/cost_core_runs.tgz" -C "$OUT" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' \
    --exclude='*.cubin' --exclude='*.json.ir' cost_core
  return "$rc"
}
