# Sourced with PY set: the zl_bench kit must be installed for PY (`pip install -e <checkout>
# --no-deps`) and be this checkout's. A command of one checkout running another checkout's
# plugins would measure code nobody asked for. Checked from / so the caller's directory
# cannot stand in for an install. Exit 3 `!!! PREFLIGHT_FAILED check=interpreter` otherwise.
_zl_checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
if [[ -n "${PY:-}" ]]; then
  _zl_found="$(cd / && "$PY" -c 'import os, zl; print(os.path.realpath(os.path.dirname(os.path.dirname(zl.__file__))))' 2>/dev/null)"
  if [[ -z "$_zl_found" ]]; then
    echo "!!! PREFLIGHT_FAILED check=interpreter detail='zl_bench is not installed for $PY: pip install -e $_zl_checkout --no-deps'" >&2
    exit 3
  elif [[ "$_zl_found" != "$_zl_checkout" ]]; then
    echo "!!! PREFLIGHT_FAILED check=interpreter detail='$PY imports zl_bench from $_zl_found, not from this checkout $_zl_checkout: pip install -e $_zl_checkout --no-deps'" >&2
    exit 3
  fi
fi
