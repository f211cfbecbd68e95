#!/usr/bin/env bash
# One command from nothing to an A/B report page: a record run of OP, its replay, the
# --ab comparison and a self-contained HTML page.
#
# Modes:
#   real  FLAGGEMS_DIR is set and the backend ($ZL_BACKEND, default cuda) sees a device:
#         run_pytest.sh records OP, then replays it (REPLAY_FROM), then batch_summary.py
#         --ab ... --html. Both sides run the same code, so the page is an A/A: the
#         machine's noise floor for OP. Put your switch on side B with AFTER_ENV.
#   demo  FLAGGEMS_DIR unset: the same steps against the bundled FlagGems-shaped tree
#         (tests/fake_flaggems) in Triton's interpreter on the CPU (TRITON_INTERPRET=1,
#         the CPU timing driver of tests/harness). Both run_identity.json files get
#         demo=cpu-interpreter, which puts a banner on the page: the numbers mean nothing.
#
# Examples:
#   bash demo.sh                 # no GPU, no FlagGems: CPU demo (numbers mean nothing)
#   FLAGGEMS_DIR=/path/to/FlagGems OP=softmax bash demo.sh     # GPU machine: the real job
#   bash demo.sh --help          # this text; starts nothing
#
# Variables:
#   OP, OP_FILE     operator and benchmark file stem (default softmax / $OP)
#   FLAGGEMS_DIR    a real FlagGems checkout (real mode)
#   DEMO_ROOT       output root (default $ZL_RUNS_ROOT or <repo>/runs, then demo_<op>_<timestamp>)
#   AFTER_ENV       space-separated NAME=VALUE set on side B only (e.g. your switch), real mode
#   ZL_ISOLATE_TUNER_CACHE  default 1 here, both modes: each side gets a private FlagGems tuner
#                   store (0 shares ~/.flaggems, and the report then warns that side A
#                   recorded on a shared cache)
#   ZL_PYTHON       interpreter (default python, else python3)
#
# Outputs:
#   <root>/before, <root>/after (run directories), <root>/report.html, <root>/report.json
#
# Exit codes:
#   0  page written
#   2  bad argument or variable
#   3  FLAGGEMS_DIR set but no device visible
#   any other code: the failing step's status (run_pytest.sh / batch_summary.py)
set -uo pipefail

ZL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  -h|--help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "demo.sh: no arguments besides --help (got: $*); see bash demo.sh --help" >&2; exit 2 ;;
esac

OP="${OP:-softmax}"
OP_FILE="${OP_FILE:-$OP}"
if [[ -n "${ZL_PYTHON:-}" ]]; then PY="$ZL_PYTHON"
elif command -v python >/dev/null 2>&1; then PY=python
else PY=python3; fi
# shellcheck source=zl/sh/kit.sh
source "$ZL_ROOT/zl/sh/kit.sh"
[[ "$OP" =~ ^[A-Za-z0-9_]+$ ]] || { echo "demo.sh: OP must be a test function name (got: $OP)" >&2; exit 2; }
[[ "$OP_FILE" =~ ^[A-Za-z0-9_]+$ ]] || { echo "demo.sh: OP_FILE must be a file stem (got: $OP_FILE)" >&2; exit 2; }

for w in ${AFTER_ENV:-}; do
  [[ "$w" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "demo.sh: AFTER_ENV words must be NAME=VALUE (got: $w)" >&2; exit 2; }
done

FAKE="$ZL_ROOT/tests/fake_flaggems"
if [[ -n "${FLAGGEMS_DIR:-}" ]]; then
  MODE=real
  n_dev="$("$PY" -c \
    'from zl.backends import get_backend; print(get_backend().probe_device_count())' 2>/dev/null)" || n_dev=0
  if [[ ! "$n_dev" =~ ^[1-9][0-9]*$ ]]; then
    echo "!!! demo.sh: FLAGGEMS_DIR=$FLAGGEMS_DIR is set but backend ${ZL_BACKEND:-cuda} sees no device." >&2
    echo "!!! demo.sh: unset FLAGGEMS_DIR for the CPU demo, or run this on the GPU machine." >&2
    exit 3
  fi
else
  MODE=demo
fi

STAMP="$(date +%Y%m%d-%H%M%S)"
ROOT="${DEMO_ROOT:-${ZL_RUNS_ROOT:-$ZL_ROOT/runs}/demo_${OP}_$STAMP}"
mkdir -p "$ROOT" || { echo "demo.sh: cannot create $ROOT" >&2; exit 2; }
ROOT="$(cd "$ROOT" && pwd)"

if [[ "$MODE" == demo ]]; then
  cat <<EOF
################################################################################
# CPU DEMO: no FLAGGEMS_DIR, so this runs $OP from the bundled fake FlagGems tree
# in Triton's interpreter on the CPU. The latencies and speedups it prints MEAN
# NOTHING; it only shows the workflow (record, replay, --ab, HTML page).
# Real job: FLAGGEMS_DIR=/path/to/FlagGems OP=$OP bash demo.sh on a GPU machine.
################################################################################
EOF
  export FLAGGEMS_DIR="$FAKE" TRITON_INTERPRET=1
  export PYTHONPATH="$FAKE/src${PYTHONPATH:+:$PYTHONPATH}"   # the fake flag_gems
  # The fake tree's own small shape set.
  export SHAPE_FILE=upstream
  AFTER_ENV=""
else
  echo ">>> demo.sh: real run of $OP with FLAGGEMS_DIR=$FLAGGEMS_DIR (backend ${ZL_BACKEND:-cuda}, $n_dev device(s))"
fi
export OP OP_FILE ZL_PYTHON="$PY"
# A private tuner store per side, as the A/B drivers do: on the shared one, side A's sweep
# starts from whatever earlier runs left there, and the report warns about exactly that. The
# main command must not warn about its own defaults.
export ZL_ISOLATE_TUNER_CACHE="${ZL_ISOLATE_TUNER_CACHE:-1}"
# Each step under zl.supervise: killed, even by SIGKILL, demo.sh takes the running step along.
step() { "$PY" -m zl.supervise --parent "$$" -- "$@"; }

echo ">>> [1/3] side A: record $OP -> $ROOT/before"
OUT_DIR="$ROOT/before" step bash "$ZL_ROOT/run_pytest.sh"; rc=$?
(( rc == 0 )) || { echo "!!! demo.sh: side A failed (rc=$rc); see $ROOT/before/run.log" >&2; exit "$rc"; }
echo ">>> [2/3] side B: replay side A's autotune picks -> $ROOT/after"
# shellcheck disable=SC2086  # AFTER_ENV is a list of NAME=VALUE words
step env ${AFTER_ENV:-} OUT_DIR="$ROOT/after" REPLAY_FROM="$ROOT/before" bash "$ZL_ROOT/run_pytest.sh"; rc=$?
(( rc == 0 )) || { echo "!!! demo.sh: side B failed (rc=$rc); see $ROOT/after/run.log" >&2; exit "$rc"; }

if [[ "$MODE" == demo ]]; then
  for side in before after; do
    "$PY" -m zl.identity "$ROOT/$side" --set demo=cpu-interpreter >/dev/null \
      || { echo "!!! demo.sh: could not mark $ROOT/$side as a demo run" >&2; exit 2; }
  done
fi

echo ">>> [3/3] A/B report"
step "$PY" "$ZL_ROOT/batch_summary.py" --ab "$ROOT/before" "$ROOT/after" --label "$OP" \
  --json "$ROOT/report.json" --html "$ROOT/report.html"; rc=$?
(( rc == 0 )) || { echo "!!! demo.sh: batch_summary.py failed (rc=$rc)" >&2; exit "$rc"; }
[[ "$MODE" == demo ]] && echo ">>> CPU DEMO finished: the numbers above and in the page mean nothing."
echo ">>> page: $ROOT/report.html"
