"""The one reading of on/off values, for every plugin, planner and driver.

Why one: the planner stripped `ZL_ENABLE_AUTOTUNE=' 0'` and dropped the autotune plugin
while run_pytest.sh compared the raw string, wrote `autotune_mode=replay` and skipped its
refusal; the pair then compared as a valid A/B. Every reader now calls `parse_switch`
(shell scripts through `python -m zl.switches NAME`), so a value means the same thing
everywhere, and a word that is neither on nor off is an error naming the variable instead
of a guess.
"""

from __future__ import annotations

import os
import sys
from typing import Iterable, Mapping, Optional

ON_WORDS = ("1", "true", "yes", "on", "always")
OFF_WORDS = ("0", "false", "no", "off", "never")


class SwitchError(ValueError):
    """A switch's value is neither an on word nor an off word."""


def parse_switch(value: Optional[str], default: bool, name: str = "value",
                 extra_off: Iterable[str] = ()) -> bool:
    """True/False for an on/off word; empty or unset -> `default`; anything else -> SwitchError.

    Case and surrounding whitespace are ignored. `extra_off` adds words a caller also
    reads as off (the timer accepts `direct`).
    """
    word = (value or "").strip().lower()
    if not word:
        return default
    if word in ON_WORDS:
        return True
    if word in OFF_WORDS or word in tuple(w.lower() for w in extra_off):
        return False
    allowed = ", ".join(ON_WORDS + OFF_WORDS + tuple(extra_off))
    raise SwitchError(f"{name}={value!r} is not an on/off value (one of: {allowed})")


def env_switch(name: str, default: bool, environ: Optional[Mapping[str, str]] = None,
               extra_off: Iterable[str] = ()) -> bool:
    """parse_switch of environment variable `name`."""
    env = os.environ if environ is None else environ
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
