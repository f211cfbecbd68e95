# Sourced by the session plans after call_clock.sh: the issue 18 cost table's repetitions.
# SIX: the six operators (op:file) of different kinds. `rotated r` lists them starting r-1
# places later, so over repetitions each operator sits at odd and even positions (issue18.py
# alternates which side of a pair runs first by position). `cost_rep WORK OPS MARGIN`: one
# repetition (upstream and after1 of each operator) into $OUT/WORK, no new run started later
# than MARGIN seconds before the call's end.
SIX=(softmax_backward_out:softmax clamp:clamp sum:sum softmax:softmax index_select:index_select mm:mm)
rotated() { local r=$1 n=${#SIX[@]} out=() i; for ((i = 0; i < n; i++)); do out+=("${SIX[$(( (i + r - 1) % n ))]}"); done
  local IFS=,; echo "${out[*]}"; }
cost_rep() {
  WORK=$1 OPS="$2" RUNS=upstream,after1 STAGES=wall,summary \
    WALL_DEADLINE_S=$(( $(left) - $3 )) RUN_TIMEOUT_S=90 tied timeout $(( $(left) - 10 )) bash $S/device_issue18.sh
}
# `pool_reps NAME...`: issue18_pooled.py over those of $OUT/issue18_NAME/ that came back (a
# wall.json), into $OUT/pooled.md; 2 when none did, else the pooling's own exit status.
pool_reps() {
  local works=() w
  for w in "$@"; do [[ -f "$OUT/issue18_$w/wall.json" ]] && works+=("$OUT/issue18_$w"); done
  (( ${#works[@]} )) || { echo "no issue18_rep*/wall.json under $OUT" >&2; return 2; }
  python3 $S/issue18_pooled.py --out "$OUT/pooled.md" "${works[@]}"
}
