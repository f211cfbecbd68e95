#!/usr/bin/env bash
# Upstream `pytest --mode cudagraph` over a run of the batch's nodes in ONE process, every
# output line stamped with the time it was printed, so a run cut by the call's end still gives
# per-node seconds (a 40-node one-process run cut at 154 s after 17 nodes gave no time per
# node). Cold caches of its own. FROM=<run_name> starts the list there
# (default: all 40). `--tb=line`: a failure says where and why, without quoting FlagGems source.
#   LIMIT_S=420 OUT=/dir bash benchmarks/upstream_node_seconds.sh
# Per node afterwards (zl.runlog.costs.node_seconds): the stamp of its outcome line minus the
# stamp of the line before its id line (the id line itself arrives after the node has run).
set -uo pipefail
source "$(dirname "$0")/../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/.." || exit 2
: "${OUT:?set OUT}" "${LIMIT_S:?set LIMIT_S}"
source benchmarks/_device_env.sh || exit 1
# the batch's 40 nodes in batch_vs_upstream.sh's order
mapfile -t NODES < <(sed -n '/^NODES=(/,/^)/p' benchmarks/batch_vs_upstream.sh | sed '1d;$d' | tr ' ' '\n' | grep .)
FROM="${FROM:-${NODES[0]}}"
names=(); on=0
for n in "${NODES[@]}"; do
  [[ $n == "$FROM" ]] && on=1
  (( on )) && names+=("$n")
done
(( ${#names[@]} )) || { echo "!!! FROM=$FROM is not one of the batch's nodes" >&2; exit 2; }
mapfile -t tests < <(upstream_node_ids "${names[@]}")
(( ${#tests[@]} == ${#names[@]} )) || { echo "!!! node ids not resolved" >&2; exit 2; }
mkdir -p "$OUT"; rm -rf /tmp/one_process_cache   # cold caches on a warm machine too
echo "$(date +%s.%N) start: ${#tests[@]} node(s) from $FROM" > "$OUT/one_process_from_$FROM.log"
(cd "$FLAGGEMS_DIR" && PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/one_process_cache/triton \
   FLAGGEMS_CACHE_DIR=/tmp/one_process_cache/flaggems timeout "$LIMIT_S" \
   python3 -m pytest -s -v --tb=line -p no:cacheprovider "${tests[@]}" --level core --mode cudagraph --dtypes float16 2>&1) \
  | python3 -c 'import sys, time
for line in sys.stdin:
    sys.stdout.write(f"{time.time():.2f} {line}"); sys.stdout.flush()' >> "$OUT/one_process_from_$FROM.log"
rc=${PIPESTATUS[0]}
echo "$(date +%s.%N) rc=$rc" | tee -a "$OUT/one_process_from_$FROM.log"
# seconds per finished node (from the line before its id to its outcome), wall and rate
python3 -c 'import sys; from zl.runlog.costs import node_table; sys.stdout.write(node_table(open(sys.argv[1]).read()))' \
  "$OUT/one_process_from_$FROM.log" > "$OUT/one_process_from_$FROM.tsv"
tail -n 3 "$OUT/one_process_from_$FROM.tsv"
