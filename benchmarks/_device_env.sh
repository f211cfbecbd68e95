# Helper, not a tool: sourced from the repo root by the GPU checks in benchmarks/. Installs
# wheels carried in .whl/ (if any) into /tmp/site, points FLAGGEMS_DIR at .fg/ unless it is
# set, puts FlagGems' src/ on PYTHONPATH, and prints the interpreter, torch/triton versions and
# the GPU so every log says where it ran.
# Installed once: two scripts sourcing this side by side must not race on one --target.
if ls .whl/*.whl >/dev/null 2>&1 && [[ ! -d /tmp/site/sqlalchemy ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || return 1
fi
if [[ -d /tmp/site/sqlalchemy && ":${PYTHONPATH:-}:" != *":/tmp/site:"* ]]; then
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export FLAGGEMS_DIR="${FLAGGEMS_DIR:-$PWD/.fg}"
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$FLAGGEMS_DIR/src"
export PYTHONUNBUFFERED=1
python3 - <<'PY'
import sys, torch, triton
print(f"python={sys.executable} torch={torch.__version__} triton={triton.__version__} "
      f"gpu={torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
PY

# `upstream_node_ids RUN_NAME...`: one line per name, `benchmark/<test_file>::test_<op>` from
# ops/inventory_main.csv (zl.batch.inventory), for running upstream pytest on a batch's nodes;
# an unknown name fails the call (exit 2) instead of passing pytest an empty node id.
upstream_node_ids() {
  python3 - "$@" <<'PY'
import sys
from zl.batch.inventory import read_csv
by_name = {e.run_name: e for e in read_csv("ops/inventory_main.csv")[0]}
unknown = [n for n in sys.argv[1:] if n not in by_name]
if unknown:
    print(f"!!! not in ops/inventory_main.csv: {' '.join(unknown)}", file=sys.stderr)
    sys.exit(2)
for n in sys.argv[1:]:
    print(f"benchmark/{by_name[n].test_file}::test_{by_name[n].op}")
PY
}
