"""On/off variables, for every plugin, planner and driver: `zl.onoff`'s one parser over a
variable (`env_switch`), and the shell's reader `python -m zl.switches NAME [DEFAULT]`.
Variables are read through zl.config (the one reader of the environment).
"""

from __future__ import annotations

import sys
from typing import Iterable, Mapping, Optional

from zl.config import environ as _environ
from zl.onoff import OFF_WORDS, ON_WORDS, SwitchError, parse_switch

__all__ = ["OFF_WORDS", "ON_WORDS", "SwitchError", "env_switch", "main", "parse_switch"]


def env_switch(name: str, default: bool, environ: Optional[Mapping[str, str]] = None,
               extra_off: Iterable[str] = ()) -> bool:
    """parse_switch of variable `name` in `environ` (default: this process's environment)."""
    env = _environ() if environ is None else environ
    return parse_switch(env.get(name), default, name=name, extra_off=extra_off)


def main(argv: Optional[list] = None) -> int:
    """`python -m zl.switches NAME [DEFAULT]`: print 1 or 0 for $NAME; exit 2 naming a bad value."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or len(args) > 2:
        print("usage: python -m zl.switches NAME [DEFAULT(0|1)]  -> prints 1 or 0; exit 2 on a bad value",
              file=sys.stderr if args and args[0] not in ("-h", "--help") else sys.stdout)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        default = parse_switch(args[1], False, name="DEFAULT") if len(args) == 2 else False
        print(1 if env_switch(args[0], default) else 0)
    except SwitchError as exc:
        print(f"!!! {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
