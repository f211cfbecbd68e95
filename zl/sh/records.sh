# zl_read_records: read NUL-terminated records from stdin into shell variables, as data, never as code.
# A record is `NAME=value` (a scalar), `NAME[]=value` (appended to array NAME) or
# `env.NAME=value` (exported to the processes this shell starts). The last record a producer
# ends with, `ZL_RC=<its exit status>` (`cmd; printf 'ZL_RC=%s\0' "$?"`), is the status this
# function returns; a missing one is 1. Names are checked: a record naming anything else is refused.
zl_read_records() {
  local rec key val rc=1
  while IFS= read -r -d '' rec; do
    key=${rec%%=*}; val=${rec#*=}
    case $key in
      ZL_RC) rc=$val ;;
      env.*)
        key=${key#env.}
        [[ $key =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || { echo "!!! bad record name: $key" >&2; return 2; }
        export "$key=$val" ;;
      *'[]')
        key=${key%'[]'}
        [[ $key =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || { echo "!!! bad record name: $key" >&2; return 2; }
        declare -n _zl_arr=$key
        _zl_arr+=("$val")
        unset -n _zl_arr ;;
      *)
        [[ $key =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || { echo "!!! bad record name: $key" >&2; return 2; }
        printf -v "$key" '%s' "$val" ;;
    esac
  done
  return "$rc"
}
