"""One fingerprint of a run's generated code, and convert_layout counting.

Every A/B tool (ab_repeat.sh, the screening driver, batch tools) asks this module,
directly or through `_ir_fingerprint.sh`, whether two runs compiled the same code.
The seed records why there must be exactly one rule: the screening step and the
A/B step once disagreed, so an operator let through by one was stopped by the other.

The rule:
- Only `<run>/ttgir/**/*.ttgir` files count: sorted relative paths plus contents.
  index.tsv and naming.md are left out because two runs that compiled nothing
  still have identical copies of them, which once reported "the switch changed
  nothing" for runs that generated no code at all.
- Module attributes a switch stamps on whether or not it changed anything are
  removed first (`"ttg.rlc-*" = N : i32`). FlagTree's RLC policy writes its knobs
  into the module when the switch is on; left in, 7 of 24 operators (tanh gelu mul
  softmax mm bmm replication_pad3d) that were otherwise byte-identical were judged
  "changed", i.e. the screen excluded nothing. Extra prefixes: `ZL_IR_STRIP_ATTRS`
  (comma separated attribute-name prefixes).
- Absolute paths inside quoted strings are cut to their last component first
  (`loc("/tmp/r1/.flaggems_cache/code_cache/pointwise_dynamic_<sha>_relu.py":61:0)`
  -> `loc("pointwise_dynamic_<sha>_relu.py":61:0)`; the same for LLVM's DIFile and
  PTX's .file). FlagGems generates pointwise kernels into its cache directory, which
  the A/B drivers make private per run: on the H200 an A/A screen judged relu and abs
  IR_CHANGED from the source locations alone. The file name keeps the generated
  source's content hash, so a change of generated source still counts.
- Zero `.ttgir` files is "no comparable IR", never "identical".

CLI (exit codes are an interface):
    python -m zl.ir.fingerprint RUN_DIR              print the hash; 0, or 1 = no IR
    python -m zl.ir.fingerprint compare RUN_A RUN_B  0 same, 10 different,
                                                       1 no IR on either side
    python -m zl.ir.fingerprint --converts RUN_DIR [--launch-floor N]
                                                       JSON on stdout; 0, or 1 = no IR
    2 = usage error (bad arguments, RUN_DIR does not exist).
    `--level llir` (or ptx, ...) fingerprints another dumped IR level instead.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

EXIT_OK = 0
EXIT_NO_IR = 1
EXIT_USAGE = 2
EXIT_DIFFERENT = 10

IR_SUBDIR = "ttgir"
INDEX_NAME = "index.tsv"
DEFAULT_STRIP_PREFIXES = ("ttg.rlc-",)
STRIP_ENV = "ZL_IR_STRIP_ATTRS"
CONVERT_RE = re.compile(r"\bttg\.convert_layout\b")
DEFAULT_LAUNCH_FLOOR = 1


class NoIRError(RuntimeError):
    """The run dumped no IR file of the requested level: nothing to compare."""


class RunDirError(ValueError):
    """The path given as a run directory does not exist."""


def strip_prefixes(extra: Optional[str] = None) -> List[str]:
    raw = os.environ.get(STRIP_ENV, "") if extra is None else extra
    prefixes = list(DEFAULT_STRIP_PREFIXES)
    for item in raw.split(","):
        item = item.strip()
        if item and item not in prefixes:
            prefixes.append(item)
    return prefixes


def _stamp_re(prefixes: Sequence[str]) -> "re.Pattern[str]":
    names = "|".join(re.escape(p) for p in prefixes)
    # One attribute `"name" = value` with its separating comma on either side.
    # An integer (any width), a bool or a string value: what a pass stamps.
    value = r'(?:-?[0-9]+ : i[0-9]+|true|false|"[^"\n]*")'
    return re.compile(r'(?P<lead>,\s*)?"(?:' + names + r')[^"\n]*" = ' + value + r"(?P<trail>,\s*)?")


def strip_switch_stamps(text: str, prefixes: Optional[Sequence[str]] = None) -> str:
    """Remove switch-stamped module attributes, keeping the attribute list well formed."""
    pattern = _stamp_re(prefixes if prefixes is not None else strip_prefixes())

    def repl(match: "re.Match[str]") -> str:
        # Between two attributes one separator must survive; at either end none.
        return ", " if match.group("lead") and match.group("trail") else ""

    return pattern.sub(repl, text)


# A quoted absolute path: keep the last component only.
_ABS_PATH_RE = re.compile(r'"/(?:[^"\n]*/)?([^"/\n]*)"')


def normalize_paths(text: str) -> str:
    """Cut quoted absolute paths (source locations, debug file names) to their basename."""
    return _ABS_PATH_RE.sub(lambda m: f'"{m.group(1)}"', text)


def ir_root(run_dir: os.PathLike) -> Path:
    run = Path(run_dir)
    if not run.is_dir():
        raise RunDirError(f"run directory not found: {run}")
    return run / IR_SUBDIR


def ir_files(run_dir: os.PathLike, level: str = "ttgir") -> List[Path]:
    """The run's IR files of one level, sorted by relative path (byte order)."""
    root = ir_root(run_dir)
    if not root.is_dir():
        return []
    files = [p for p in root.rglob(f"*.{level}") if p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix().encode("utf-8"))


def fingerprint(run_dir: os.PathLike, level: str = "ttgir", prefixes: Optional[Sequence[str]] = None) -> str:
    """sha256 over (relative path, stripped content) of every IR file; NoIRError if none."""
    root = ir_root(run_dir)
    files = ir_files(run_dir, level)
    if not files:
        raise NoIRError(f"no .{level} files under {root}")
    prefixes = list(prefixes) if prefixes is not None else strip_prefixes()
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\n")
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        text = strip_switch_stamps(normalize_paths(text), prefixes)
        digest.update(text.encode("utf-8", errors="surrogateescape"))
    return digest.hexdigest()


def compare(run_a: os.PathLike, run_b: os.PathLike, level: str = "ttgir") -> Dict[str, Any]:
    """{'a', 'b', 'status': same|different|no_ir, 'exit_code'} for two runs."""
    out: Dict[str, Any] = {"a": None, "b": None}
    for key, run in (("a", run_a), ("b", run_b)):
        try:
            out[key] = fingerprint(run, level)
        except NoIRError:
            out[key] = None
    if out["a"] is None or out["b"] is None:
        out.update(status="no_ir", exit_code=EXIT_NO_IR)
    elif out["a"] == out["b"]:
        out.update(status="same", exit_code=EXIT_OK)
    else:
        out.update(status="different", exit_code=EXIT_DIFFERENT)
    return out


def read_index(root: Path) -> Optional[List[Dict[str, str]]]:
    """Rows of `index.tsv` as dicts; None when missing or without the required columns."""
    index = root / INDEX_NAME
    if not index.is_file():
        return None
    try:
        lines = index.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not lines:
        return None
    header = lines[0].split("\t")
    if not {"shape", "kernel", "file", "launches"} <= set(header):
        return None
    rows = []
    for raw in lines[1:]:
        fields = raw.split("\t")
        if len(fields) < len(header):
            continue
        rows.append(dict(zip(header, fields)))
    return rows


def indexed_launches(root: Path) -> Optional[Dict[str, int]]:
    """Relative IR file path (without extension) -> measured launches, from index.tsv.

    Placeholder rows (file starting with "(") are autotune losers or variants whose
    IR could not be copied: audit rows, no file to map.
    """
    rows = read_index(root)
    if rows is None:
        return None
    launches: Dict[str, int] = {}
    for row in rows:
        name = row["file"].strip()
        if not name or name.startswith("("):
            continue
        try:
            count = int(row["launches"])
        except ValueError:
            continue
        stem = f"{row['shape']}/{row['kernel']}/{name}".rsplit(".", 1)[0]
        launches[stem] = max(launches.get(stem, 0), count)
    return launches


def convert_count(run_dir: os.PathLike, launch_floor: int = DEFAULT_LAUNCH_FLOOR) -> Dict[str, Any]:
    """Count `ttg.convert_layout` ops, overall and scoped to measured kernels.

    A benchmark builds its inputs once and then runs the operator many times under
    the timer. Counting every executed kernel credits a switch with converts it
    removed from input construction (a randn kernel run once), which the timer
    never sees. Only variants launched more than `launch_floor` times count towards
    `measured_convert_count`; what was excluded is listed. Dumped files missing
    from the index are counted (not silently dropped) and make the scope incomplete.
    Raises NoIRError when the run has no .ttgir file.
    """
    if launch_floor < 0:
        raise ValueError(f"launch floor must be >= 0, got {launch_floor}")
    root = ir_root(run_dir)
    files = ir_files(run_dir, "ttgir")
    if not files:
        raise NoIRError(f"no .ttgir files under {root}")
    launches = indexed_launches(root)
    total = measured = 0
    excluded: List[Dict[str, Any]] = []
    unindexed: List[str] = []
    per_file: List[Dict[str, Any]] = []
    for path in files:
        relative = path.relative_to(root).as_posix()
        converts = len(CONVERT_RE.findall(path.read_text(encoding="utf-8", errors="replace")))
        total += converts
        count = None if launches is None else launches.get(relative.rsplit(".", 1)[0])
        per_file.append({"file": relative, "launches": count, "convert_count": converts})
        if launches is None:
            measured += converts
        elif count is None:
            measured += converts
            unindexed.append(relative)
        elif count > launch_floor:
            measured += converts
        else:
            excluded.append({"file": relative, "launches": count, "convert_count": converts})
    return {
        "measured_convert_count": measured,
        "total_convert_count": total,
        "ttgir_files": len(files),
        "measured_launch_floor": launch_floor,
        "index_found": launches is not None,
        "scope_complete": launches is not None and not unindexed,
        "excluded_unmeasured": excluded,
        "unindexed_files": unindexed,
        "files": per_file,
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m zl.ir.fingerprint",
        description="fingerprint a run's dumped IR (exit 0 ok, 1 no IR, 2 usage, "
        "10 different for `compare`)",
    )
    p.add_argument("args", nargs="+", metavar="RUN_DIR | compare RUN_A RUN_B")
    p.add_argument("--level", default="ttgir", help="IR level (file extension), default ttgir")
    p.add_argument("--converts", action="store_true", help="print convert_layout counts as JSON")
    p.add_argument("--launch-floor", type=int, default=DEFAULT_LAUNCH_FLOOR,
                   help="with --converts: variants launched at most N times are excluded (default 1)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = _parser()
    ns = p.parse_args(argv)
    args: List[str] = ns.args
    if not re.fullmatch(r"[a-z][a-z0-9_]*", ns.level):
        p.error(f"invalid --level {ns.level!r}")
    try:
        if args[0] == "compare":
            if len(args) != 3 or ns.converts:
                p.error("usage: compare RUN_A RUN_B")
            result = compare(args[1], args[2], ns.level)
            print(f"A={result['a'] or '-'} B={result['b'] or '-'} {result['status']}")
            if result["status"] == "no_ir":
                side = " and ".join(k.upper() for k in ("a", "b") if result[k] is None)
                print(f"[ir-fingerprint] no .{ns.level} files on side {side}: no comparable IR",
                      file=sys.stderr)
            return result["exit_code"]
        if len(args) != 1:
            p.error("expected one RUN_DIR (or: compare RUN_A RUN_B)")
        if ns.converts:
            if ns.launch_floor < 0:
                p.error("--launch-floor must be >= 0")
            print(json.dumps(convert_count(args[0], ns.launch_floor), indent=1, sort_keys=True))
            return EXIT_OK
        print(fingerprint(args[0], ns.level))
        return EXIT_OK
    except RunDirError as exc:
        print(f"[ir-fingerprint] {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NoIRError as exc:
        print(f"[ir-fingerprint] {exc}: no comparable IR", file=sys.stderr)
        return EXIT_NO_IR


if __name__ == "__main__":
    sys.exit(main())
