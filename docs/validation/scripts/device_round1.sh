#!/usr/bin/env bash
# H200 round 1: single-operator evidence (issue 3), real run.logs for the parser,
# IR payloads recorded from the project's own kernels, backend error wording.
# Usage (repo root, GPU machine, .fg/ = FlagGems checkout, .whl/ = sqlalchemy+greenlet):
#   OUT=/some/dir bash docs/validation/scripts/device_round1.sh
set -uo pipefail
source docs/validation/scripts/device_env.sh || exit 1
round_dir round1
step() { echo; echo "===== $* ($(date +%H:%M:%S))"; }

step "issue 3: default inline softmax through run_pytest.sh"
OP=softmax OP_FILE=softmax OUT_DIR="$W/run_softmax" bash run_pytest.sh; echo "rc=$?"
step "issue 3: gelu_backward with upstream shapes, float16 + bfloat16"
OP=gelu_backward OP_FILE=gelu SHAPE_FILE=upstream DTYPES="float16 bfloat16" ZL_ISOLATE_TUNER_CACHE=1 \
  OUT_DIR="$W/run_gelu_backward" bash run_pytest.sh; echo "rc=$?"
step "issue 3: TEST_NODE layer_norm (upstream node and shapes)"
TEST_NODE="$FLAGGEMS_DIR/benchmark/test_layer_norm.py::test_layer_norm" DTYPES=float16 \
  OUT_DIR="$W/run_layer_norm" timeout 150 bash run_pytest.sh; echo "rc=$?"

step "upstream logs for the parser: mm --mode kernel (TFLOPS), gelu_backward --mode cudagraph (fails)"
( cd "$FLAGGEMS_DIR" && timeout 150 python3 -m pytest -s benchmark/test_mm.py::test_mm --level core \
    --mode kernel --dtypes float16 ) > "$W/upstream_mm_kernel.log" 2>&1; echo "rc=$?"
( cd "$FLAGGEMS_DIR" && timeout 90 python3 -m pytest -s benchmark/test_gelu.py::test_gelu_backward \
    --level core --mode cudagraph ) > "$W/upstream_gelu_backward_cudagraph.log" 2>&1; echo "rc=$?"

step "IR payloads from the project's own kernels"
OUT="$W/ir_payloads" timeout 150 python3 benchmarks/capture_ir_payloads.py; echo "rc=$?"
step "backend identity, telemetry, real capture-error wording"
OUT="$W/backends" timeout 120 python3 docs/validation/backends_h200.py; echo "rc=$?"

step "bundle"
tar -czf "$OUT/round1.tgz" -C "$W" . && ls -la "$OUT"
