"""The on/off words and their one parser (no environment: zl.switches reads variables).

Why one: the planner stripped `ZL_ENABLE_AUTOTUNE=' 0'` and dropped the autotune plugin
while run_pytest.sh compared the raw string, wrote `autotune_mode=replay` and skipped its
refusal; the pair then compared as a valid A/B. Every reader calls `parse_switch`, so a
value means the same thing everywhere, and a word that is neither on nor off is an error
naming the variable instead of a guess.
"""

from __future__ import annotations

from typing import Iterable, Optional

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
