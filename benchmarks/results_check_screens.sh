#!/usr/bin/env bash
# The IR verdict by first differing level and the results check, on real FlagGems (one GPU,
# < 540 s, no network). Five stages, each an ab_rlc_test.sh screen with private tuner caches,
# float16, two small shapes per operator:
#   1 aa     A/A screen (switch nobody reads) on softmax, abs, gelu, dropout: NO_IR_DIFF with
#            ir_levels ttgir,llir,ptx,binary; results match (dropout: n/a, random operator)
#   2 llvm   DISABLE_LLVM_OPT=1 on softmax and log_softmax, default settings: IR_CHANGED@llir
#            (results match or within_tol: the switch must not change answers)
#   3 debug  TRITON_DEBUG=1 on mm: IR_CHANGED@ttgir (results match or within_tol)
#   Results are thereby checked on 6 operators (softmax abs gelu log_softmax mm + dropout n/a).
#   4 plant  a planted 1 % change in abs (_plant_skew_plugin, ZL_PLANT_SKEW=1): WRONG_RESULTS
#   5 cost   per run: result-capture seconds and fingerprint milliseconds vs the run's wall time
# Each stage has its own timeout and re-bundles $OUT/results_check.tgz (IR text left out;
# results/*.json, ir_fingerprints.json, run.log, screen.tsv kept), so a cut run still
# returns what finished. Expectations print as `EXPECT ok|FAIL <stage> <op> ...`; the cost
# table is $OUT/work/cost.tsv.
#   OUT=/some/dir bash benchmarks/results_check_screens.sh     (FLAGGEMS_DIR, default $PWD/.fg)
set -uo pipefail
source "$(dirname "$0")/../zl/sh/entry.sh" "$@"   # --help, and no arguments
cd "$(dirname "$0")/.." || exit 2
: "${OUT:?set OUT}"
source benchmarks/_device_env.sh || exit 1
export PYTHONPATH="$PWD/benchmarks:$PYTHONPATH"
W="$OUT/work"; mkdir -p "$W"
bundle() { tar -czf "$OUT/results_check.tgz" -C "$W" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' \
  --exclude='*.cubin' --exclude='.flaggems_cache' --exclude='autotune_records' .; }
T0=$(date +%s)

# Few, small shapes: the stages test verdicts, not speed.
cat > "$W/shapes.yaml" <<'YAML'
softmax: {shapes: [[64, 64], [1024, 1024]]}
log_softmax: {shapes: [[64, 64], [1024, 1024]]}
mm: {shapes: [[2, 384, 384, 384], [2, 1024, 1024, 1024]]}
abs: {shapes: [[64, 64], [4096, 4096]]}
gelu: {shapes: [[64, 64], [4096, 4096]]}
dropout: {shapes: [[64, 64], [4096, 4096]]}
YAML
export SHAPE_FILE="$W/shapes.yaml" ZL_ISOLATE_TUNER_CACHE=1 NO_COLOR=1 TELEMETRY_INTERVAL=0

stage() {   # name limit_s cell_timeout_s SWITCH OPS [VAR=value ...]
  local name="$1" limit="$2" cell="$3" switch="$4" ops="$5"; shift 5
  echo "===== $name: SWITCH=$switch OPS=$ops $* ($(date +%H:%M:%S), $(( $(date +%s) - T0 )) s in)"
  timeout -k 10 "$limit" env "$@" SWITCH="$switch" OPS="$ops" CELL_TIMEOUT="$cell" \
    AB_ROOT="$W/$name" bash ab_rlc_test.sh > "$W/$name.out" 2>&1
  echo "$name rc=$?"
  [[ -f "$W/$name/screen.tsv" ]] && python3 - "$W/$name/screen.tsv" <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1]), delimiter="\t"):
    print(f"  {r['op']:<12} {r['verdict']:<16} levels={r.get('ir_levels')} results={r.get('results')} "
          f"torch={r.get('results_torch')} elapsed={r['elapsed_before']}/{r['elapsed_after']}s")
PY
  bundle
}

expect() {   # stage op column wanted (an extended regex the value must start with)
  local got
  got="$(python3 - "$W/$1/screen.tsv" "$2" "$3" <<'PY' 2>/dev/null
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t") if r["op"] == sys.argv[2]]
print(rows[0][sys.argv[3]] if rows else "<no row>")
PY
)"
  if [[ "$got" =~ ^($4) ]]; then echo "EXPECT ok   $1 $2 $3=$got"; else echo "EXPECT FAIL $1 $2 $3=$got (wanted ^($4))"; fi
}

stage aa 190 60 ZL_AA_UNREAD_SWITCH \
  "softmax:softmax:float16 abs:abs:float16 gelu:gelu:float16 dropout:dropout:float16"
for op in softmax abs gelu; do
  expect aa "$op" verdict NO_IR_DIFF; expect aa "$op" ir_levels 'ttgir,llir,ptx,binary$'; expect aa "$op" results 'match$'
done
expect aa dropout results 'n/a \(random operator'

stage llvm 110 50 DISABLE_LLVM_OPT "softmax:softmax:float16 log_softmax:log_softmax:float16"
for op in softmax log_softmax; do
  expect llvm "$op" verdict 'IR_CHANGED@llir$'; expect llvm "$op" results 'match$|within_tol$'
done

stage debug 100 70 TRITON_DEBUG "mm:mm:float16"
expect debug mm verdict 'IR_CHANGED@ttgir$'; expect debug mm results 'match$|within_tol$'

stage plant 50 40 ZL_PLANT_SKEW "abs:abs:float16" ZL_EXTRA_PLUGINS=_plant_skew_plugin
expect plant abs verdict 'WRONG_RESULTS$'; expect plant abs results 'MISMATCH \(2/2 shapes'

echo "===== cost ($(( $(date +%s) - T0 )) s in)"
python3 - "$W" > "$W/cost.tsv" <<'PY'
# Wall time per run: the screen's elapsed_before/after (the whole run_pytest.sh call).
import csv, pathlib, re, sys
print("run\twall_s\tcapture_s\tfingerprint_ms\tadded_pct")
for tsv in sorted(pathlib.Path(sys.argv[1]).glob("*/screen.tsv")):
    for row in csv.DictReader(open(tsv), delimiter="\t"):
        cell = row["op"] if row["dtypes"] == "<all>" else f"{row['op']}@{row['dtypes'].replace(',', '+')}"
        for side in ("before", "after"):
            log = tsv.parent / f"{cell}_{side}" / "run.log"
            text = log.read_text(errors="replace") if log.is_file() else ""
            cap = re.search(r"calls, ([0-9.]+) s outside the timed loops", text)
            fp = re.search(r"IR fingerprints \S+ recorded in ([0-9.]+) ms", text)
            wall = float(row[f"elapsed_{side}"] or "nan")
            c = float(cap.group(1)) if cap else float("nan")
            f = float(fp.group(1)) if fp else float("nan")
            print(f"{tsv.parent.name}/{cell}_{side}\t{wall:.0f}\t{c:.3f}\t{f:.1f}\t"
                  f"{100 * (c + f / 1e3) / wall if wall > 0 else float('nan'):.2f}")
PY
cat "$W/cost.tsv"
bundle
echo "===== done in $(( $(date +%s) - T0 )) s"
