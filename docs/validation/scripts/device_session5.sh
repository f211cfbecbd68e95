#!/usr/bin/env bash
# One H200 call (< 560 s) of session 5: (1) demo.sh's real path on softmax (record, replay,
# --ab, HTML page: issue 20's real A/B page and an end-to-end check of the restructured
# plugins), (2) device_issue19.sh (one-shape yamls on hardcoded-shape benchmarks), (3) a small
# run_batch.py batch (issue 17 functional check; its batch page for issue 20). Each stage has
# its own timeout; $OUT/session5.tgz is rewritten after every stage.
#   OUT=dir bash docs/validation/scripts/device_session5.sh   (repo root; FlagGems at $PWD/.fg)
set -uo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
cd "$(dirname "$0")/../../.." || exit 2
: "${OUT:?set OUT}"
export FLAGGEMS_DIR="$PWD/.fg" PYTHONUNBUFFERED=1
export PYTHONPATH="/tmp/site:$FLAGGEMS_DIR/src${PYTHONPATH:+:$PYTHONPATH}"
W="$OUT/s5"; mkdir -p "$W"
bundle() { tar -czf "$OUT/session5.tgz" -C "$W" --exclude='ttgir' --exclude='triton_*' --exclude='*.ptx' . ; }
echo "== demo softmax $(date +%T)"
( time DEMO_ROOT="$W/demo" OP=softmax OP_FILE=softmax DTYPES=float16 timeout 150 bash demo.sh ) > "$W/demo.out" 2>&1
echo "demo rc=$?"; tail -n 14 "$W/demo.out"; bundle
echo "== issue19 $(date +%T)"
OUT="$W/issue19" BUDGET_S=220 timeout 240 bash docs/validation/scripts/device_issue19.sh > "$W/issue19.out" 2>&1
echo "issue19 rc=$?"; tail -n 30 "$W/issue19.out"; cat "$W/issue19/shapes_table.md" 2>/dev/null | head -40; bundle
echo "== batch $(date +%T)"
( time timeout 170 python3 run_batch.py --ops abs relu sum softmax index_select isnan cumsum mm \
    --dtypes float16 --op-timeout 90 --budget-s 150 --batch-dir "$W/batch" ) > "$W/batch.out" 2>&1
echo "batch rc=$?"; tail -n 20 "$W/batch.out"; cat "$W/batch/ops_status.csv" 2>/dev/null
python3 batch_summary.py --batch "$W/batch" --json "$W/batch_report.json" --html "$W/batch_report.html" > "$W/batch_report.out" 2>&1
echo "batch report rc=$?"; bundle
