"""One definition of how the pretty-report plugin folds a table's Size Detail column.

Upstream prints each row's inputs as Python's str() of a list, e.g.
`[torch.Size([4096, 4096]), 1, torch.float16]`. For MoE-style operators a row
runs to ~400 characters while most elements are identical down the table. The
pretty-report plugin prints those constant elements once, as a legend line under
the header, and keeps only the varying elements in each row:

    ---------------------------------------------------------------
      [same for all rows] {"n": 3, "fixed": {"1": "1", "2": "torch.float16"}}
    SUCCESS   ...          [torch.Size([4096, 4096])]

`unfold()` rebuilds the exact upstream text, so a folded table and an unfolded
one pair by the same size detail (the run.log parser calls it).
"""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Tuple

LEGEND_PREFIX = "[same for all rows] "

_OPEN = "([{"
_CLOSE = ")]}"


def split_top_level(detail: str) -> Optional[List[str]]:
    """Split `[a, b(c, d), e]` into ['a', 'b(c, d)', 'e']; None if not a list text."""
    text = detail.strip()
    if len(text) < 2 or text[0] != "[" or text[-1] != "]":
        return None
    inner = text[1:-1]
    if not inner.strip():
        return []
    parts, depth, start, quote = [], 0, 0, ""
    for i, ch in enumerate(inner):
        if quote:
            if ch == quote and inner[i - 1] != "\\":
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    if depth != 0 or quote:
        return None
    parts.append(inner[start:].strip())
    return parts


def join_list(parts: List[str]) -> str:
    return "[" + ", ".join(parts) + "]"


def fold(details: List[Optional[str]]) -> Optional[Tuple[Dict, List[str]]]:
    """-> (legend, shown details) or None when folding would not help or is unsafe."""
    if len(details) < 2 or any(d is None for d in details):
        return None
    split = [split_top_level(d) for d in details]
    if any(s is None for s in split):
        return None
    n = len(split[0])
    if n < 2 or any(len(s) != n for s in split):
        return None
    # Round-trip guard: only fold text that unfold() will rebuild byte for byte.
    if any(join_list(s) != d.strip() for s, d in zip(split, details)):
        return None
    fixed = {i: split[0][i] for i in range(n) if all(s[i] == split[0][i] for s in split)}
    if not fixed or len(fixed) == n:
        return None
    legend = {"n": n, "fixed": {str(i): v for i, v in sorted(fixed.items())}}
    shown = [join_list([p for i, p in enumerate(s) if i not in fixed]) for s in split]
    return legend, shown


def legend_line(legend: Dict) -> str:
    return "  " + LEGEND_PREFIX + json.dumps(legend, ensure_ascii=False)


class LegendError(ValueError):
    """A line that starts like a legend but cannot be one: rows under it cannot be unfolded,
    so pairing them would silently compare different size details."""


def parse_legend_line(line: str) -> Optional[Dict]:
    """The legend of a `[same for all rows] {...}` line; None for any other line;
    LegendError when the line has the prefix but a broken legend."""
    text = line.strip()
    if not text.startswith(LEGEND_PREFIX.strip()):
        return None
    try:
        legend = json.loads(text[len(LEGEND_PREFIX.strip()):].strip())
    except ValueError as exc:
        raise LegendError(f"legend is not valid JSON ({exc})") from None
    _check_legend(legend)
    return legend


def _check_legend(legend) -> None:
    if not isinstance(legend, dict) or "n" not in legend or "fixed" not in legend:
        raise LegendError('legend must be an object with "n" and "fixed"')
    n, fixed = legend["n"], legend["fixed"]
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise LegendError(f'legend "n" must be a positive integer, got {n!r}')
    if not isinstance(fixed, dict) or not all(isinstance(v, str) for v in fixed.values()):
        raise LegendError('legend "fixed" must map positions to text')
    if not all(str(k).isdigit() and int(k) < n for k in fixed):
        raise LegendError(f'legend "fixed" positions must be integers below n={n}')


def unfold(shown: str, legend: Optional[Dict]) -> str:
    """Rebuild the upstream Size Detail text from a folded row and its legend."""
    if not legend:
        return shown
    parts = split_top_level(shown)
    n = int(legend["n"])
    fixed = {int(k): v for k, v in legend["fixed"].items()}
    if parts is None or len(parts) + len(fixed) != n:
        return shown
    varying = iter(parts)
    return join_list([fixed[i] if i in fixed else next(varying) for i in range(n)])
