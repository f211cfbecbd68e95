#!/usr/bin/env bash
# H200 round 9 (one call, <= 10 min), each stage alone on the GPU, in the order that closes
# the most open items if the call is cut (a bundle follows every stage):
# 1) issue 8: mm tf32 vs ieee fingerprints on one small shape (round 8 cut this stage at
#    110 s: the tf32 side autotunes from an isolated cache, 163 variants for two shapes);
# 2) issue 6 part 3: 4-round ab_repeat of DISABLE_LLVM_OPT on softmax, a slowdown
#    measured alone, with per-shape verdicts;
# 3) issue 7: the upstream --mode kernel A/A pair for gelu_backward (missing from round 7);
# 4) issue 7: benchmarks/backward_graph_probe.py in two processes, why graph-timed
#    gelu_backward moves between runs (9.4 % median A/A in round 7).
#   OUT=/some/dir bash docs/validation/scripts/device_round9.sh
set -uo pipefail
source docs/validation/scripts/device_env.sh || exit 1
round_dir round9
echo "===== ir_validate mm ($(date +%H:%M:%S))"
CHECKS=mm OUT="$W/ir" timeout "${IR_S:-130}" bash docs/validation/scripts/ir_validate.sh > "$W/ir.out" 2>&1
echo "ir rc=$?"; bundle
echo "===== ab_validate part 3 ($(date +%H:%M:%S))"
PARTS=3 DTYPES="${DTYPES:-float16}" OUT="$W/ab3" timeout "${PART_S:-240}" \
  bash docs/validation/scripts/ab_validate.sh > "$W/ab3.out" 2>&1
echo "part 3 rc=$?"; bundle
timer_stage gelu_backward up_kernel 30 "${TIMER_S:-120}"
echo "===== backward graph probe ($(date +%H:%M:%S))"
for k in 1 2; do
  timeout "${PROBE_S:-40}" python3 benchmarks/backward_graph_probe.py --captures 2 \
    --shapes 64x64,4096x4096 --out "$W/probe$k.jsonl" > "$W/probe$k.out" 2>&1
  echo "probe $k rc=$?"
done
python3 benchmarks/backward_graph_probe.py --compare "$W/probe1.jsonl" "$W/probe2.jsonl" \
  | tee "$W/probe_compare.md"
bundle
ls -la "$OUT"
