"""Terminal styling shared by the plugins and tools.

Colour is decided once: `FLAGGEMS_PERF_COLOR=always|never` wins, then `NO_COLOR`
(https://no-color.org), then whether stderr is a terminal. run.log is always
written without ANSI codes by run_pytest.sh, so colour never reaches a parser.
"""

from __future__ import annotations

import os
import re
import sys

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

_CODES = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "cyan": "36",
}


def color_enabled(stream=None) -> bool:
    forced = os.environ.get("FLAGGEMS_PERF_COLOR", "").strip().lower()
    if forced in ("always", "1", "yes", "on"):
        return True
    if forced in ("never", "0", "no", "off"):
        return False
    if os.environ.get("NO_COLOR", "") != "":
        return False
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except Exception:
        return False


def style(text: str, *names: str, stream=None) -> str:
    if not names or not color_enabled(stream):
        return text
    codes = ";".join(_CODES[n] for n in names if n in _CODES)
    return f"\x1b[{codes}m{text}\x1b[0m" if codes else text


def tag(label: str) -> str:
    """A plugin's log prefix, e.g. tag('[seed-plugin]')."""
    return style(label, "cyan")


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text)


def log(label: str, message: str) -> None:
    """One stderr line under a plugin tag, flushed (pytest -s interleaves it with stdout)."""
    print(f"{tag(label)} {message}", file=sys.stderr, flush=True)


def tee_stripped(log_path: str, source=None, sink=None) -> int:
    """Copy `source` to `sink` unchanged and append it, ANSI-stripped, to `log_path`.

    Used by run_pytest.sh so the console keeps its colours while run.log stays
    plain text for parsers. Line by line and flushed, so a crash mid-run still
    leaves everything printed so far in run.log.
    """
    source = source if source is not None else sys.stdin.buffer
    sink = sink if sink is not None else sys.stdout.buffer
    with open(log_path, "ab") as log_file:
        for raw in iter(source.readline, b""):
            try:
                sink.write(raw)
                sink.flush()
            except (BrokenPipeError, ValueError):
                pass  # a closed console must not stop run.log from being written
            log_file.write(ANSI_RE.sub("", raw.decode("utf-8", "replace")).encode("utf-8"))
            log_file.flush()
    return 0


if __name__ == "__main__":
    import argparse

    _p = argparse.ArgumentParser(description="terminal helpers for zl_bench shell scripts")
    _p.add_argument("--tee", metavar="LOG", required=True,
                    help="copy stdin to stdout and, ANSI-stripped, append it to LOG")
    sys.exit(tee_stripped(_p.parse_args().tee))
