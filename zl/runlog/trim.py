"""A log without the FlagGems source lines it quotes, so it can be committed as evidence.

pytest and Python quote source in three places: the line under a traceback's
`File "...", line N`, the line under a `path.py:N: SomeWarning`, and the code context
pytest prints in its FAILURES/ERRORS section (`>   ...`). FlagGems code must not be
committed, so those lines go; the `E ...` messages and `path:N: Error` locations stay, and
they are what says why a node failed. Lines may carry a time stamp prefix
(upstream_node_seconds.sh's `<epoch> <line>`, graph_timer_cost.py's timeline.tsv
`<seconds><TAB><line>`); it is kept and ignored when matching.

    python3 -m zl.runlog.trim IN [OUT]     (OUT defaults to standard output)

Exit codes: 0 trimmed; 2 usage, IN not a readable file, or OUT not writable (a directory, a
path under a file; the path and the reason named, no traceback).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from zl import atomic

_STAMP = re.compile(r"^\d+(?:\.\d+)?[ \t]")
_FILE_LINE = re.compile(r'^\s*File ".*", line \d+')
_WARN_LINE = re.compile(r"\.py:\d+: \w*Warning")
_SECTION = re.compile(r"^=+ (FAILURES|ERRORS) =+$")
_SECTION_END = re.compile(r"^=+ .* =+$")
_KEEP_IN_FAILURE = re.compile(r"^(E |\S+:\d+: |_{3,}|(_ ){3,}|-+ .* -+$|\s*$)")


def trimmed(text: str, tag: str = "zl.runlog.trim") -> str:
    """text without quoted source lines; a last line counts what was dropped, if anything."""
    out, dropped, after_file, after_warn, in_failure = [], 0, False, False, False
    last_stamp = ""
    for raw in text.splitlines():
        stamp = _STAMP.match(raw)
        line = raw[stamp.end():] if stamp else raw
        last_stamp = stamp.group(0) if stamp else last_stamp
        if _SECTION.match(line):
            in_failure = True
        elif in_failure and _SECTION_END.match(line):
            in_failure = False
        drop = False
        if after_file and not _FILE_LINE.match(line) and line.startswith("    "):
            drop = True                     # the source line under `File "...", line N`
        elif after_warn and line.startswith("  "):
            drop = True                     # the source line under a warning
        elif in_failure and not _SECTION.match(line) and not _KEEP_IN_FAILURE.match(line):
            drop = True                     # pytest's code context (`>   ...`, quoted body)
        after_file = bool(_FILE_LINE.match(line)) or (after_file and drop)
        after_warn = bool(_WARN_LINE.search(line))
        if drop:
            dropped += 1
        else:
            out.append(raw)
    if dropped:
        # stamped like the lines before it, so a trimmed stamped log still parses as one
        # (zl.runlog.costs.node_seconds refuses a line without a stamp)
        out.append(f"{last_stamp}[{tag}: {dropped} quoted source line(s) trimmed]")
    return "\n".join(out) + "\n"


USAGE = next(ln.strip() for ln in __doc__.splitlines() if ln.strip().startswith("python3 -m"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2) or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if args[:1] != ["--help"] else sys.stdout)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    src = Path(args[0])
    if not src.is_file():
        print(f"zl.runlog.trim: no such file: {src}", file=sys.stderr)
        return 2
    try:
        text = trimmed(src.read_text(errors="replace"))
    except OSError as exc:
        print(f"zl.runlog.trim: cannot read {src}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if len(args) == 2:
        try:
            atomic.write_text(Path(args[1]), text)
        except OSError as exc:   # OUT a directory, or under a file: named, exit 2
            print(f"zl.runlog.trim: cannot write {args[1]}: {atomic.write_problem(args[1], exc)}",
                  file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
