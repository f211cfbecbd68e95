#!/usr/bin/env bash
# Autotune record / replay on real FlagGems (one GPU): the replay runs exactly the recorded
# configs, and an edited record moves exactly the edited shape.
#
#   FLAGGEMS_DIR=/path/to/FlagGems OUT=/tmp/out bash benchmarks/autotune_replay_check.sh
#
# 1. mm, softmax and softmax_backward, upstream core shapes (SHAPE_FILE=upstream), DTYPES (default
#    float16), private tuner cache: record (A), then replay A (B). B must print zero
#    AUTOTUNE_REPLAY_FALLBACK and the configs it ran (<op>.used.json) must equal A's
#    record, kernel by kernel and key by key; A's mm record must contain mm kernels.
# 2. mm replayed from an edited copy of A (one key's num_warps changed: 4 <-> 8,
#    anything else -> 4): the edited run must use the edited config for that key,
#    and the latency table is paired row by row with B, so the shape(s) of the
#    edited key should be the one(s) that move.
# Writes to $OUT (at most 8 files):
#   verdict.txt    PASS/FAIL lines and the paired mm latency table (B vs edited)
#   runs.log       the tail of every run's stdout/stderr
#   mm_A.json mm_B.used.json mm_edit.used.json softmax_A.json softmax_backward_A.json
#   identity.tsv   autotune_mode / tuner_cache / timer of every run
# Exit 0 only when every check passes; 2 FLAGGEMS_DIR unset or not a FlagGems checkout
# (no benchmark/). Budget: about 6 minutes on an H200.
set -u
source "$(dirname "$0")/../zl/sh/entry.sh" "$@"   # --help, and no arguments
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$HERE/runs/autotune_replay_check_out}"
zl_require_flaggems_and_out
DTYPES="${DTYPES:-float16}"
# CHECK_OPS="mm" skips the softmax pair (a short device call that only re-checks mm).
CHECK_OPS="${CHECK_OPS:-mm softmax}"
mkdir -p "$OUT"
: >"$OUT/runs.log"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/zl_autotune_replay_check.XXXXXX")"
export ZL_PYTHON="${ZL_PYTHON:-python3}"

run() {  # run NAME [VAR=VALUE ...]
  local name="$1"; shift
  validate_run "$name" 150 SHAPE_FILE=upstream DTYPES="$DTYPES" ZL_ISOLATE_TUNER_CACHE=1 "$@"
}

fail=0
run mm_A OP=mm OP_FILE=mm || fail=1
run mm_B OP=mm OP_FILE=mm REPLAY_FROM="$WORK/mm_A" || fail=1
if [[ "$CHECK_OPS" == *softmax* ]]; then
  run softmax_A OP=softmax OP_FILE=softmax || fail=1
  run softmax_B OP=softmax OP_FILE=softmax REPLAY_FROM="$WORK/softmax_A" || fail=1
  # Upstream forward softmax is heuristics-only (no autotuner): its record is expected
  # empty. The backward kernels are @triton.autotune, so they carry the softmax check.
  run softmax_backward_A OP=softmax_backward OP_FILE=softmax || fail=1
  run softmax_backward_B OP=softmax_backward OP_FILE=softmax REPLAY_FROM="$WORK/softmax_backward_A" || fail=1
fi

# Edited copy of mm_A: one key gets a different num_warps.
EDIT_INFO="$("$ZL_PYTHON" - "$WORK/mm_A" "$WORK/mm_A_edit" <<'PY'
import json, shutil, sys
src, dst = sys.argv[1:3]
shutil.copytree(src, dst)
path = f"{dst}/autotune_records/mm.json"
doc = json.load(open(path))
for kernel in sorted(doc):
    if doc[kernel]:
        key = sorted(doc[kernel])[0]
        cfg = doc[kernel][key]
        old = cfg.get("num_warps")
        cfg["num_warps"] = {4: 8, 8: 4}.get(old, 4)
        json.dump(doc, open(path, "w"), indent=2, sort_keys=True)
        print(f"{kernel}\t{key}\t{old}\t{cfg['num_warps']}")
        break
PY
)"
run mm_edit OP=mm OP_FILE=mm REPLAY_FROM="$WORK/mm_A_edit" || fail=1

for f in mm_A/autotune_records/mm.json:mm_A.json mm_B/autotune_records/mm.used.json:mm_B.used.json \
         mm_edit/autotune_records/mm.used.json:mm_edit.used.json \
         softmax_A/autotune_records/softmax.json:softmax_A.json \
         softmax_backward_A/autotune_records/softmax_backward.json:softmax_backward_A.json; do
  cp -f "$WORK/${f%%:*}" "$OUT/${f##*:}" 2>/dev/null || echo "missing $WORK/${f%%:*}" >>"$OUT/runs.log"
done

"$ZL_PYTHON" - "$WORK" "$OUT" "$EDIT_INFO" "$CHECK_OPS" <<'PY' || fail=1
import json, re, sys
from pathlib import Path
work, out, edit = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
ops = ("mm", "softmax", "softmax_backward") if "softmax" in sys.argv[4] else ("mm",)
lines, ok = [], True

def check(cond, text):
    global ok
    ok &= bool(cond)
    lines.append(f"{'PASS' if cond else 'FAIL'} {text}")

def load(p):
    try:
        return json.loads(p.read_text())
    except Exception:
        return None

def log(name):
    p = work / name / "run.log"
    return p.read_text(errors="replace") if p.is_file() else ""

ident_rows = ["run\tautotune_mode\ttuner_cache\ttimer"]
for name in [n for n in ("mm_A", "mm_B", "mm_edit", "softmax_A", "softmax_B",
                          "softmax_backward_A", "softmax_backward_B") if n.split("_")[0] in ops]:
    i = load(work / name / "run_identity.json") or {}
    ident_rows.append(f"{name}\t{i.get('autotune_mode')}\t{i.get('tuner_cache')}\t{i.get('timer')}")
(out / "identity.tsv").write_text("\n".join(ident_rows) + "\n")

for op in ops:
    rec = load(work / f"{op}_A" / "autotune_records" / f"{op}.json")
    # A replay that ran no autotuned kernel writes no .used.json: same as {}.
    used = load(work / f"{op}_B" / "autotune_records" / f"{op}.used.json") or {}
    n = sum(len(v) for v in (rec or {}).values())
    desc = f"{op}: record written ({n} configs, kernels: {sorted(rec or {})})"
    if op == "softmax":  # heuristics-only upstream: an empty record is the right answer
        check(rec is not None, desc + " [forward softmax has no autotuner upstream]")
    else:
        check(rec, desc)
    check((rec or {}) == used, f"{op}: replay ran exactly the recorded configs")
    fb = log(f"{op}_B").count("AUTOTUNE_REPLAY_FALLBACK")
    check(fb == 0, f"{op}: AUTOTUNE_REPLAY_FALLBACK in replay = {fb}")
    check(log(f"{op}_B").count("SUCCESS") > 0, f"{op}: replay produced rows")
rec = load(work / "mm_A" / "autotune_records" / "mm.json") or {}
check(any("mm" in k for k in rec), "mm: the record holds mm kernels (libtuner / autotune)")

kernel, key, old, new = (edit.split("\t") + ["", "", "", ""])[:4]
used = load(work / "mm_edit" / "autotune_records" / "mm.used.json") or {}
got = used.get(kernel, {}).get(key, {}).get("num_warps")
check(str(got) == new, f"edited record: {kernel} key={key} num_warps {old} -> {new}, run used {got}")

(out / "verdict.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if ok else 1)
PY
# The latency comparison goes through the project's own pairing (dtype, size detail,
# occurrence index), so repeated size details (mm's core list has two 4096x4096 rows) stay apart.
{
  echo
  echo "mm gems latency: replay of A (before) vs replay of the edited record (after); edited key: $(cut -f2 <<<"$EDIT_INFO")"
  "$ZL_PYTHON" "$HERE/batch_summary.py" --ab "$WORK/mm_B" "$WORK/mm_edit" --label mm 2>&1 \
    || { echo "FAIL mm: batch_summary could not pair B with the edited run"; false; }
} >>"$OUT/verdict.txt" || fail=1
rm -rf "$WORK"
exit $fail
