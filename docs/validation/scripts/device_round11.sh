#!/usr/bin/env bash
# H200 round 11 (one call, ~3 min), issue 7's last open item, alone on the GPU: gelu_backward
# graph-timed A/A through FlagGems with backward graphs captured on the forward's stream
# (round 9 found the fresh-stream capture behind round 7's 9.4 % median A/A), then the same
# for softmax as a check that forward operators did not move.
#   OUT=/some/dir bash docs/validation/scripts/device_round11.sh
set -uo pipefail
source docs/validation/scripts/device_env.sh || exit 1
round_dir round11
for op in gelu_backward softmax; do timer_stage "$op" zl_graph 30 "${TIMER_S:-200}"; done
cat "$W"/timer_*/timer_noise.md
