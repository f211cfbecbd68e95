"""Read a FlagGems benchmark run.log into rows, failures and marker counts.

The one run.log parser: batch_summary.py, the A/B drivers and the round
statistics all read logs through `parse_run_log` / `read_run_log`, so a table
one tool understands is never one another tool skips.

What a run.log holds (upstream benchmark/consts.py `BenchmarkResult.__str__`):

    Operator: softmax  Performance Test (dtype=torch.float16, mode=kernel,level=core)
    Status       Torch Latency (ms)    Gems Latency (ms)         Gems Speedup [TFLOPS] [Torch GBPS  Gems GBPS ]          Size Detail
    ------------------------------------------------------------------------------------
    SUCCESS               0.019839            0.017000               1.167          [torch.Size([1024, 1024])]

- The header is space-joined but the rows are not: columns are located by
  tokens, never by character offsets.
- Upstream decides the TFLOPS header from the first row but prints each row's
  own TFLOPS, so a row may carry one more or one fewer metric than its header;
  the metric tokens are therefore read greedily (numbers or `N/A`) and the rest
  of the line is the size detail.
- The pretty-report plugin may fold the constant inputs into a legend line
  `  [same for all rows] {...}` under the rule; `zl.runlog.sizefold.unfold` rebuilds
  upstream's exact Size Detail, so folded and unfolded tables pair.
- A shape whose measurement raises never becomes a FAILED row: upstream calls
  `pytest.fail` before printing the table. The failure only exists in pytest's
  own output (short summary `FAILED node - msg`, `E   ` lines, `N failed`), so
  those are collected too; counting table rows alone would report a partly
  failed operator as complete.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from zl import markers as markers_vocab
from zl.runlog.sizefold import LegendError, parse_legend_line, unfold

from zl.term import ANSI_RE  # the one ANSI regex
TITLE_RE = re.compile(
    r"^Operator:\s*(?P<op>\S+)\s+Performance Test\s*\(dtype=(?P<dtype>[^,]*),\s*"
    r"mode=(?P<mode>[^,]*),\s*level=(?P<level>[^)]*)\)\s*$")
HEADER_RE = re.compile(r"^Status\s+Torch Latency \(ms\)\s+Gems Latency \(ms\)\s+Gems Speedup\b")
RULE_RE = re.compile(r"^-{20,}\s*$")
ROW_STATUS_RE = re.compile(r"^(SUCCESS|FAILED)\s+(.*)$")
VALUE_RE = re.compile(r"^(?:N/A|[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan)$")
# pytest's short test summary and final count line.
SUMMARY_FAILED_RE = re.compile(r"^(FAILED|ERROR) (\S+::\S+|\S+\.py)(?: - (.*))?$")
FINAL_COUNT_RE = re.compile(r"^=+ (.*\bin [\d.]+s.*) =+$")
FINAL_FAILED_RE = re.compile(r"(\d+) (failed|error|errors)\b")
# pytest's banner when a session stops early (Ctrl-C / SIGINT, a collection error); its
# final count line still follows, so that line alone does not show the run finished.
INTERRUPTED_RE = re.compile(r"^!{3,} (KeyboardInterrupt|Interrupted: .*?) !{3,}$")
# Upstream's own notice when building an input raised (printed in red, then pytest.fail).
UPSTREAM_FAILED_RE = re.compile(r"^FAILED: Operator=(\S+)")

MARKERS = dict(markers_vocab.COUNTED)
# A marker counts only as an emitted event `NAME op=...`; a plugin's configure line
# that merely names the marker must not inflate the count.
_MARKER_RES = {k: re.compile(rf"(?:^|\s){v} op=") for k, v in MARKERS.items()}

# `AUTOTUNE_REPLAY_FALLBACK op= kernel= key= reason=`: the key may hold spaces (a tuple).
FALLBACK_RE = re.compile(rf"(?:^|\s){MARKERS['replay_fallback']} op=(?P<op>\S*) "
                         r"kernel=(?P<kernel>\S*) key=(?P<key>.*?) reason=(?P<reason>\S+)")

# Upstream metric columns in header order after the three fixed ones.
_OPTIONAL_COLUMNS = (("TFLOPS", "tflops"), ("Torch GBPS", "torch_gbps"), ("Gems GBPS", "gems_gbps"))


class RunLogError(ValueError):
    """A run.log that cannot be read at all (missing, a directory, no benchmark output)."""


class MalformedLine(RunLogError):
    """A line the parser must trust is broken; read_run_log names the file and line."""

    def __init__(self, line_no: int, message: str) -> None:
        super().__init__(f"line {line_no}: {message}")
        self.line_no, self.message = line_no, message


@dataclass
class Row:
    op: str
    dtype: str
    mode: str
    level: str
    row_status: str            # SUCCESS / FAILED (upstream's words)
    torch_lat: Optional[float]
    gems_lat: Optional[float]
    speedup: Optional[float]
    extra: Dict[str, Optional[float]]
    size_detail: str           # upstream's text, unfolded when the table was folded
    table_index: int
    line_no: int

    def as_dict(self) -> Dict[str, str]:
        def fmt(v: Optional[float], spec: str) -> str:
            return "N/A" if v is None else format(v, spec)
        return {
            "fg_op_name": self.op, "dtype": self.dtype, "mode": self.mode,
            "row_status": self.row_status,
            "torch_lat": fmt(self.torch_lat, ".6f"), "gems_lat": fmt(self.gems_lat, ".6f"),
            "speedup": fmt(self.speedup, ".3f"),
            "extra_metrics": ";".join(f"{k}={fmt(v, '.3f')}" for k, v in self.extra.items()),
            "size_detail": self.size_detail,
        }


@dataclass
class Failure:
    node: str
    message: str
    source: str   # "summary" (short test summary), "upstream" (FAILED: Operator=...)


@dataclass
class ParsedLog:
    rows: List[Row] = field(default_factory=list)
    failures: List[Failure] = field(default_factory=list)
    failed_count: int = 0                  # from pytest's final "N failed" line
    final_line: str = ""
    error_lines: List[str] = field(default_factory=list)   # pytest `E   ` lines
    markers: Dict[str, int] = field(default_factory=dict)
    # one {op, kernel, key, reason} per AUTOTUNE_REPLAY_FALLBACK event (key `*` = whole record)
    replay_fallbacks: List[Dict[str, str]] = field(default_factory=list)
    malformed: List[str] = field(default_factory=list)     # unreadable lines inside a table
    tables: int = 0
    saw_pytest: bool = False
    interrupted: str = ""                  # pytest's "KeyboardInterrupt" / "Interrupted: ..." banner

    @property
    def unfinished(self) -> str:
        """Why this log does not show a finished pytest session ("" when it does): pytest
        prints its final count line last, so a log cut or killed earlier lacks it."""
        if not self.final_line:
            return "run.log ends before pytest's final summary line (cut or killed mid-run)"
        if self.interrupted:
            return f"pytest stopped early ({self.interrupted})"
        return ""

    @property
    def n_failed(self) -> int:
        """Failed tests: pytest's count, else the summary lines, else upstream notices."""
        nodes = {f.node for f in self.failures if f.source == "summary"}
        return max(self.failed_count, len(nodes),
                   1 if any(f.source == "upstream" for f in self.failures) else 0)

    def success_rows(self) -> List[Row]:
        return [r for r in self.rows if r.row_status == "SUCCESS"]

    def failure_text(self, limit: int = 3) -> str:
        parts = [f"{f.node}: {f.message}" if f.message else f.node for f in self.failures[:limit]]
        if not parts and self.error_lines:
            parts = self.error_lines[:limit]
        return "; ".join(parts)


def _value(tok: str) -> Optional[float]:
    return None if tok == "N/A" else float(tok)


def _optional_columns(header: str) -> List[str]:
    return [key for name, key in _OPTIONAL_COLUMNS if re.search(rf"\b{re.escape(name)}\b", header)]


def _parse_row(rest: str, optional: List[str]) -> Optional[tuple]:
    """-> (values, size_detail) or None. `rest` is the line after the status word."""
    tokens = rest.split()
    max_metrics = 3 + len(_OPTIONAL_COLUMNS)
    values: List[str] = []
    for tok in tokens[:max_metrics]:
        if not VALUE_RE.match(tok):
            break
        values.append(tok)
    if len(values) < 3:
        return None
    remainder = rest
    for tok in values:
        remainder = remainder.lstrip()[len(tok):]
    detail = remainder.strip()
    expected = 3 + len(optional)
    if not detail and values[-1] == "N/A" and len(values) > expected:
        # upstream prints a missing shape detail as N/A too
        values, detail = values[:-1], "N/A"
    if not detail:
        return None
    return values, detail


class _Parser:
    """Line-by-line state machine: idle -> title -> header -> rows (a blank line ends a
    table); outside a table, pytest's own output (failures, final count) is read."""

    def __init__(self) -> None:
        self.out = ParsedLog(markers={k: 0 for k in MARKERS})
        self.title: Optional[Dict[str, str]] = None
        self.header_optional: List[str] = []
        self.state = "idle"
        self.legend: Optional[Dict] = None
        self.in_failure_section = False

    def feed(self, no: int, line: str) -> None:
        self._count_markers(line)
        m = TITLE_RE.match(line.strip())
        if m:
            self.title, self.state, self.legend = m.groupdict(), "title", None
            self.out.tables += 1
        elif self.state == "title":
            self._after_title(line)
        elif self.state == "header":
            self.state = "rows" if RULE_RE.match(line.strip()) else "idle"
        elif self.state == "rows":
            self._table_line(no, line)
        else:
            self._pytest_line(line.strip(), line)

    def _count_markers(self, line: str) -> None:
        for key, rx in _MARKER_RES.items():
            if rx.search(line):
                self.out.markers[key] += 1
        fb = FALLBACK_RE.search(line)
        if fb:
            self.out.replay_fallbacks.append(
                {k: (v or "").strip() for k, v in fb.groupdict().items()})

    def _after_title(self, line: str) -> None:
        if HEADER_RE.match(line.strip()):
            self.header_optional, self.state = _optional_columns(line), "header"
        elif line.strip():
            self.state = "idle"

    def _table_line(self, no: int, line: str) -> None:
        if not line.strip():
            self.state = "idle"
            return
        if self.legend is None:
            try:
                legend = parse_legend_line(line)
            except LegendError as exc:
                raise MalformedLine(
                    no, f"malformed legend line ({exc}): {line.strip()[:120]}") from None
            if legend is not None:
                self.legend = legend
                return
        rm = ROW_STATUS_RE.match(line)
        if rm:   # anything else inside a table (an interleaved stderr line) is left alone
            self._row(no, line, rm.group(1), rm.group(2))

    def _row(self, no: int, line: str, status: str, rest: str) -> None:
        parsed = _parse_row(rest, self.header_optional)
        if parsed is None:
            self.out.malformed.append(f"line {no}: {line[:120]}")
            return
        values, detail = parsed
        try:
            torch_lat, gems_lat, speedup = (_value(v) for v in values[:3])
        except ValueError:
            self.out.malformed.append(f"line {no}: {line[:120]}")
            return
        title = self.title
        self.out.rows.append(Row(
            op=title["op"], dtype=title["dtype"].strip(), mode=title["mode"].strip(),
            level=title["level"].strip(), row_status=status,
            torch_lat=torch_lat, gems_lat=gems_lat, speedup=speedup,
            extra=_extra_metrics(values[3:], self.header_optional),
            size_detail=unfold(detail, self.legend) if detail != "N/A" else detail,
            table_index=self.out.tables - 1, line_no=no))

    def _pytest_line(self, stripped: str, line: str) -> None:
        out = self.out
        if stripped.startswith("=") and "short test summary info" in stripped:
            self.in_failure_section, out.saw_pytest = True, True
            return
        im = INTERRUPTED_RE.match(stripped)
        if im:
            out.interrupted = im.group(1)
            return
        fm = FINAL_COUNT_RE.match(stripped)
        if fm:
            out.saw_pytest, self.in_failure_section = True, False
            out.final_line = fm.group(1)
            out.failed_count = sum(int(n) for n, _ in FINAL_FAILED_RE.findall(fm.group(1)))
            return
        if stripped.startswith("collected ") or stripped.startswith("platform "):
            out.saw_pytest = True
        sm = SUMMARY_FAILED_RE.match(stripped) if self.in_failure_section else None
        um = UPSTREAM_FAILED_RE.match(stripped)
        if sm:
            out.failures.append(Failure(node=sm.group(2), message=(sm.group(3) or "").strip(),
                                        source="summary"))
        elif um:
            out.failures.append(Failure(node=um.group(1), message=stripped, source="upstream"))
        elif line.startswith("E   ") and len(out.error_lines) < 50:
            out.error_lines.append(line[1:].strip())


def _extra_metrics(extra_vals: List[str], header_optional: List[str]) -> Dict[str, Optional[float]]:
    """Header order; a row with more values than its header (per-row TFLOPS) names the
    surplus by upstream's order of optional columns."""
    names = list(header_optional)
    if len(extra_vals) != len(names):
        names = [k for _, k in _OPTIONAL_COLUMNS]
        names = names[1:] if len(extra_vals) == 2 else names[:len(extra_vals)]
    return {n: _value(v) for n, v in zip(names, extra_vals)}


def parse_run_log(text: str) -> ParsedLog:
    """Parse run.log text (ANSI codes are stripped first). MalformedLine (a RunLogError)
    when a line the parser must trust is broken (a legend line)."""
    parser = _Parser()
    lines = ANSI_RE.sub("", text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for no, raw in enumerate(lines, 1):
        parser.feed(no, raw.rstrip())
    return parser.out


def resolve_log(path: Path) -> Path:
    """A run.log path, or a run directory holding one."""
    path = Path(path)
    if path.is_dir():
        path = path / "run.log"
    if not path.is_file():
        raise RunLogError(f"no run.log at {path}")
    return path


def read_run_log(path: Path) -> ParsedLog:
    """Parse a run.log file; RunLogError when it is missing or holds no benchmark output."""
    log = resolve_log(path)
    return parse_log_bytes(log, read_log_bytes(log))


def read_log_bytes(log: Path) -> bytes:
    """A run.log's bytes; RunLogError naming the file when it cannot be read."""
    try:
        return Path(log).read_bytes()
    except OSError as exc:
        raise RunLogError(f"cannot read {log}: {exc}") from None


def parse_log_bytes(log: Path, data: bytes) -> ParsedLog:
    """parse_run_log over the bytes of `log` (undecodable bytes replaced); RunLogError naming
    `log` as read_run_log does. A report that also compares the bytes reads them once."""
    try:
        parsed = parse_run_log(data.decode("utf-8", errors="replace"))
    except MalformedLine as exc:
        raise RunLogError(f"{log}: line {exc.line_no}: {exc.message}") from None
    if not parsed.rows and not parsed.failures and not parsed.saw_pytest and not parsed.tables:
        raise RunLogError(f"{log}: no result table and no pytest output (not a benchmark run.log?)")
    return parsed
