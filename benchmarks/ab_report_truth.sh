#!/usr/bin/env bash
# What an A/B report says about a real switch and about an A/A pair, on a GPU with FlagGems.
#
#   FLAGGEMS_DIR=/path/FlagGems OUT=/tmp/out bash benchmarks/ab_report_truth.sh
#
# Two screens (ab_rlc_test.sh: side A records, side B replays A's autotune picks), then the
# A/B report of each pair (batch_summary.py --ab, console + --json + --html):
#   switch  SWITCH (default DISABLE_LLVM_OPT) on SWITCH_OPS (default vector_norm, autotuned,
#           and logsumexp, float16). The
#           switch acts below TTGIR, so the report must say the code changed at llir (not
#           "identical TTGIR: an A/A") and show the results verdict on the page.
#   aa      a variable nothing reads on AA_OPS (default vector_norm and nll_loss2d_forward,
#           float16): every level identical, so the report shows the pair's range as a noise
#           band; nll_loss2d_forward's results-vs-torch verdict is the reduction-aware one.
# Per pair it also checks the replay link on real autotuner configs: side B's
# replay_record_digest equals side A's autotune_record_digest, and no
# AUTOTUNE_REPLAY_FOREIGN_CONFIG marker (a replayed config the tuner does not list) appears.
# Writes $OUT/summary.txt (the screen tables and each report's IR, results and band lines,
# read back from the --json) and $OUT/ab_report_truth.tgz (run.log, run_identity.json,
# screen.tsv, report JSON/HTML; compiled IR left out), rewritten after every stage.
# Each stage runs under zl.supervise: killed, even by SIGKILL, this script takes the running
# stage along.
# Exit: 0 done; 2 FLAGGEMS_DIR unset or not a FlagGems checkout (no benchmark/), or OUT unset;
# else the failing stage's status.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$HERE/zl/sh/entry.sh" "$@"   # --help, no arguments, the kit installed for PY
zl_require_flaggems_and_out
SWITCH="${SWITCH:-DISABLE_LLVM_OPT}"
SWITCH_OPS="${SWITCH_OPS:-vector_norm:vector_norm:float16 logsumexp:logsumexp:float16}"
AA_OPS="${AA_OPS:-vector_norm:vector_norm:float16 nll_loss2d_forward:nll_loss2d:float16}"
STAGE_S="${STAGE_S:-240}"
export FLAGGEMS_DIR NO_COLOR=1 CELL_TIMEOUT="${CELL_TIMEOUT:-150}"
W="$OUT/work"; mkdir -p "$W"
SUM="$OUT/summary.txt"
{
  echo "# ab_report_truth $(date -u +%Y-%m-%dT%H:%M:%SZ) zl_bench=$(git -C "$HERE" rev-parse --short HEAD 2>/dev/null)"
  echo "# flaggems=$("$PY" -m zl.flaggems --commit-of "$FLAGGEMS_DIR" --short 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1
} > "$SUM"
bundle() {
  tar -czf "$OUT/ab_report_truth.tgz" -C "$W" --exclude='*.ttgir' --exclude='*.llir' \
    --exclude='*.ptx' --exclude='*.cubin' --exclude='*.json.ir' --exclude='ttgir' \
    --exclude='triton_cache' . 2>/dev/null
}
# `screen NAME SWITCH OPS`: one ab_rlc_test.sh screen into $W/NAME, then one --ab report per
# operator cell (JSON and HTML beside the screen), their key lines appended to the summary.
screen() {
  local name="$1" sw="$2" ops="$3" rc cell
  echo "## $name: SWITCH=$sw OPS=$ops" >> "$SUM"
  SWITCH="$sw" OPS="$ops" AB_ROOT="$W/$name" "$PY" -m zl.supervise --parent "$$" -- \
    timeout -k 10 "$STAGE_S" bash "$HERE/ab_rlc_test.sh" > "$W/$name.out" 2>&1
  rc=$?; echo "screen rc=$rc" >> "$SUM"
  cut -f1,3,14 "$W/$name/screen.tsv" >> "$SUM" 2>/dev/null
  for cell in "$W/$name"/*_before; do
    [[ -d "$cell" ]] || continue
    cell="${cell%_before}"
    "$PY" "$HERE/batch_summary.py" --ab "${cell}_before" "${cell}_after" \
      --json "${cell}.report.json" --html "${cell}.report.html" > "${cell}.report.out" 2>&1
    echo "report $(basename "$cell") rc=$?" >> "$SUM"
    "$PY" - "${cell}.report.json" >> "$SUM" 2>&1 <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
import re
for key, value in rep.items():
    if key not in ("paired", "unpaired") and re.search(r"status|ir|noise|result|verdict|complete|code", key):
        print(f"  {key}: {json.dumps(value)[:400]}")
PY
    grep -iE "ir:|code|results|noise|a/a|incomplete|!!!" "${cell}.report.out" | head -10 \
      | sed 's/^/  console: /' >> "$SUM"
    "$PY" - "${cell}_before" "${cell}_after" >> "$SUM" 2>&1 <<'PY'
import json, sys
a, b = (json.load(open(f"{d}/run_identity.json")) for d in sys.argv[1:3])
foreign = open(f"{sys.argv[2]}/run.log", errors="replace").read().count("AUTOTUNE_REPLAY_FOREIGN_CONFIG")
print(f"  link: A record={a.get('autotune_record_digest')} B replayed={b.get('replay_record_digest')} "
      f"equal={a.get('autotune_record_digest') == b.get('replay_record_digest')} "
      f"B mode={b.get('autotune_mode')} foreign_markers={foreign} "
      f"device={b.get('device_name')}/{b.get('device_arch')} finished={b.get('finished')}")
PY
  done
  bundle
}
screen switch "$SWITCH" "$SWITCH_OPS"
screen aa ZL_NOTHING_READS_THIS "$AA_OPS"
cat "$SUM"
