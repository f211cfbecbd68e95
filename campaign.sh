#!/usr/bin/env bash
# Multi-round A/B of a screen's IR_CHANGED@*/BINARY_CHANGED operators over several devices: one ab_repeat.sh per
# device, serial within it. Orchestration only; every measurement is ab_repeat.sh's.
#
# - Operators are the screen rows with verdict $VERDICT, spread by measured time (partition.py,
#   longest first onto the least loaded device), not by name hash: on an S5000 hash shards
#   gave a 120-minute critical path with an idle card, measured time 70 minutes.
# - Each device gets its own AB_ROOT (eight drivers started in one second would collide on
#   the timestamped default) and ZL_ISOLATE_TUNER_CACHE=1 (eight processes must not write one
#   sqlite store). So absolute latencies are not comparable with shared-cache runs; the caliber
#   guard refuses such pairs by itself.
# - The device is pinned through the backend's own visibility variable (zl.backends).
#
# Examples:
#   SWITCH=FLAGTREE_MUSA_RLC_ENHANCE SCREEN=runs/ab_rlc_X/screen.tsv DEVICES=0,1,2,3 \
#     ZL_BACKEND=musa FLAGGEMS_DIR=/path/to/FlagGems DRY_RUN=1 bash campaign.sh
#   SWITCH=MY_SWITCH SCREEN=runs/screen_X/screen.tsv DEVICES=0,1 DRY_RUN=1 bash campaign.sh
#
# Variables:
#   SWITCH, SCREEN (required)  the switch under test; an ab_rlc_test.sh / run_batch.py screen.tsv
#   DEVICES        comma separated ids of letters, digits, _ . : - (default: the backend's visible devices)
#   ROUNDS=6  CELL_TIMEOUT=2400  VERDICT=IR_CHANGED,BINARY_CHANGED (IR_CHANGED, the earlier
#                  screens' one code verdict, matches every IR_CHANGED@<level>; "" = every row;
#                  NO_IR_DIFF and VARIANTS_DIFFER rows, whose common code is identical, are not
#                  planned by default; a word that names no verdict exits 2)
#   EXTRA_OPS      OPS words not in the screen (e.g. a benchmark just fixed): least loaded device
#   DRY_RUN=1      print the plan and each device's command; start nothing, create nothing
#   CAMPAIGN_ROOT  output root (default <runs>/campaign_<SWITCH>_<timestamp>)
#   ZL_RUN_PYTEST  passed to ab_repeat.sh (tests point it at a stub)
#   Every other variable reaches ab_repeat.sh and its runs (ZL_BACKEND, FLAGGEMS_DIR, ...).
#
# Outputs:
#   <root>/plan.tsv, <root>/device<D>/ (ab_repeat.sh's AB_ROOT), <root>/device<D>.log,
#   <root>/status.tsv (every device's status.tsv, first column `device`), non-zero cells and
#   marker totals printed at the end. <root>/card<D> and card<D>.log are links to device<D> and
#   device<D>.log, the names the first campaign.sh used, so paths written for it still resolve.
#
# Exit codes:
#   0  done (a failed device is reported, its log named)
#   2  bad variables or screen
#   3  nothing to plan (no row with that verdict)
set -uo pipefail

ZL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=zl/sh/ab_common.sh
source "$ZL_ROOT/zl/sh/ab_common.sh"

SWITCH="${SWITCH:-}"
SCREEN="${SCREEN:-}"
ROUNDS="${ROUNDS:-6}"
CELL_TIMEOUT="${CELL_TIMEOUT:-2400}"
VERDICT="${VERDICT-IR_CHANGED,BINARY_CHANGED}"
EXTRA_OPS="${EXTRA_OPS:-}"
[[ -n "$SWITCH" ]] || die2 "SWITCH is required (e.g. SWITCH=FLAGTREE_MUSA_RLC_ENHANCE)"
require_var_name SWITCH "$SWITCH"
[[ -n "$SCREEN" ]] || die2 "SCREEN is required: a screen.tsv of ab_rlc_test.sh"
[[ -f "$SCREEN" ]] || die2 "SCREEN does not exist: $SCREEN"
require_positive_int ROUNDS "$ROUNDS"
require_positive_int CELL_TIMEOUT "$CELL_TIMEOUT"
DRY="$("$PY" -m zl.switches DRY_RUN 0)" || exit 2

# The visibility variable, and the backend's visible devices only when DEVICES is unset
# (enumerating may probe the hardware, seconds). Python's status is checked before `read`
# (whose own status would hide an unknown backend).
BACKEND_INFO="$(DEVICES="${DEVICES:-}" "$PY" -c 'import os, sys
from zl.backends import UnknownBackendError, get_backend
try:
    b = get_backend()
except UnknownBackendError as exc:
    print(f"!!! {exc}", file=sys.stderr); sys.exit(2)
devs = os.environ["DEVICES"] or ",".join(b.enumerate_devices())
print(b.visibility_env_keys[0] if b.visibility_env_keys else "-", devs)')" || exit 2
read -r VIS_KEY DEFAULT_DEVICES <<< "$BACKEND_INFO"
[[ "$VIS_KEY" != "-" ]] || die2 "backend ${ZL_BACKEND:-cuda} has no visibility variable to pin a device"
DEVICES="${DEVICES:-$DEFAULT_DEVICES}"

echo ">>> switch=$SWITCH rounds=$ROUNDS devices=$DEVICES verdict=${VERDICT:-<any>} visibility=$VIS_KEY"
"$PY" "$ZL_ROOT/partition.py" --screen "$SCREEN" --devices "$DEVICES" --verdict "$VERDICT" \
  --rounds "$ROUNDS" --extra "$EXTRA_OPS"
rc=$?; (( rc == 0 )) || exit "$rc"
mapfile -t PLAN < <("$PY" "$ZL_ROOT/partition.py" --screen "$SCREEN" --devices "$DEVICES" \
  --verdict "$VERDICT" --rounds "$ROUNDS" --extra "$EXTRA_OPS" --format shell 2>/dev/null)
(( ${#PLAN[@]} )) || die2 "partition.py produced no plan"

BASE="${ZL_RUNS_ROOT:-$ZL_ROOT/runs}"
ROOT="${CAMPAIGN_ROOT:-$BASE/campaign_${SWITCH}_$(date +%Y%m%d-%H%M%S)}"
TAB=$'\t'

if [[ "$DRY" == 1 ]]; then
  echo ">>> DRY_RUN=1: nothing started. Each device would run:"
  for row in "${PLAN[@]}"; do
    IFS="$TAB" read -r dev ops _pair est <<< "$row"
    if [[ -z "$ops" ]]; then echo "    device $dev: (nothing)"; continue; fi
    printf '    device %s (~%s min): %s=%s ZL_DEVICE=%s ZL_ISOLATE_TUNER_CACHE=1 AB_ROOT=%s SWITCH=%s ROUNDS=%s OPS="%s" bash ab_repeat.sh\n' \
      "$dev" "$(( est / 60 ))" "$VIS_KEY" "$dev" "$dev" "$ROOT/device$dev" "$SWITCH" "$ROUNDS" "$ops"
  done
  exit 0
fi

mkdir -p "$ROOT" || die2 "cannot create $ROOT"
ROOT="$(cd "$ROOT" && pwd)"
printf 'device\tops\tpair_s\testimate_s\n' > "$ROOT/plan.tsv"
printf '%s\n' "${PLAN[@]}" >> "$ROOT/plan.tsv"
echo ">>> campaign root: $ROOT"

PIDS=(); DEVS=()
stop_all() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; }
trap 'echo "!!! campaign interrupted: stopping the devices"; stop_all; exit 130' INT TERM
for row in "${PLAN[@]}"; do
  IFS="$TAB" read -r dev ops _pair _est <<< "$row"
  if [[ -z "$ops" ]]; then echo ">>> device $dev: nothing planned"; continue; fi
  mkdir -p "$ROOT/device$dev"
  env "$VIS_KEY=$dev" ZL_DEVICE="$dev" ZL_ISOLATE_TUNER_CACHE=1 AB_ROOT="$ROOT/device$dev" \
    SWITCH="$SWITCH" ROUNDS="$ROUNDS" CELL_TIMEOUT="$CELL_TIMEOUT" OPS="$ops" NO_COLOR=1 \
    bash "$ZL_ROOT/ab_repeat.sh" > "$ROOT/device$dev.log" 2>&1 &
  PIDS+=("$!"); DEVS+=("$dev")
  # Relative links (they survive moving the root); never over something already there.
  for name in "card$dev" "card$dev.log"; do
    [[ -e "$ROOT/$name" || -L "$ROOT/$name" ]] || ln -s "${name/#card/device}" "$ROOT/$name"
  done
  echo ">>> device $dev: pid $! OPS=\"$ops\""
done

failed=0
for i in "${!PIDS[@]}"; do
  if wait "${PIDS[$i]}"; then
    echo ">>> device ${DEVS[$i]} done"
  else
    rc=$?; failed=$((failed + 1))
    echo "!!! device ${DEVS[$i]} ended rc=$rc: read $ROOT/device${DEVS[$i]}.log"
  fi
done
trap - INT TERM

# One table with the device in front; columns are found by name, not position.
{
  header_done=0
  for dev in "${DEVS[@]}"; do
    f="$ROOT/device$dev/status.tsv"
    [[ -f "$f" ]] || continue
    if (( ! header_done )); then printf 'device\t%s\n' "$(head -n 1 "$f")"; header_done=1; fi
    tail -n +2 "$f" | sed "s/^/${dev}${TAB}/"
  done
} > "$ROOT/status.tsv.tmp" && mv -f "$ROOT/status.tsv.tmp" "$ROOT/status.tsv"

echo "########## campaign summary ##########"
echo ">>> devices failed: $failed / ${#PIDS[@]}"
if [[ -s "$ROOT/status.tsv" ]]; then
  awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { n++; if ($c["rc"] != 0) bad++; fb += $c["replay_fallback"]; ng += $c["no_cudagraph"]; po += $c["capture_poisoned"] }
    END { printf ">>> cells: %d, non-zero rc: %d\n", n, bad
          printf ">>> markers: replay_fallback=%d no_cudagraph=%d capture_poisoned=%d\n", fb, ng, po }' "$ROOT/status.tsv"
fi
echo ">>> merged per-cell status: $ROOT/status.tsv"
echo ">>> reports: python batch_summary.py --ab-rounds $ROOT/device<D>/<op> --label <op> (card<D> links to device<D>)"
echo ">>> tuner caches were isolated: do not compare these absolute latencies with shared-cache runs"
exit 0
