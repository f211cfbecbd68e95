#!/usr/bin/env bash
# Upstream `pytest --mode cudagraph` over a run of the batch's nodes in ONE process, every
# output line stamped with the time it was printed, so a run cut by the call's end still gives
# per-node seconds (session 9: the 40-node one-process run was cut at 154 s after 17 nodes;
# this continues from where it stopped). Cold caches of its own.
#   FROM=where_self LIMIT_S=100 OUT=/dir bash docs/validation/scripts/upstream_one_process.sh
set -uo pipefail
source "$(dirname "$0")/../../../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/../../.." || exit 2
: "${OUT:?set OUT}" "${FROM:?set FROM=<run_name>}" "${LIMIT_S:?set LIMIT_S}"
source docs/validation/scripts/device_env.sh || exit 1
# the batch's 40 nodes in device_batch.sh's order
mapfile -t NODES < <(sed -n '/^NODES=(/,/^)/p' docs/validation/batch/device_batch.sh | sed '1d;$d' | tr ' ' '\n' | grep .)
tests=(); on=0
for n in "${NODES[@]}"; do
  [[ $n == "$FROM" ]] && on=1
  (( on )) || continue
  tests+=("$(python3 -c 'import sys, csv
for r in csv.DictReader(l for l in open("ops/inventory_main.csv") if not l.startswith("#")):
    if r["run_name"] == sys.argv[1]: print("benchmark/%s::test_%s" % (r["test_file"], r["op"]))' "$n")")
done
(( ${#tests[@]} )) || { echo "!!! FROM=$FROM is not one of the batch's nodes" >&2; exit 2; }
mkdir -p "$OUT"
echo "$(date +%s.%N) start: ${#tests[@]} node(s) from $FROM" > "$OUT/one_process_from_$FROM.log"
(cd "$FLAGGEMS_DIR" && PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/one_process_cache/triton \
   FLAGGEMS_CACHE_DIR=/tmp/one_process_cache/flaggems timeout "$LIMIT_S" \
   python3 -m pytest -s -v -p no:cacheprovider "${tests[@]}" --level core --mode cudagraph --dtypes float16 2>&1) \
  | python3 -c 'import sys, time
for line in sys.stdin:
    sys.stdout.write(f"{time.time():.2f} {line}"); sys.stdout.flush()' >> "$OUT/one_process_from_$FROM.log"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/one_process_from_$FROM.log"
grep -c "^[0-9.]* PASSED\|^[0-9.]* FAILED" "$OUT/one_process_from_$FROM.log"
