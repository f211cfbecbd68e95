#!/usr/bin/env bash
# Issue 18 on one H200 (one call, < 540 s), alone on the GPU. The caller has installed the wheels
# and exported FlagGems at $PWD/.fg; no network is needed.
#   OUT=/some/dir bash docs/validation/scripts/device_issue18.sh
# Stages, each under its own `timeout`, $OUT/issue18.tgz rewritten after every stage:
#   wall  6 operators (pointwise clamp, reduction sum, normalisation softmax, backward
#         gelu_backward, indexing index_select, autotuned GEMM mm), float16, 2 shapes each
#         (issue18_shapes.yaml), each run alone with a fresh Triton cache: upstream
#         `pytest --mode cudagraph`, zl_bench before (ZL_GRAPH_WARMUP_MS=caller), after (default)
#         twice for A/A. No run starts after WALL_DEADLINE_S; OPS=op:file,... runs a subset.
#   cold  relu / sum / softmax 4096x4096: graph timer warm and cold vs CUPTI kernel time
#         (warm back to back; cold with a 2x-L2 flush before every launch).
#   summary  $OUT/issue18.md (tables for docs/validation/timing.md).
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
: "${OUT:?set OUT}"
export FLAGGEMS_DIR="${FLAGGEMS_DIR:-$PWD/.fg}"
export PYTHONPATH="/tmp/site:$FLAGGEMS_DIR/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
OPS="${OPS:-clamp:clamp,sum:sum,softmax:softmax,gelu_backward:gelu,index_select:index_select,mm:mm}"
WALL_DEADLINE_S="${WALL_DEADLINE_S:-300}"
W="$OUT/issue18"; mkdir -p "$W"
S=docs/validation/scripts
bundle() { tar -czf "$OUT/issue18.tgz" -C "$W" --exclude='triton_*' --exclude='ttgir' --exclude='*.ptx' . ; }

python3 -c "import sys, torch, triton; print(f'torch={torch.__version__} triton={triton.__version__} gpu={torch.cuda.get_device_name(0)}')"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader

echo "===== wall ($(date +%H:%M:%S))"
timeout $((WALL_DEADLINE_S + 90)) python3 "$S/issue18.py" wall --flaggems-dir "$FLAGGEMS_DIR" \
  --shape-file "$S/issue18_shapes.yaml" --ops "$OPS" --work "$W" \
  --deadline-s "$WALL_DEADLINE_S" --run-timeout-s 80 > "$W/wall.out" 2>&1
echo "wall rc=$?"; tail -n 40 "$W/wall.out"; bundle

echo "===== cold ($(date +%H:%M:%S))"
timeout 90 python3 "$S/issue18.py" cold --work "$W" > "$W/cold.out" 2>&1
echo "cold rc=$?"; tail -n 8 "$W/cold.out"; bundle

echo "===== summary ($(date +%H:%M:%S))"
timeout 30 python3 "$S/issue18.py" summary --work "$W" --out "$OUT"
echo "summary rc=$?"; cp -f "$OUT/issue18.md" "$W/" 2>/dev/null; bundle
