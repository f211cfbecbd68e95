"""Terminal styling shared by the plugins and tools.

Colour is decided once: `FLAGGEMS_PERF_COLOR=always|never` wins, then `NO_COLOR`
(https://no-color.org), then whether stderr is a terminal. run.log is always
written without ANSI codes by run_pytest.sh, so colour never reaches a parser.
"""

from __future__ import annotations

import os
import re
import signal
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
    """The run configuration's colour (FLAGGEMS_PERF_COLOR / --zl-color, then NO_COLOR),
    else whether `stream` (stderr) is a terminal."""
    from zl.config import current
    cfg = current()
    forced = cfg.color.strip().lower()
    if forced in ("always", "1", "yes", "on"):
        return True
    if forced in ("never", "0", "no", "off"):
        return False
    if cfg.no_color:
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


def tee_stripped(log_path: str, source=None, sink=None, notify_pid: int = 0) -> int:
    """Copy `source` to `sink` unchanged and append it, ANSI-stripped, to `log_path`.

    Used by run_pytest.sh so the console keeps its colours while run.log stays
    plain text for parsers. Line by line and flushed, so a crash mid-run still
    leaves everything printed so far in run.log.

    A log that cannot be written (full disk, read-only, no permission) is named once on
    `sink` (`!!! OUT_DIR_WRITE_FAILED`), `notify_pid` gets SIGUSR1, and the copy to `sink`
    goes on to the end, so the writers never see a closed pipe; returns EXIT_OUT_DIR_WRITE.
    On a full disk this tee used to die at its first write, leaving run.log empty and the
    run's next echo killed by SIGPIPE (exit 141).
    """
    from zl.rundir import EXIT_OUT_DIR_WRITE, WRITE_FAILED_MARKER

    source = source if source is not None else sys.stdin.buffer
    sink = sink if sink is not None else sys.stdout.buffer

    def emit(raw: bytes) -> None:
        try:
            sink.write(raw)
            sink.flush()
        except (BrokenPipeError, ValueError):
            pass  # a closed console must not stop run.log from being written

    def failed(exc: OSError) -> None:
        emit(f"!!! {WRITE_FAILED_MARKER} file={log_path} detail={exc.strerror or exc!s}: "
             f"run.log stops here; this directory does not hold the whole run\n".encode("utf-8"))
        if notify_pid:
            try:
                os.kill(notify_pid, signal.SIGUSR1)
            except OSError:
                pass

    try:
        log_file = open(log_path, "ab")
    except OSError as exc:
        log_file = None
        failed(exc)
    status = 0 if log_file is not None else EXIT_OUT_DIR_WRITE
    for raw in iter(source.readline, b""):
        emit(raw)
        if log_file is None:
            continue
        try:
            log_file.write(ANSI_RE.sub("", raw.decode("utf-8", "replace")).encode("utf-8"))
            log_file.flush()
        except OSError as exc:
            failed(exc)
            status = EXIT_OUT_DIR_WRITE
            try:
                log_file.close()
            except OSError:
                pass
            log_file = None
    if log_file is not None:
        try:
            log_file.close()
        except OSError as exc:
            failed(exc)
            status = EXIT_OUT_DIR_WRITE
    return status


if __name__ == "__main__":
    import argparse

    _p = argparse.ArgumentParser(description="terminal helpers for zl_bench shell scripts")
    _p.add_argument("--tee", metavar="LOG", required=True,
                    help="copy stdin to stdout and, ANSI-stripped, append it to LOG")
    _p.add_argument("--notify", metavar="PID", type=int, default=0,
                    help="send PID SIGUSR1 when LOG cannot be written (exit status 6 then)")
    _args = _p.parse_args()
    sys.exit(tee_stripped(_args.tee, notify_pid=_args.notify))
