#!/usr/bin/env bash
# Whether a yaml shape reaches benchmarks that fix their own shapes (one GPU, at most
# BUDGET_S = 240 s): for 11 real FlagGems operators whose Benchmark classes fix their own
# shapes, a one-shape yaml (benchmarks/hardcoded_shapes.yaml, a shape no upstream list holds)
# is what gets measured: one run_pytest.sh run per operator, its Size Detail and run_identity.json
# `shape_sources` collected into $OUT/shapes_table.md. Plus one fp16 mm run with
# ZL_ENABLE_MM_CLUSTER=1: the mm cluster plugin's "not live" line and `mm_cluster_fix`.
#
#   OUT=/some/dir bash benchmarks/hardcoded_shapes_check.sh
#
# Run from the repo root; FlagGems at $FLAGGEMS_DIR (default $PWD/.fg); the caller has set
# PYTHONPATH (flag_gems, wheels). Knobs: DTYPES (float16), BUDGET_S (240: no run starts, and
# none runs, past it), RUN_S (60: limit of one run), JOBS (4: runs at once; they only have
# to show shapes, not timings, and each gets a private tuner cache).
# Writes: $OUT/shapes_table.md and $OUT/hardcoded_shapes.tgz (per run: run.log with quoted source
# lines of tracebacks trimmed, shapes.yaml, run_identity.json, the yaml it was given, the
# console), rewritten after every wave so a call cut off still returns what finished.
# Exit status: 0 when every operator measured exactly its yaml shape and the mm line showed;
# 1 otherwise (the table says which); 2 on bad usage.
set -uo pipefail

case "${1:-}" in
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  "") ;;
  *) echo "!!! hardcoded_shapes_check.sh takes no arguments (got: $1); see --help" >&2; exit 2 ;;
esac
[[ -n "${OUT:-}" ]] || { echo "!!! set OUT to the directory for shapes_table.md and hardcoded_shapes.tgz" >&2; exit 2; }
[[ -f run_pytest.sh ]] || { echo "!!! run from the zl_bench repo root" >&2; exit 2; }

START=$SECONDS
BUDGET_S="${BUDGET_S:-240}"; RUN_S="${RUN_S:-60}"; JOBS="${JOBS:-4}"
export DTYPES="${DTYPES:-float16}"
FG="${FLAGGEMS_DIR:-$PWD/.fg}"
W="$OUT/hardcoded_shapes"; RUNS="$W/runs"; YDIR="$W/yaml"
mkdir -p "$RUNS" "$YDIR" || exit 2
TABLE="$OUT/shapes_table.md"
PY="$(command -v python3 || command -v python)"
# Plugins see their own knobs only through run_pytest.sh; these two make run.log plain:
# upstream's Size Detail unfolded, no colour.
export ZL_PRETTY_FOLD=0 FLAGGEMS_PERF_COLOR=never ZL_ISOLATE_TUNER_CACHE=1

# op | test file::function | class | plugin that reaches it. Wave order = priority: the
# most used families (conv2d, max_pool2d, upsample_bilinear2d, attention, MoE) first.
OPS=(
  "conv2d_padding|test_conv2d.py::test_conv2d_padding|Conv2DPaddingBenchmark|iter_inject (class list)"
  "max_pool2d_with_indices|test_max_pool2d.py::test_max_pool2d_with_indices|MaxPool2dBenchmark|bespoke"
  "upsample_bilinear2d_aa_backward|test_upsample_bilinear2d_aa_backward.py::test_upsample_bilinear2d_aa_backward|UpsampleBilinear2dAaBackwardBenchmark|bespoke"
  "scaled_dot_product_attention_math|test_scaled_dot_product_attention_math.py::test_scaled_dot_product_attention_math|ScaledDotProductAttentionMathBenchmark|shape_inject (set_shapes override)"
  "dispatch_fused_moe_kernel|test_fused_moe.py::test_dispatch_fused_moe_kernel|DispatchFusedMoEKernelBenchmark|shape_inject (set_shapes override)"
  "mm_cluster|test_mm.py::test_mm|BlasBenchmark|mm cluster plugin (ZL_ENABLE_MM_CLUSTER=1)"
  "conv3d_padding|test_conv3d.py::test_conv3d_padding|Conv3DPaddingBenchmark|iter_inject (class list)"
  "avg_pool2d|test_avg_pool2d.py::test_avg_pool2d|AvgPool2dBenchmark|bespoke"
  "adaptive_max_pool2d|test_adaptive_max_pool2d.py::test_adaptive_max_pool2d|AdaptiveMaxPool2dBenchmark|shape_inject (set_shapes override)"
  "upsample_nearest_exact1d|test_upsample_nearest_exact1d.py::test_upsample_nearest_exact1d|UpsampleNearestExact1dBenchmark|shape_inject (set_shapes override)"
  "affine_grid_generator|test_affine_grid_generator.py::test_affine_grid_generator|AffineGridBenchmark|shape_inject (set_shapes override)"
  "cudnn_convolution|test_cudnn_convolution.py::test_cudnn_convolution|CudnnConv2dBenchmark|bespoke"
)

# One operator's run, in the background of its wave. Its limit is what is left of the budget.
run_one() {   # key node limit
  local key="$1" node="$2" limit="$3" extra=()
  [[ "$key" == mm_cluster ]] && extra=(ZL_ENABLE_MM_CLUSTER=1)
  env ${extra[@]+"${extra[@]}"} TEST_NODE="$FG/benchmark/$node" SHAPE_FILE="$YDIR/$key.yaml" \
    OUT_DIR="$RUNS/$key" timeout -k 5 "$limit" bash run_pytest.sh > "$RUNS/$key.console" 2>&1
  echo "$?" > "$RUNS/$key.rc"
}

# The table and the bundle from whatever runs have finished (zl.runlog's parser reads run.log).
report() {
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$W" "$TABLE" "$YDIR" "${OPS[@]}" <<'PY'
import json, re, sys
from pathlib import Path
import yaml
from zl import atomic
from zl.runlog.parse import read_run_log
from zl.runlog.trim import trimmed

work, table, ydir, specs = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]
runs = work / "runs"
rows, bad = [], []
head = ("| op | class | mechanism (plugin / identity) | yaml shape | measured Size Detail | rows | source | rc |\n"
        "|---|---|---|---|---|---|---|---|")
mm_lines, mm_state = [], "(no run)"
for spec in specs:
    key, node, cls, plugin = spec.split("|")
    run = runs / key
    rc_file = runs / f"{key}.rc"
    yshape = yaml.safe_load((ydir / f"{key}.yaml").read_text())
    op = next(iter(yshape))
    shape = yshape[op]["shapes"][0]
    if not rc_file.exists():
        rows.append(f"| {op} | {cls} | {plugin} | {shape} | (not run: budget) | 0 | - | - |")
        bad.append(op)
        continue
    rc = rc_file.read_text().strip()
    log = run / "run.log"
    details, n = [], 0
    if log.exists():
        parsed = read_run_log(log)
        details = [f"{r.dtype}: {r.size_detail}" for r in parsed.rows]
        n = len(parsed.rows)
        dest = work / "bundle" / key
        dest.mkdir(parents=True, exist_ok=True)
        atomic.write_text(dest / "run.log", trimmed(log.read_text(errors="replace")))
        for name in ("shapes.yaml", "shapes.source.yaml", "run_identity.json"):
            if (run / name).exists():
                atomic.write_text(dest / name, (run / name).read_text(errors="replace"))
        atomic.write_text(dest / "shape_file.yaml", (ydir / f"{key}.yaml").read_text())
        console = (runs / f"{key}.console").read_text(errors="replace") if (runs / f"{key}.console").exists() else ""
        atomic.write_text(dest / "console.log", trimmed(console))
    ident = {}
    if (run / "run_identity.json").exists():
        try:
            ident = json.loads((run / "run_identity.json").read_text())
        except ValueError:
            ident = {}
    src = (ident.get("shape_sources") or {}).get(op) or {}
    mech = src.get("mechanism", "?")
    source = f"{src.get('source', '?')} (key {src.get('key') or '-'}, {src.get('shapes', '?')} shape(s))" if src else "(no shape_sources entry)"
    if key == "mm_cluster":
        text = log.read_text(errors="replace") if log.exists() else ""
        mm_lines = [l for l in text.splitlines() if "[mm-cluster-fix-plugin]" in l]
        mm_state = ident.get("mm_cluster_fix", "(absent)")
        ok = any("not live" in l for l in mm_lines) and mm_state == "not_live"
    else:
        ok = rc == "0" and n >= 1 and src.get("source") == "yaml" and src.get("shapes") == 1
    if not ok:
        bad.append(op)
    detail = "<br>".join(d.replace("|", "\\|") for d in details) or "(no rows)"
    rows.append(f"| {op} | {cls} | {plugin} / {mech} | {shape} | {detail} | {n} | {source} | {rc} |")

text = ["# One yaml shape per hardcoded-shape benchmark", "",
        "Each operator ran `run_pytest.sh` with TEST_NODE = its upstream node and SHAPE_FILE = "
        "the run's entry of benchmarks/hardcoded_shapes.yaml (one shape, in no upstream list of the class). "
        "`source` is run_identity.json `shape_sources[op]`.", "", head, *rows, ""]
text += ["## mm with ZL_ENABLE_MM_CLUSTER=1", ""]
if (runs / "mm_cluster.rc").exists():
    text += ["```", *(mm_lines or ["(no [mm-cluster-fix-plugin] line in run.log)"]), "```", "",
             f"run_identity.json mm_cluster_fix = `{mm_state}`", ""]
else:
    text += ["(not run: budget)", ""]
text.append(f"Not as expected (rc, rows, source or the mm line): {', '.join(bad)}" if bad else
            "Every run exited 0 with rows and shape_sources = yaml for exactly one shape, and mm said "
            "not live; the Size Detail column is what was measured (compare it with the yaml shape).")
atomic.write_text(table, "\n".join(text) + "\n")
atomic.write_text(work / "bundle" / "shapes_table.md", "\n".join(text) + "\n")
sys.exit(1 if bad else 0)
PY
}

bundle() {
  [[ -d "$W/bundle" ]] && tar -czf "$OUT/hardcoded_shapes.tgz" -C "$W" bundle
}

# Each run's own shape file, from its entry of hardcoded_shapes.yaml.
"$PY" - "$PWD/benchmarks/hardcoded_shapes.yaml" "$YDIR" <<'PY' || exit 2
import sys
from pathlib import Path
import yaml
for key, body in yaml.safe_load(Path(sys.argv[1]).read_text()).items():
    (Path(sys.argv[2]) / f"{key}.yaml").write_text(yaml.safe_dump(body, sort_keys=False, default_flow_style=None))
PY
echo ">>> hardcoded_shapes_check.sh: ${#OPS[@]} runs, $JOBS at a time, budget ${BUDGET_S}s, DTYPES=$DTYPES, FlagGems $FG"
i=0
while (( i < ${#OPS[@]} )); do
  left=$(( BUDGET_S - (SECONDS - START) - 15 ))   # 15 s kept for the table and the tarball
  limit=$(( left < RUN_S ? left : RUN_S ))
  if (( limit < 20 )); then
    echo ">>> budget spent: $(( ${#OPS[@]} - i )) run(s) not started"; break
  fi
  pids=(); wave=()
  for (( j = 0; j < JOBS && i < ${#OPS[@]}; j++, i++ )); do
    IFS='|' read -r key node _cls _plugin <<< "${OPS[$i]}"
    echo "===== $key (limit ${limit}s, $(date +%H:%M:%S))"
    run_one "$key" "$node" "$limit" &
    pids+=("$!"); wave+=("$key")
  done
  wait "${pids[@]}"
  for key in "${wave[@]}"; do echo "$key rc=$(cat "$RUNS/$key.rc" 2>/dev/null || echo '?')"; done
  report >/dev/null; bundle
done
report; status=$?
bundle
cat "$TABLE"
echo ">>> $(( SECONDS - START ))s; $OUT/shapes_table.md, $OUT/hardcoded_shapes.tgz"
exit "$status"
