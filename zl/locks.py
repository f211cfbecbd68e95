"""An exclusive, non-blocking lock on a file that dies with its holder.

One process at a time may own a directory another run writes into (a batch dir, an OUT_DIR).
The lock is fcntl.flock on a hidden file in that directory: the kernel drops it when the
last descriptor of its open file closes, so a holder killed by SIGKILL leaves no stale lock
and nothing needs cleaning up. The file stays after release (removing it would let a second
process lock an unlinked inode while a third creates a new file). Its first line is the
holder's pid, so a refused caller can name who holds it.

Python API:

    lock = locks.acquire(path)        # raises LockHeld (its .pid: the holder, or None)
    ...
    lock.release()                    # or `with locks.acquire(path): ...`

Python's descriptors are not inherited by exec'd children, so a lock taken with acquire()
lives exactly as long as the process that took it.

Shell callers lock a descriptor they opened (the lock then lives while any process holding
that descriptor does, the shell and every child it did not close it in):

    exec 9<>"$OUT_DIR/.zl.lock"
    python -m zl.locks hold 9 "$OUT_DIR/.zl.lock" --pid $$ || exit 2

`hold` exits 0 (locked, PID written), 1 (held by another process: the message names its
pid) or 2 (bad arguments, or the file cannot be opened or locked).
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import os
import sys
import time
from pathlib import Path
from typing import Optional, Union

PathLike = Union[str, "os.PathLike[str]"]
# A holder writes its pid right after locking; a refused caller that reads an empty file
# waits this long for it before reporting the pid as unknown.
PID_WAIT_S = 0.5


class LockHeld(RuntimeError):
    """Another live process holds the lock; `pid` is its pid when it wrote one."""

    def __init__(self, path: Path, pid: Optional[int]):
        self.path = Path(path)
        self.pid = pid
        who = f"pid {pid}" if pid is not None else "another process (its pid is not written yet)"
        super().__init__(f"{self.path} is locked by {who}")


class Lock:
    """A held lock; release() (or leaving the with-block) drops it. Releasing twice is a no-op."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self.fd: Optional[int] = fd

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            os.ftruncate(fd, 0)   # no pid of a process that no longer holds it
        except OSError:
            pass
        os.close(fd)              # closing the last descriptor drops the flock

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def holder_pid(path: PathLike, wait_s: float = PID_WAIT_S) -> Optional[int]:
    """The pid written in the lock file, waiting up to `wait_s` for a new holder to write it.
    Meaningful only while the lock is held (a released lock's file is empty)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            first = Path(path).read_text(encoding="ascii", errors="replace").split("\n", 1)[0].strip()
        except OSError:
            first = ""
        if first.isdigit():
            return int(first)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _lock_fd(fd: int, path: Path, pid: int) -> None:
    """flock `fd` exclusively without waiting, then write `pid` as the file's only line."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise LockHeld(path, holder_pid(path)) from None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{pid}\n".encode("ascii"), 0)


def acquire(path: PathLike) -> Lock:
    """Lock `path` (created if missing, its directory must exist) for this process.
    Raises LockHeld when another process holds it, OSError when it cannot be opened."""
    path = Path(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        _lock_fd(fd, path, os.getpid())
    except BaseException:
        os.close(fd)
        raise
    return Lock(path, fd)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m zl.locks",
        description="Lock a file descriptor the calling shell opened (see the module docstring).",
        epilog="Exit codes: 0 locked; 1 held by another process (named on stderr); 2 bad arguments "
               "or the file cannot be locked.")
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hold", help="flock FD (opened by the caller on PATH) and write PID into PATH")
    h.add_argument("fd", type=int)
    h.add_argument("path", type=Path)
    h.add_argument("--pid", type=int, default=os.getppid(), help="pid to record (default: the caller's)")
    args = p.parse_args(argv)
    try:
        st_fd, st_path = os.fstat(args.fd), os.stat(args.path)
    except OSError as exc:
        print(f"zl.locks: {exc}", file=sys.stderr)
        return 2
    if (st_fd.st_dev, st_fd.st_ino) != (st_path.st_dev, st_path.st_ino):
        print(f"zl.locks: descriptor {args.fd} is not open on {args.path}", file=sys.stderr)
        return 2
    try:
        _lock_fd(args.fd, args.path, args.pid)
    except LockHeld as exc:
        print(f"zl.locks: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"zl.locks: cannot lock {args.path}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
