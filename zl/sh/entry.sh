# Shared entry of the shell commands (run_pytest.sh and the A/B drivers), sourced with the
# caller's arguments: --help / -h prints the caller's header comment and starts nothing; any
# other argument is refused (every knob is an environment variable: `run_pytest.sh --help`
# once started a real run). PY is the interpreter the command runs.
case "${1:-}" in
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  "") ;;
  *) echo "!!! $(basename "$0") takes no arguments (got: $1); every knob is an environment variable, see --help" >&2
     exit 2 ;;
esac
PY="${ZL_PYTHON:-$(command -v python || command -v python3)}"
# shellcheck source=kit.sh
source "$(dirname "${BASH_SOURCE[0]}")/kit.sh"
