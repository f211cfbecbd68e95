# Source from the repo root on a GPU machine: installs the carried wheels (.whl/)
# into /tmp/site and points FLAGGEMS_DIR at the carried checkout (.fg/) unless set.
# Prints the interpreter, torch/triton versions and the GPU so every log says
# where it ran.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || return 1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export FLAGGEMS_DIR="${FLAGGEMS_DIR:-$PWD/.fg}"
export PYTHONPATH="$PYTHONPATH:$FLAGGEMS_DIR/src"
export PYTHONUNBUFFERED=1
python3 - <<'PY'
import sys, torch, triton
print(f"python={sys.executable} torch={torch.__version__} triton={triton.__version__} "
      f"gpu={torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
PY

# For benchmarks/device_round*.sh: `round_dir NAME` makes the work dir $W under $OUT;
# `bundle` (re)writes $OUT/NAME.tgz from it, IR dumps left out, after every stage, so a
# call cut at its limit still returns what finished.
round_dir() {
  W="${OUT:?set OUT}/work"; mkdir -p "$W"
  ROUND_TGZ="$OUT/$1.tgz"
}
bundle() { tar -czf "${ROUND_TGZ:?call round_dir first}" -C "$W" --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' .; }
