"""Where a zl_bench run's seconds go, from its own log lines, next to upstream's.

Each plugin logs what it cost at the end of a run (the graph timer's ledger, the results
check, the IR fingerprints and the IR plugin's callbacks). The cost table
(`benchmarks/graph_timer_cost.py`) and the batch's per-case table (`benchmarks/batch_costs.py`)
read them here, so a wording change in one plugin line breaks one parser and its test, not
two copies.
"""

from __future__ import annotations

import bisect
import csv
import re
import statistics
from pathlib import Path

from zl import atomic

# One pattern per log line, one named group per figure (summed over repeated lines).
COST_LINES = (
    re.compile(r"graph timer spent .* warmup (?P<timer_warmup_s>[0-9.]+) s .* capture and replays "
               r"(?P<timer_graph_s>[0-9.]+) s, \d+ fallback row\(s\) (?P<timer_fallback_s>[0-9.]+) s"
               r"(?:; (?P<tuner_calls>\d+) autotuner call)?"),
    re.compile(r"\[results-plugin\] outputs of .* (?P<results_s>[0-9.]+) s outside the timed loops"),
    re.compile(r"\[ir-meta-plugin\] IR fingerprints \S+ recorded in (?P<fingerprints_ms>[0-9.]+) ms"),
    re.compile(r"IR plugin spent (?P<ir_hooks_s>[0-9.]+) s in Triton callbacks over (?P<ir_launches>\d+) "
               r"launch\(es\) and (?P<ir_dump_s>[0-9.]+) s writing the dump"))
# run_pytest.sh's CPU line: the CPU seconds of its waited children (pytest, its supervisor,
# the preparation steps), user and sys
CPU_LINE = re.compile(r"\[run\] the run's processes used CPU: user ([0-9.]+) s sys ([0-9.]+) s")
COSTS = ("timer_warmup_s", "timer_graph_s", "timer_fallback_s", "results_s", "fingerprints_s",
         "ir_hooks_s", "ir_launches", "ir_dump_s", "tuner_calls", "cpu_s")
COUNTS = ("ir_launches", "tuner_calls")   # not seconds
# the figures that are seconds (COUNTS are counts): the graph timer's replace upstream's
# own cudagraph timing; the rest is work upstream does not do at all
TIMER = ("timer_warmup_s", "timer_graph_s", "timer_fallback_s")
EXTRA = ("results_s", "fingerprints_s", "ir_hooks_s", "ir_dump_s")
# pytest -v: the outcome follows the node id on its line, or, under -s, on a later line of its
# own after the benchmark's printed table (an H200 one-process log: all 17 finished nodes
# were missed by a same-line pattern and the rate read 0 nodes/hour).
_NODE = re.compile(r"^\S+::test_\S+", re.M)
# then an optional reason (`SKIPPED (needs x)`) and progress (`[ 50%]`) end the line
_OUTCOME = re.compile(r"(?:^|\s)(PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR)(?: \(.*\))?\s*(?:\[\s*\d+%\])?\s*$", re.M)


def zl_costs(text: str) -> dict:
    """Seconds per cost line found in a zl_bench run's output (summed over repeats)."""
    totals: dict = {}
    for pattern in COST_LINES:
        for m in pattern.finditer(text):
            for key, value in m.groupdict().items():
                if value is None:          # an optional figure older logs do not have
                    continue
                if key == "fingerprints_ms":
                    key, value = "fingerprints_s", float(value) / 1000
                totals[key] = totals.get(key, 0.0) + float(value)
    for m in CPU_LINE.finditer(text):
        totals["cpu_s"] = totals.get("cpu_s", 0.0) + float(m.group(1)) + float(m.group(2))
    return {k: int(v) if k in COUNTS else round(v, 3) for k, v in totals.items()}


# _timing_plugin's closing line under --overlap (zl.timing.exclusive.ExclusiveBench.summary)
LOCK_LINE = re.compile(r"exclusive timing \(overlap=\d+, lock .*\): \d+ do_bench call\(s\) held the device "
                       r"([0-9.]+) s, waited ([0-9.]+) s(?: \(([0-9.]+) s of it for GPU work while others timed\))?"
                       r"(?:; \d+ test run\(s\) held it shared ([0-9.]+) s(?: in (\d+) stretch)?)?")


# the same line's count of shares that waited the lock's age and closed its turnstile
AGED_LINE = re.compile(r"; (\d+) share\(s\) waited [0-9.]+ s and closed the turnstile")


def aged_shares(text: str) -> int:
    """Shares of an overlapped run that waited their age for a gap between timers (0: none, or
    a build before the turnstile)."""
    return sum(int(m.group(1)) for m in AGED_LINE.finditer(text))


def lock_figures(text: str) -> tuple | None:
    """(held alone, waited, of it waited for GPU work, held shared) seconds of an overlapped
    run's timing lock, then the count of shared stretches; None without the line, a figure None
    where an older build wrote none (no shared stretches before the third, no share total
    before the fourth and fifth)."""
    m = LOCK_LINE.search(text)
    if not m:
        return None
    return tuple(None if g is None else float(g) for g in m.groups())


def figure_sum(rows: list, i: int) -> float | None:
    """The sum of figure i over rows (lock_figures of several runs); None when a row lacks it."""
    return round(sum(r[i] for r in rows), 3) if rows and all(r[i] is not None for r in rows) else None


def pytest_finished(text: str) -> list[tuple[str, str]]:
    """(node id, outcome) of each node a `pytest -v` log finished, with or without -s.

    A node whose outcome never came (the run was cut while it ran) is left out."""
    return [(node, outcome) for node, outcome, _, _ in _finished_at(text)]


def _finished_at(text: str):
    """(node, outcome, position of the node id, position of the outcome) per finished node."""
    starts = [(m.start(), m.group(0)) for m in _NODE.finditer(text)]
    for i, (pos, node) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(text)
        m = _OUTCOME.search(text, pos + len(node), end)
        if m:
            yield node, m.group(1), pos, m.start(1)


def _split_stamps(stamped: str) -> tuple[list[float], list[str]]:
    """A time-stamped log -> (each line's stamp, each line without it); a line without a
    stamp is a ValueError naming it."""
    stamps, lines = [], []
    for n, line in enumerate(stamped.splitlines(keepends=True), 1):
        stamp, sep, rest = line.partition(" ")
        try:
            stamps.append(float(stamp))
        except ValueError:
            raise ValueError(f"line {n} has no time stamp: {line[:80]!r}") from None
        lines.append(rest if sep else "\n")
    return stamps, lines


def node_seconds(stamped: str) -> list[tuple[str, str, float]]:
    """(node id, outcome, seconds) from a `pytest -v` log whose every line starts with the
    epoch seconds it was printed at (upstream_node_seconds.sh). Lines without a stamp are
    refused (ValueError).

    A node's time runs from the line before its id line to its outcome line. Not from the id
    line itself: pytest writes the id without a newline, so through a pipe it is stamped when
    the benchmark's table completes that line, after the node ran (an H200 log read
    0.0 s for all 40 nodes of a 285 s run that way)."""
    stamps, lines = _split_stamps(stamped)
    text = "".join(lines)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def line_at(pos):   # the index of the line holding text position pos
        return bisect.bisect_right(starts, pos) - 1

    out = []
    for node, outcome, begin, end in _finished_at(text):
        before = max(line_at(begin) - 1, 0)
        out.append((node, outcome, round(stamps[line_at(end)] - stamps[before], 2)))
    return out


def stamped_wall(stamped: str) -> float:
    """A time-stamped log's wall: its first stamp to its last (0.0 when empty)."""
    stamps = _split_stamps(stamped)[0]
    return stamps[-1] - stamps[0] if stamps else 0.0


def node_table(stamped: str) -> str:
    """node_seconds as a TSV (node, outcome, seconds), then a `#` line with the run's wall
    (first stamp to last) and the finished nodes per hour over it: the one-process rate."""
    rows = node_seconds(stamped)
    wall = stamped_wall(stamped)
    lines = ["node\toutcome\tseconds"] + [f"{n}\t{o}\t{s}" for n, o, s in rows]
    rate = f"{len(rows) * 3600 / wall:.0f}" if wall > 0 else "-"
    lines.append(f"# {len(rows)} node(s) finished ({sum(o == 'PASSED' for _, o, _ in rows)} PASSED), "
                 f"{sum(s for *_, s in rows):.1f} s in nodes, {wall:.1f} s wall, {rate} per hour")
    return "\n".join(lines) + "\n"


def one_process_figures(stamped: str, names: dict[str, str]) -> dict:
    """A one-process pytest run's figures from its stamped log: wall, each node's outcome and
    seconds (keyed by names[node id] where given), nodes finished, passed and failed (FAILED or
    ERROR), each per hour of the wall, and the first node that failed (None when none did)."""
    wall = round(stamped_wall(stamped), 3)
    nodes = {names.get(n, n): {"outcome": o, "seconds": s} for n, o, s in node_seconds(stamped)}
    failed = [n for n, v in nodes.items() if v["outcome"] in ("FAILED", "ERROR")]
    passed = sum(v["outcome"] == "PASSED" for v in nodes.values())
    per_hour = lambda k: round(k / wall * 3600, 1) if wall else None  # noqa: E731
    return {"wall_s": wall, "nodes_finished": len(nodes), "nodes_per_hour": per_hour(len(nodes)),
            "nodes_passed": passed, "passed_per_hour": per_hour(passed), "nodes_failed": len(failed),
            "first_failed": failed[0] if failed else None, "nodes": nodes}


def _file_stem(path: str) -> str:
    """`benchmark/test_where.py` or `where` -> `where` (ops_status.csv's op_file)."""
    stem = Path(path).name
    stem = stem[:-3] if stem.endswith(".py") else stem
    return stem[5:] if stem.startswith("test_") else stem


def read_upstream_per_node(path: Path) -> dict[tuple[str, str], tuple[int, int]]:
    """device_batch.sh's per_node.tsv (`benchmark/test_x.py::test_op<TAB>rc<TAB>seconds`) ->
    {(file stem minus `test_`, test function minus `test_`): (rc, seconds)}, the same key as
    ops_status.csv's (op_file, op): two files may hold a test function of the same name."""
    out = {}
    for line in Path(path).read_text().splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or "::test_" not in parts[0]:
            raise ValueError(f"{path}: not a per-node line: {line!r}")
        file, func = parts[0].split("::test_", 1)
        out[(_file_stem(file), func)] = (int(parts[1]), int(parts[2]))
    return out


def batch_cost_rows(batch_dir: Path, upstream: dict | None = None) -> list[dict]:
    """One dict per case of a run_batch.py batch: status, elapsed seconds, each cost figure
    from the case's run.log and, when upstream per-node seconds are given (keyed by the
    test file and function, as read_upstream_per_node gives them), upstream's seconds and
    zl_bench's excess over them."""
    batch_dir = Path(batch_dir)
    table = batch_dir / "ops_status.csv"
    if not table.is_file():
        raise FileNotFoundError(f"{batch_dir}: no ops_status.csv (not a run_batch.py batch directory)")
    rows = []
    with open(table, newline="") as fh:
        status_rows = list(csv.DictReader(fh))
    for row in status_rows:
        log = batch_dir / row["repo"] / Path(row["out_dir"]).name / "run.log"
        costs = zl_costs(log.read_text(errors="replace")) if log.is_file() else {}
        r = {"run_name": row["run_name"], "status": row["status"],
             "elapsed_s": round(float(row["elapsed_ms"] or 0) / 1000, 1)}
        r.update({k: costs.get(k) for k in COSTS})
        # the plugins' lines, not run_pytest.sh's CPU line, make a case one "with cost lines"
        plugins = any(k in costs for k in TIMER + EXTRA)
        r["timer_s"] = round(sum(costs.get(k, 0.0) for k in TIMER), 3) if plugins else None
        r["extra_s"] = round(sum(costs.get(k, 0.0) for k in EXTRA), 3) if plugins else None
        if upstream is not None:
            up = upstream.get((_file_stem(row["op_file"]), row["op"]))
            r["upstream_rc"], r["upstream_s"] = up if up else (None, None)
            r["excess_s"] = round(r["elapsed_s"] - up[1], 1) if up else None
        rows.append(r)
    return rows


def summarise(rows: list[dict]) -> list[str]:
    """Lines for the end of a batch cost table: sums and medians over the PASS cases with cost
    lines, and how much of zl_bench's excess over upstream the extra work explains."""
    full = [r for r in rows if r["status"] == "PASS" and r["extra_s"] is not None]
    if not full:
        return ["no PASS case with zl_bench's cost lines"]
    lines = [f"{len(full)} PASS case(s) with cost lines: elapsed median {statistics.median(r['elapsed_s'] for r in full):.1f} s"]
    for k in TIMER + ("timer_s",) + EXTRA + ("extra_s",):
        vals = [r[k] or 0.0 for r in full]
        lines.append(f"  {k:<18} sum {sum(vals):8.1f} s  median {statistics.median(vals):7.3f} s")
    cpu = [r["cpu_s"] for r in full if r.get("cpu_s") is not None]
    if cpu:   # CPU seconds, not wall: several cases at once share the host's cores
        lines.append(f"  {'cpu_s':<18} sum {sum(cpu):8.1f} s  median {statistics.median(cpu):7.3f} s "
                     f"(CPU of the run's processes, {len(cpu)} case(s))")
    paired = [r for r in full if r.get("excess_s") is not None]
    if paired:
        excess = sum(r["excess_s"] for r in paired)
        extra = sum(r["extra_s"] for r in paired)
        timer = sum(r["timer_s"] for r in paired)
        up = sum(r["upstream_s"] for r in paired)
        lines.append(f"  against upstream per node ({len(paired)} case(s)): zl_bench {sum(r['elapsed_s'] for r in paired):.0f} s, "
                     f"upstream {up} s, excess {excess:.0f} s ({excess / max(up, 1) * 100:.0f} %)")
        lines.append(f"  work upstream does not do (results check, fingerprints, IR callbacks and dump): "
                     f"{extra:.0f} s; zl_bench's graph timer, which replaces upstream's own timing: "
                     f"{timer:.0f} s (upstream's is not logged); the rest of the excess is in neither "
                     "(plugin start-up, the run directory, the batch layer)")
    return lines


def cost_table(rows: list[dict]) -> str:
    """The rows as TSV with a header, `-` where a figure is missing (costs.tsv, batch_costs.py)."""
    if not rows:
        return ""
    head = list(rows[0])
    body = ["\t".join("-" if r[k] is None else str(r[k]) for k in head) for r in rows]
    return "\n".join(["\t".join(head)] + body) + "\n"


def write_batch_costs(batch_dir: Path) -> list[str]:
    """<batch>/costs.tsv (one row per case), written atomically; returns the summary lines for
    run_batch.py's end-of-batch report."""
    rows = batch_cost_rows(batch_dir)
    if not rows:
        return []
    atomic.write_text(Path(batch_dir) / "costs.tsv", cost_table(rows))
    return summarise(rows)
