#!/usr/bin/env python3
"""Sample device clocks, temperature, power and utilisation into a TSV during a campaign.

Why: an A/B campaign claims per-side noise well under 1%, while a throttled clock or a hot card
moves latency by far more and leaves no trace in run.log; the report looks just as clean. This
file is the evidence that the cards ran under the same conditions.

The interval defaults to $TELEMETRY_INTERVAL (else 5 s); 0 turns sampling off (exit 0, no file).
The device defaults to $ZL_DEVICE, else a single id in the backend's visibility variable; a list
(CUDA_VISIBLE_DEVICES=5,6) samples every card rather than guessing one. SIGTERM / SIGINT end the
loop cleanly after the row being written. The sampler also stops, within about a second, once
the process that started it is gone (--parent-pid, default the parent at start; 0 = never):
a driver killed with SIGKILL runs no cleanup trap, and its sampler would append forever.

--run, the first telemetry.py's "sample until killed" flag, is accepted beside OUT.tsv. Alone it
sampled to stdout; that form exits 2 naming OUT.tsv: a file keeps the reason for no samples beside
it (OUT.err), where `--run > file` emptied an earlier campaign's samples.

Examples:
  python telemetry.py OUT.tsv [--interval S] [--device D] [--backend B] [--count N]
                      [--parent-pid PID]
  python telemetry.py --print-command [--device D] [--backend B]

Outputs:
  OUT.tsv gets one row per device per sample, the same columns on every backend:
      timestamp  index  sm_clock_mhz  mem_clock_mhz  temp_c  power_w  util_pct
  Missing telemetry is a missing piece of evidence, not a reason to fail a batch: when the
  backend has no sampler, or the sampler binary is missing, not permitted or unreadable, the
  reason goes to OUT.err (beside OUT.tsv, e.g. telemetry.err), nothing else is written, and
  the exit status is 0. --print-command prints the sampler command on stdout.

Exit codes:
  0  sampled, sampling off (interval 0), or no sampler (the reason in OUT.err)
  2  bad usage (bad interval, unknown backend, OUT holding another file's header, OUT or
     OUT.err a directory, OUT's directory missing, OUT not writable, --run without OUT.tsv
     or with --print-command)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

from zl import atomic, cli_help
from zl.backends import TELEMETRY_FIELDS, UnknownBackendError, get_backend
from zl.rundir import pid_alive

try:
    from zl.term import tag as _tag
except Exception:  # pragma: no cover - the styling module is optional for this tool
    def _tag(label: str) -> str:
        return label

FIELDS = TELEMETRY_FIELDS
HEADER = "\t".join(("timestamp",) + FIELDS)
EXIT_OK = 0
EXIT_USAGE = 2
# A vendor tool that hangs must not hold the loop forever; nvidia-smi answers in well under 1 s.
SAMPLER_TIMEOUT_S = 30.0
DEFAULT_INTERVAL_S = 5.0
PARENT_POLL_S = 0.5


class UsageError(Exception):
    """Bad command-line or environment value; exit 2."""


class SamplerUnavailable(Exception):
    """The sampler could not produce a reading; the message says why."""


def log(message: str) -> None:
    print(f"{_tag('[telemetry]')} {message}", file=sys.stderr, flush=True)


def err_path(out: os.PathLike) -> Path:
    return Path(out).with_suffix(".err")


def parse_interval(raw: str) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise UsageError(f"interval must be a number of seconds, got {raw!r}") from None
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise UsageError(f"interval must be a finite number >= 0, got {raw!r}")
    return value


def resolve_device(backend, explicit: Optional[str]) -> str:
    """Explicit device, else a single id from the backend's own visibility variable, else ''.

    Limit: nvidia-smi numbers cards in PCI bus order, CUDA by default fastest-first. On a node of
    identical cards (the H200 boxes) the two agree; on a mixed node set CUDA_DEVICE_ORDER=PCI_BUS_ID
    or the sampled card may not be the measured one."""
    if explicit and explicit.strip():
        return explicit.strip()
    listed = backend.inherited_devices()
    return listed[0] if len(listed) == 1 else ""


def timestamp() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def sample(backend, argv: List[str], stop: Optional[threading.Event] = None,
           timeout: float = SAMPLER_TIMEOUT_S) -> List[Dict[str, str]]:
    """One reading -> rows; raises SamplerUnavailable with the reason. Polls so that a stop
    request does not wait out a hanging sampler."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace")
    except FileNotFoundError:
        raise SamplerUnavailable(f"{argv[0]} not found on PATH") from None
    except PermissionError as exc:
        raise SamplerUnavailable(f"{argv[0]} not permitted: {exc}") from None
    except OSError as exc:
        raise SamplerUnavailable(f"{argv[0]} could not start: {exc}") from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            out, err = proc.communicate(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            stopping = stop is not None and stop.is_set()
            if stopping or time.monotonic() > deadline:
                proc.kill()
                proc.communicate()
                why = "stopped while sampling" if stopping else f"timed out after {timeout:g} s"
                raise SamplerUnavailable(f"{argv[0]} {why}") from None
    if proc.returncode != 0:
        first = next((ln.strip() for ln in (err or out or "").splitlines() if ln.strip()), "")
        raise SamplerUnavailable(f"{argv[0]} exited {proc.returncode}: {first[:200]}")
    rows = backend.parse_telemetry(out or "")
    if not rows:
        raise SamplerUnavailable(
            f"{argv[0]} printed nothing readable: {(out or '').strip()[:200]!r}")
    return rows


def _append(path: Path, text: str) -> None:
    # One write() on an O_APPEND descriptor per sample: a reader tailing the file mid-campaign sees
    # whole samples, and the position is the file end even if something else appended meanwhile.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def check_out(out: Path) -> None:
    """OUT (and OUT.err beside it) must be file paths in an existing directory; UsageError
    (exit 2) names the path otherwise: a wrong path is bad usage, not missing telemetry."""
    for path in (out, err_path(out)):
        if path.is_dir():
            raise UsageError(f"{path} is a directory; name a file (e.g. {out / 'telemetry.tsv'})")
    if not out.parent.is_dir():
        raise UsageError(f"{out}: {out.parent} is not an existing directory")


def _check_existing(out: Path) -> bool:
    """True when out already carries our header (append without a second one)."""
    if not out.exists() or out.stat().st_size == 0:
        return False
    with out.open(encoding="utf-8", errors="replace") as fh:
        first = fh.readline().rstrip("\n")
    if first != HEADER:
        raise UsageError(f"{out} exists and its first line is not the telemetry header; "
                         "refusing to mix its rows with these")
    return True


def _format(ts: str, rows: List[Dict[str, str]]) -> str:
    return "".join(ts + "\t" + "\t".join(str(r.get(f, "")) for f in FIELDS) + "\n"
                   for r in rows)


def run(backend, out: Path, device: str, interval: float, count: Optional[int] = None,
        stop: Optional[threading.Event] = None) -> int:
    """Sample until stop is set (or count samples were taken). Returns the exit status."""
    stop = stop or threading.Event()
    err = err_path(out)
    if err.exists():
        err.unlink()  # a reason left by an earlier run would describe this one wrongly

    def unavailable(reason: str) -> int:
        log(f"no telemetry this run: {reason}")
        atomic.write_text(err, f"backend={backend.name} device={device or 'all'}: {reason}\n")
        return EXIT_OK

    argv = backend.telemetry_command(device)
    if not argv:
        return unavailable(f"backend {backend.name} has no telemetry sampler")
    if shutil.which(argv[0]) is None:
        return unavailable(f"{argv[0]} not found on PATH")
    has_header = _check_existing(out)
    try:
        rows = sample(backend, argv, stop)
    except SamplerUnavailable as exc:
        if stop.is_set():
            return EXIT_OK
        # No readings on the first try means a missing tool or permission, not a blip; leave no
        # empty TSV behind that would look as if sampling had happened.
        return unavailable(str(exc))
    _append(out, ("" if has_header else HEADER + "\n") + _format(timestamp(), rows))
    log(f"sampling {shlex.join(argv)} every {interval:g} s into {out}")
    taken, start, reported = 1, time.monotonic(), set()
    while not (count is not None and taken >= count):
        # Fixed schedule rather than sleep-after-sample, so the sampler's own run time does not
        # stretch the period over a long campaign.
        if stop.wait(max(0.0, start + taken * interval - time.monotonic())):
            break
        try:
            rows = sample(backend, argv, stop)
        except SamplerUnavailable as exc:
            if stop.is_set():
                break
            # A gap is evidence too: record when and why, once on the console per reason.
            _append(err, f"{timestamp()} sample failed: {exc}\n")
            if str(exc) not in reported:
                reported.add(str(exc))
                log(f"sample failed (continuing): {exc}")
            taken += 1
            continue
        _append(out, _format(timestamp(), rows))
        taken += 1
    return EXIT_OK


def _parent_alive(pid: int) -> bool:
    # Reparenting (to init or a subreaper) means the parent died even if its pid was reused.
    return os.getppid() == pid and pid_alive(pid)


def watch_parent(pid: int, stop: threading.Event, poll: float = PARENT_POLL_S) -> None:
    """Set `stop` once process `pid` (our parent) is gone; a daemon thread polls it."""
    def loop() -> None:
        while not stop.wait(poll):
            if not _parent_alive(pid):
                log(f"parent process {pid} is gone; stopping")
                stop.set()
    threading.Thread(target=loop, name="telemetry-parent-watch", daemon=True).start()


class UtilizationSampler:
    """The devices' telemetry every 100 ms while a batch runs (nvidia-smi: its timestamp, then
    the CUDA backend's query: index, SM and memory clocks, temperature, power, utilization; one
    CSV line per GPU) into `path`, each line led by the epoch second nvidia-smi took it (its
    local-time stamp converted here, where it was taken: a pipe may deliver lines in bursts, and
    a report may be read in another time zone); nothing where nvidia-smi is missing. `append`:
    a resumed batch's samples follow its earlier calls'. Files of older runs hold the
    utilization alone, one number per line."""

    QUERY = "--query-gpu=timestamp," + get_backend("cuda").telemetry_argv[1].split("=", 1)[1]

    def __init__(self, path: Path, append: bool = False) -> None:
        self.path, self.proc = path, None
        exe = shutil.which("nvidia-smi")
        if exe:
            self.fh = open(path, "a" if append else "w")
            self.proc = subprocess.Popen([exe, self.QUERY, "--format=csv,noheader,nounits", "-lms", "100"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.reader = threading.Thread(target=self._stamp, name="util-sampler", daemon=True)
            self.reader.start()

    def _stamp(self) -> None:
        """Each line as `<epoch>, <query fields>`; a stamp that does not parse is dropped and the
        line kept unstamped (its clock still counts, no timed stretch claims it)."""
        for line in self.proc.stdout:
            stamp, sep, rest = line.partition(",")
            try:
                t = _dt.datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
                line = f"{t:.3f},{rest}"
            except ValueError:
                line = rest.lstrip() if sep else line
            self.fh.write(line)
            self.fh.flush()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)
            self.reader.join(timeout=10)
            self.fh.close()


def read_samples(path: Path) -> List[Dict[str, Optional[float]]]:
    """Each sample of a UtilizationSampler file ([] without one): util_pct, and where the line
    has them t (epoch s), sm_clock_mhz and temp_c (None otherwise)."""
    out, cuda = [], get_backend("cuda")

    def number(text: str) -> bool:
        return text.replace(".", "", 1).isdigit()

    for line in (path.read_text() if path.is_file() else "").splitlines():
        fields = [f.strip() for f in line.split(",")]
        stamped = len(fields) in (2, len(TELEMETRY_FIELDS) + 1) and number(fields[0])   # our epoch first
        t, body = (float(fields[0]), ",".join(fields[1:])) if stamped else (None, line.strip())
        if number(body):                                 # utilization alone (older files)
            out.append({"util_pct": float(body), "sm_clock_mhz": None, "temp_c": None, "t": t})
            continue
        for row in cuda.parse_telemetry(body):
            if row.get("util_pct"):
                out.append({**{k: float(row[k]) if row.get(k) else None
                               for k in ("util_pct", "sm_clock_mhz", "temp_c")}, "t": t})
    return out


def clock_during(samples: List[Dict[str, Optional[float]]], stretches: List[List[float]]) -> Optional[float]:
    """Median SM clock (MHz) of the samples (read_samples) read inside any of `stretches`
    ([start, end] epoch s, e.g. a run's timed stretches); None when none fell inside."""
    inside = [r["sm_clock_mhz"] for r in samples if r["t"] is not None and r["sm_clock_mhz"] is not None
              and any(a <= r["t"] <= b for a, b in stretches)]
    return statistics.median(inside) if inside else None


def clock_split(sides: List[tuple], apart: float = 0.01) -> Optional[Dict]:
    """Whether A/A tracks the clock: `sides` are (name, SM clock while side A timed, while side
    B timed, A/A median |delta|) per node. -> the clocks' range, the nodes whose two sides timed
    more than `apart` apart and the A/A median of those against the rest; None without a node
    whose both sides have a clock and an A/A."""
    both = [(n, a, b, aa) for n, a, b, aa in sides if a and b and aa is not None]
    if not both:
        return None
    far = [(n, aa) for n, a, b, aa in both if abs(b / a - 1) > apart]
    near = [aa for n, a, b, aa in both if abs(b / a - 1) <= apart]
    return {"nodes": len(both), "clock_min": min(min(a, b) for _, a, b, _ in both),
            "clock_max": max(max(a, b) for _, a, b, _ in both), "apart": apart,
            "apart_nodes": [n for n, _ in far],
            "aa_apart": statistics.median(aa for _, aa in far) if far else None,
            "aa_together": statistics.median(near) if near else None}


def utilization_summary(path: Path) -> Optional[Dict[str, float]]:
    """sample_summary of a UtilizationSampler's file."""
    return sample_summary(read_samples(path))


def sample_summary(rows: List[Dict[str, Optional[float]]]) -> Optional[Dict[str, float]]:
    """GPU-busy share (samples > 0) and mean utilization of samples (read_samples); where they
    have clocks, the SM clock over the busy samples (median, 5th percentile, lowest; the
    highest over all) and the highest temperature. None without samples."""
    if not rows:
        return None
    util = [r["util_pct"] for r in rows]
    out = {"samples": len(util), "busy_share": statistics.fmean(v > 0 for v in util),
           "mean_util": statistics.fmean(util)}
    busy = sorted(r["sm_clock_mhz"] for r in rows if r["util_pct"] > 0 and r["sm_clock_mhz"] is not None)
    clocks = [r["sm_clock_mhz"] for r in rows if r["sm_clock_mhz"] is not None]
    temps = [r["temp_c"] for r in rows if r["temp_c"] is not None]
    if busy:
        out.update(sm_clock_busy_median=statistics.median(busy), sm_clock_busy_min=busy[0],
                   sm_clock_busy_p05=busy[int(0.05 * (len(busy) - 1))], sm_clock_max=max(clocks))
    if temps:
        out["temp_max_c"] = max(temps)
    return out


def clock_line(summary: Optional[Dict[str, float]]) -> str:
    """`SM clock over busy samples: ...` from utilization_summary ("" without clocks): whether
    the card held its clock while the batch timed (a throttled clock moves short kernels most)."""
    if not summary or "sm_clock_busy_median" not in summary:
        return ""
    return (f"SM clock over busy samples: median {summary['sm_clock_busy_median']:g} MHz, 5th percentile "
            f"{summary['sm_clock_busy_p05']:g}, lowest {summary['sm_clock_busy_min']:g} (highest seen "
            f"{summary['sm_clock_max']:g})" + (f"; hottest {summary['temp_max_c']:g} C" if "temp_max_c" in summary
                                                else "") + ".")


def _build_parser() -> argparse.ArgumentParser:
    p = cli_help.parser(__doc__, prog="telemetry.py")
    p.add_argument("out", nargs="?", help="TSV to append samples to (reason for none: OUT.err)")
    p.add_argument("--interval", default=None,
                   help="seconds between samples (default $TELEMETRY_INTERVAL or 5; 0 = off)")
    p.add_argument("--device", default=None, help="device id to sample (default $ZL_DEVICE)")
    p.add_argument("--backend", default=None, help="backend name (default $ZL_BACKEND or cuda)")
    p.add_argument("--count", type=int, default=None,
                   help="stop after N samples (default: until SIGTERM/SIGINT)")
    p.add_argument("--parent-pid", type=int, default=None, metavar="PID",
                   help="stop when this process (default: the parent at start) is gone; 0 = never")
    p.add_argument("--print-command", action="store_true",
                   help="print the sampler command for this backend/device and exit")
    p.add_argument("--run", action="store_true",
                   help="the first telemetry.py's spelling of sampling; only with OUT.tsv")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        raw = args.interval if args.interval is not None else os.environ.get(
            "TELEMETRY_INTERVAL", "")
        interval = parse_interval(raw) if str(raw).strip() else DEFAULT_INTERVAL_S
        if args.count is not None and args.count < 1:
            raise UsageError(f"--count must be >= 1, got {args.count}")
        backend = get_backend(args.backend)
        device = resolve_device(
            backend, args.device if args.device is not None else os.environ.get("ZL_DEVICE", ""))
        if args.run and args.print_command:
            raise UsageError("--run samples and --print-command only prints; give one")
        if args.run and not args.out:
            raise UsageError("--run no longer writes to stdout; name the file instead: "
                             "telemetry.py OUT.tsv [--interval S] (the reason for no samples "
                             "goes to OUT.err)")
        if args.print_command:
            print(shlex.join(backend.telemetry_command(device)))
            return EXIT_OK
        if not args.out:
            raise UsageError("OUT.tsv is required (or --print-command)")
        if interval != 0:
            check_out(Path(args.out))
    except (UsageError, UnknownBackendError) as exc:
        log(f"error: {exc}")
        return EXIT_USAGE
    if interval == 0:
        return EXIT_OK

    stop = threading.Event()
    parent = os.getppid() if args.parent_pid is None else args.parent_pid
    if parent > 1:
        watch_parent(parent, stop)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        return run(backend, Path(args.out), device, interval, args.count, stop)
    except UsageError as exc:
        log(f"error: {exc}")
        return EXIT_USAGE
    except OSError as exc:   # e.g. a read-only directory: named, never a traceback
        log(f"error: cannot write {args.out} or {err_path(args.out)}: {exc}")
        return EXIT_USAGE
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    raise SystemExit(main())
