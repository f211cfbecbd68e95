#!/usr/bin/env bash
# The next H200 session's plan (after session 9). Carry .fg and .whl only: nothing of
# runs/device_batch is needed any more.
#   run(carry=[".fg", ".whl"], command="... PART=1 OUT=$OUT bash docs/validation/scripts/device_session10.sh")
#   PART=1  issue 17's two missing pieces, alone on the GPU (~480 s):
#           a) upstream `pytest --mode cudagraph` on index_select and index_add, one process
#              each, `--tb=line` (session 9: rc 1 on both where zl_bench wrote 5 rows each; the
#              output had gone to /dev/null), cold caches of their own;
#           b) upstream's 40 nodes in one process, every line time-stamped
#              (upstream_one_process.sh): the one-process rate over the whole list, with
#              seconds per node.
#   PART=2  issue 18's six-operator cost table (every run on cold caches of its own, the
#           per-run cost ledger): upstream, after1, after2, two shapes (~450 s).
#   PART=3  issue 18's cold stage (graph vs CUPTI, in-graph CUPTI for sum), then the A/A of the
#           25 ms warmup against the old one on softmax and gelu_backward core shapes.
#   PART=4  the cost table again after the autotuner fix, with each run's wall in phases.
set -uo pipefail
source "$(dirname "$0")/../../../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/../../.." || exit 2
# shellcheck source=docs/validation/scripts/call_clock.sh
source docs/validation/scripts/call_clock.sh
case "$PART" in
1)
  source docs/validation/scripts/device_env.sh || exit 1
  mkdir -p "$OUT/upstream_fail"
  for t in test_index_select.py::test_index_select test_index_add.py::test_index_add; do
    name=${t##*::test_}
    echo "===== upstream $name ($(( $(date +%s) - T0 )) s in)"
    # zl.supervise's --cwd, not a `(cd ...)` subshell: the tie must be to this shell itself
    TRITON_CACHE_DIR=/tmp/fail_cache/$name/triton FLAGGEMS_CACHE_DIR=/tmp/fail_cache/$name/flaggems \
      python3 -m zl.supervise --parent "$$" --cwd "$FLAGGEMS_DIR" -- timeout 60 \
      python3 -m pytest -s -v --tb=line -p no:cacheprovider "benchmark/$t" --level core \
      --mode cudagraph --dtypes float16 > "$OUT/upstream_fail/$name.log" 2>&1
    echo "$name rc=$?"; grep -E "Error|error:|FAILED|PASSED" "$OUT/upstream_fail/$name.log" | cut -c1-300 | tail -5
  done
  echo "===== upstream one process ($(( $(date +%s) - T0 )) s in)"
  LIMIT_S=$(( $(left) - 20 )) tied bash $S/upstream_one_process.sh
  ;;
2)
  WORK=issue18_wall RUNS=upstream,after1,after2 STAGES=wall,summary WALL_DEADLINE_S=$(( $(left) - 100 )) \
    RUN_TIMEOUT_S=90 tied timeout $(( $(left) - 10 )) bash $S/device_issue18.sh
  ;;
3)
  # cold stage first (<= 90 s): relu's CUPTI miss and sum's in-graph CUPTI reference
  WORK=issue18_cold STAGES=cold,summary tied timeout 130 bash $S/device_issue18.sh
  WORK=issue18_core OPS="softmax:softmax,gelu_backward:gelu" RUNS=after1,after2,before,before2 SHAPES=core \
    STAGES=wall,summary WALL_DEADLINE_S=$(( $(left) - 90 )) RUN_TIMEOUT_S=60 \
    tied timeout $(( $(left) - 10 )) bash $S/device_issue18.sh
  ;;
4)
  # after the autotuner fix (a tuner's do_bench call left to Triton's) and with per-line
  # phases: the cost table again, softmax_backward_out first (its sweep was the 1.68x)
  WORK=issue18_fix OPS="softmax_backward_out:softmax,clamp:clamp,sum:sum,softmax:softmax,index_select:index_select,mm:mm" \
    RUNS=upstream,after1,after2 STAGES=wall,summary WALL_DEADLINE_S=$(( $(left) - 60 )) RUN_TIMEOUT_S=90 \
    tied timeout $(( $(left) - 10 )) bash $S/device_issue18.sh
  ;;
*)
  echo "PART must be 1, 2, 3 or 4 (got $PART)" >&2; exit 2
  ;;
esac
echo "===== part $PART done in $(( $(date +%s) - T0 )) s"
