#!/usr/bin/env bash
# Issue 18 on one H200 (one call), alone on the GPU. The caller has installed the wheels and
# exported FlagGems at $PWD/.fg; no network is needed.
#   OUT=/some/dir bash docs/validation/scripts/device_issue18.sh
# Stages (STAGES=wall,cold,summary by default), each under its own `timeout`, $OUT/issue18.tgz
# rewritten after every stage:
#   wall  6 operators of different kinds (autotuned GEMM mm first, so a deadline never cuts it;
#         pointwise clamp, reduction sum, normalisation softmax, backward softmax_backward_out,
#         indexing index_select), float16, shapes from SHAPES (default issue18_shapes.yaml;
#         `core` = upstream's core shapes on both sides), each run alone with a fresh Triton
#         cache: RUNS of upstream `pytest --mode cudagraph`, zl_bench before
#         (ZL_GRAPH_WARMUP_MS=caller), after1 / after2 (default settings; after2 replays after1's
#         autotune picks: the A/A pair; mid1/mid2 the pair at MID_WARMUP_MS, default 100). No
#         run starts after WALL_DEADLINE_S; each run is killed
#         at RUN_TIMEOUT_S; OPS=op:file,... picks operators; WORK names the work folder.
#   cold  relu / sum / softmax 4096x4096: graph timer warm and cold vs CUPTI kernel time and
#         per-call span (warm back to back; cold with a 2x-L2 flush before every launch).
#   summary  $OUT/issue18.md (tables for docs/validation/timing.md).
#   profile  $W/profile.md: issue18_profile.py compare over the wall stage's runs, which
#         PROFILE=1 puts under cProfile (then their seconds are no cost figures).
set -uo pipefail
source "$(dirname "$0")/../../../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/../../.." || exit 2
: "${OUT:?set OUT}"
export FLAGGEMS_DIR="${FLAGGEMS_DIR:-$PWD/.fg}"
export PYTHONPATH="/tmp/site:$FLAGGEMS_DIR/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
OPS="${OPS:-mm:mm,clamp:clamp,sum:sum,softmax:softmax,softmax_backward_out:softmax,index_select:index_select}"
RUNS="${RUNS:-upstream,before,after1,after2}"
STAGES="${STAGES:-wall,cold,summary}"
WALL_DEADLINE_S="${WALL_DEADLINE_S:-300}"
RUN_TIMEOUT_S="${RUN_TIMEOUT_S:-80}"
S=docs/validation/scripts
SHAPES="${SHAPES:-$S/issue18_shapes.yaml}"
[[ "$SHAPES" == core ]] && SHAPES=""
W="$OUT/${WORK:-issue18}"; mkdir -p "$W"
bundle() { tar -czf "$OUT/${WORK:-issue18}.tgz" -C "$W" --exclude='triton_*' --exclude='flaggems_*' --exclude='ttgir' --exclude='*.ptx' \
  --exclude='*.cubin' --exclude='*.ttgir' --exclude='*.llir' . ; }
has() { [[ ",$STAGES," == *",$1,"* ]]; }

python3 -c "import sys, torch, triton; print(f'torch={torch.__version__} triton={triton.__version__} gpu={torch.cuda.get_device_name(0)}')"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader

if has wall; then
  echo "===== wall ($(date +%H:%M:%S)) runs=$RUNS shapes=${SHAPES:-core}"
  timeout $((WALL_DEADLINE_S + RUN_TIMEOUT_S + 10)) python3 "$S/issue18.py" wall --flaggems-dir "$FLAGGEMS_DIR" \
    ${SHAPES:+--shape-file "$SHAPES"} --ops "$OPS" --runs "$RUNS" --work "$W" \
    --deadline-s "$WALL_DEADLINE_S" --run-timeout-s "$RUN_TIMEOUT_S" --mid-warmup-ms "${MID_WARMUP_MS:-100}" ${PROFILE:+--profile} > "$W/wall.out" 2>&1
  echo "wall rc=$?"; tail -n 40 "$W/wall.out"; bundle
fi
if has cold; then
  echo "===== cold ($(date +%H:%M:%S))"
  timeout 90 python3 "$S/issue18.py" cold --work "$W" > "$W/cold.out" 2>&1
  echo "cold rc=$?"; tail -n 8 "$W/cold.out"; bundle
fi
if has summary; then
  echo "===== summary ($(date +%H:%M:%S))"
  timeout 30 python3 "$S/issue18.py" summary --work "$W" --out "$W"
  echo "summary rc=$?"; bundle
fi
if has profile; then
  echo "===== profile ($(date +%H:%M:%S))"
  timeout 60 python3 "$S/issue18_profile.py" compare --work "$W" --out "$W/profile.md" > "$W/profile.out" 2>&1
  echo "profile rc=$?"; head -n 40 "$W/profile.out"; bundle
fi
