"""One help style for every zl_bench command.

A command's help says, in this order: what it does (the opening paragraphs), then the
sections `Examples:`, `Options:` (a shell command: `Variables:`), `Outputs:` and
`Exit codes:`, each heading alone on its line. Exit codes are listed one per line as
`  <code>  <meaning>` (two spaces, then the code: `0`, `2`, `128+N`), the same codes as the
command's row in README's exit-code table; tests/test_help_style.py holds every command to
both, so the help and README cannot drift apart.

Python commands keep the text in their module docstring and build their parser with
`parser()`; shell commands keep it in their header comment (zl/sh/entry.sh prints it).
"""

from __future__ import annotations

import argparse

OUTPUTS = "Outputs:"


def parser(doc: str, prog: str) -> argparse.ArgumentParser:
    """An ArgumentParser whose --help prints `doc` in the house order: the text before
    `Outputs:` (what it does, Examples:) above argparse's option list, titled `Options:`,
    and `Outputs:` with everything after it (Exit codes:) below the list."""
    head, sep, tail = doc.strip("\n").partition(f"\n{OUTPUTS}\n")
    if not sep:
        raise ValueError(f"{prog}: its help text has no '{OUTPUTS}' section")
    p = argparse.ArgumentParser(prog=prog, description=head.rstrip(), epilog=f"{OUTPUTS}\n{tail}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    # argparse offers no public way to title its two default groups; these attributes have
    # been stable since Python 2.7 and only change the printed heading.
    p._positionals.title = "Arguments"
    p._optionals.title = "Options"
    return p
