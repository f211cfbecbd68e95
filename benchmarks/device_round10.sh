#!/usr/bin/env bash
# H200 round 10 (one call, ~7 min), issue 7, alone on the GPU:
# 1) benchmarks/backward_graph_probe.py in two processes: why graph-timed gelu_backward
#    moves between runs (9.4 % median A/A in round 7), with what do_bench_cudagraph hides
#    (unroll count, capture seconds, graph pool growth);
# 2) the upstream --mode kernel A/A pair for gelu_backward that round 7 ran out of time for.
#   OUT=/some/dir bash benchmarks/device_round10.sh
set -uo pipefail
source benchmarks/device_env.sh || exit 1
W="${OUT:?set OUT}/work"; mkdir -p "$W"
bundle() { tar -czf "$OUT/round10.tgz" -C "$W" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' .; }
echo "===== backward graph probe ($(date +%H:%M:%S))"
for k in 1 2; do
  timeout "${PROBE_S:-120}" python3 benchmarks/backward_graph_probe.py --out "$W/probe$k.jsonl" \
    > "$W/probe$k.out" 2>&1
  echo "probe $k rc=$?"
done
python3 benchmarks/backward_graph_probe.py --compare "$W/probe1.jsonl" "$W/probe2.jsonl" \
  | tee "$W/probe_compare.md"
bundle
echo "===== timer noise gelu_backward up_kernel ($(date +%H:%M:%S))"
python3 benchmarks/timer_noise.py --flaggems-dir "$FLAGGEMS_DIR" --ops gelu_backward \
  --timers up_kernel --skip-profile --budget-s 60 --out "$W/timer_gelu_backward" \
  > "$W/timer_gelu_backward.out" 2>&1
echo "timer rc=$?"; bundle
ls -la "$OUT"
