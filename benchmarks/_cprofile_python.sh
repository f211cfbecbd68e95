#!/usr/bin/env bash
# Helper, not a tool: ZL_PYTHON for a profiled zl_bench run (graph_timer_cost.py wall
# --profile). run_pytest.sh calls its python for its helper modules and for `-u -m pytest`;
# only the pytest call is profiled, to ZL_CPROFILE_OUT, so the file holds pytest's process and
# nothing else. Every argument is passed on to the interpreter (ZL_CPROFILE_PY, default python3).
py="${ZL_CPROFILE_PY:-python3}"
if [[ "${1:-}" == -u && "${2:-}" == -m && "${3:-}" == pytest ]]; then
  exec "$py" -u -m cProfile -o "${ZL_CPROFILE_OUT:?set ZL_CPROFILE_OUT}" "${@:2}"
fi
exec "$py" "$@"
