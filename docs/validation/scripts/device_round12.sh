#!/usr/bin/env bash
# H200 round 12 (one call, ~5 min), alone on the GPU: a second gelu_backward graph-timed A/A
# pair (is round 11's 0.82 % repeatable?) and softmax zl_graph beside upstream --mode cudagraph
# and zl_direct (ZL_DIRECT_REPEAT=5) in the same session, so the "A/A <= upstream cudagraph"
# and direct-path comparisons are not made across rounds.
#   OUT=/some/dir bash docs/validation/scripts/device_round12.sh
set -uo pipefail
source docs/validation/scripts/device_env.sh || exit 1
round_dir round12
timer_stage gelu_backward zl_graph 300 "${TIMER_S:-400}"
timer_stage softmax zl_graph,up_cudagraph,zl_direct 300 "${TIMER_S:-400}"
cat "$W"/timer_*/timer_noise.md
