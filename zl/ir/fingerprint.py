"""One fingerprint of a run's generated code, and convert_layout counting.

Every A/B tool (ab_repeat.sh, the screening driver, batch tools) asks this module, directly
or through `_ir_fingerprint.sh`, whether two runs compiled the same code. There is exactly
one rule: the screening and A/B steps once disagreed, and one stopped what the other passed.

The rule:
- Only `<run>/ttgir/**/*.ttgir` files count: sorted relative paths plus contents. index.tsv
  and naming.md are left out: two runs that compiled nothing have identical copies of them,
  which once read "the switch changed nothing" for runs that generated no code at all.
- Module attributes a switch stamps whether or not it changed anything are removed first
  (`"ttg.rlc-*" = N : i32`). FlagTree's RLC policy writes its knobs into the module when the
  switch is on; left in, 7 of 24 byte-identical operators (tanh gelu mul softmax mm bmm
  replication_pad3d) read "changed". Extra prefixes: `ZL_IR_STRIP_ATTRS` (comma separated).
- Absolute paths inside quoted strings are cut to their last component first
  (`loc("/tmp/r1/.flaggems_cache/code_cache/pointwise_dynamic_<sha>_relu.py":61:0)` ->
  `loc("pointwise_dynamic_<sha>_relu.py":61:0)`; LLVM's DIFile and PTX's .file alike):
  FlagGems generates kernels into its cache directory, private per run, and an H200 A/A
  screen judged relu and abs IR_CHANGED from the locations alone. The name keeps the
  source's content hash, so changed generated source still counts; a process id in any quoted
  name (`index_add_rank_2_pid_8123.py`, ~29 generators) reads `_pid_N`: A/As read index_add_
  IR_CHANGED@ttgir, then @llir (DIFile names the file apart from its directory), then @ptx
  (the `// <name>:<line>:<col>` comment of each .loc), same binary.
- Zero `.ttgir` files is "no comparable IR", never "identical".

CLI (exit codes are an interface):
    python -m zl.ir.fingerprint RUN_DIR              print the hash; 0, or 1 = no IR
    python -m zl.ir.fingerprint compare RUN_A RUN_B  0 same, 10 different, 1 no IR on a side
    python -m zl.ir.fingerprint --converts RUN_DIR [--launch-floor N]   JSON; 0, or 1 = no IR
    python -m zl.ir.fingerprint verdict RUN_A RUN_B [--tsv | --header]
        the first-difference verdict (below); 0 NO_IR_DIFF or VARIANTS_DIFFER, 10 changed, 1 no IR
    2 = usage error (bad arguments, RUN_DIR does not exist); `--level llir` (or ptx, ...)
    fingerprints another dumped IR level instead.

Every level, by default (`levels.py`): at dump time the IR plugin hashes each level the run
compiled (ttgir, llir, ptx or amdgcn, the cubin/hsaco/mubin) from the Triton cache into
`<run>/ttgir/ir_fingerprints.json`, over the dumped .ttgir files' variants and paths, so no
level has to be dumped to be compared. The verdict names the first level of LEVEL_ORDER at
which the runs differ: `IR_CHANGED@ttgir|llir|ptx`, `BINARY_CHANGED` (only the binary) or
`NO_IR_DIFF` (every level on both sides equal; the levels compared are printed, and
NO_IR_DIFF without a binary on both sides says so).

`VARIANTS_DIFFER`: every variant both runs compiled is identical; the sets differ by
argument-value specialisations (i32/i64, divisibility 16, ==1), which follow the inputs and
the timing loops, not the code generator. With per-variant digests on both sides (schema >= 2;
matched by identity, never file name: zl.ir.per_variant), common variants and one-sided ones
that specialise the other side's, a level is judged on the common ones (IR_CHANGED@<level> /
BINARY_CHANGED: a COMMON variant differs; else exit 0 like NO_IR_DIFF). Otherwise (no common
variant, a one-sided config, schema 1, levels hashed from files) the aggregate rule above.
PTX and AMDGCN lose their `.section .debug_*` blocks (line tables and string offsets that follow
the source's path); a binary is hashed over its non-debug ELF sections (zl.ir.binary).
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

from zl.config import environ
from zl.ir import per_variant

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
FINGERPRINTS_NAME = "ir_fingerprints.json"
# 2: adds `per_variant` (each variant's identity, path and digest per level). 3: `_pid_N` in absolute
# paths; 4: in any quoted name; 5: in line comments. Two normalisations: hashed again from the files.
SCHEMA_VERSION = 5
NORMALISATION_CHANGES = (3, 4, 5)
# First-difference order: the verdict names the first of these that differs. ptx (NVIDIA)
# and amdgcn (AMD) are the vendor assembly; "binary" is the cubin/hsaco/mubin.
LEVEL_ORDER = ("ttgir", "llir", "ptx", "amdgcn", "binary")
BINARY_EXTS = ("cubin", "hsaco", "mubin")
NO_IR_DIFF = "NO_IR_DIFF"
VARIANTS_DIFFER = "VARIANTS_DIFFER"
BINARY_CHANGED = "BINARY_CHANGED"
IR_CHANGED_AT = "IR_CHANGED@"
NO_IR = "NO_IR"
# screen.tsv columns after `verdict`: compared levels, then one fingerprint per level kind.
VERDICT_COLUMNS = ("ir_levels", "fp_ttgir", "fp_llir", "fp_asm", "fp_binary", "variants_only")


class NoIRError(RuntimeError):
    """The run dumped no IR file of the requested level: nothing to compare."""


class RunDirError(ValueError):
    """The path given as a run directory does not exist."""


def strip_prefixes(extra: Optional[str] = None) -> List[str]:
    raw = environ().get(STRIP_ENV, "") if extra is None else extra
    prefixes = list(DEFAULT_STRIP_PREFIXES)
    for item in raw.split(","):
        item = item.strip()
        if item and item not in prefixes:
            prefixes.append(item)
    return prefixes


def _stamp_re(prefixes: Sequence[str]) -> "re.Pattern[str]":
    names = "|".join(re.escape(p) for p in prefixes)
    # One attribute `"name" = value` with its separating comma on either side.
    value = r'(?:-?[0-9]+ : i[0-9]+|true|false|"[^"\n]*")'   # integer (any width), bool or string
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


# A process id in a generated file's name (FlagGems: f"..._pid_{os.getpid()}.py"); any quoted
# string (LLVM's DIFile and PTX's .file name the file apart from its directory).
_PID_RE, _QUOTED_RE = re.compile(r"_pid_[0-9]+(?=[._])"), re.compile(r'"[^"\n]*"')
# A line comment (`//` PTX, `;` AMDGCN: each .loc ends with `<file>:<line>:<col>` unquoted; an
# index_add_ A/A read IR_CHANGED@ptx from them alone) and an absolute directory prefix in one.
_LINE_COMMENT_RE, _COMMENT_DIR_RE = re.compile(r"(?://|;)[^\n]*"), re.compile(r"(?<=\s)/(?:[^\s/]*/)+")


def normalize_paths(text: str) -> str:
    """Cut quoted absolute paths (source locations, debug file names) to their basename; a
    process id in any quoted name reads N; line comments (`//`, `;`) get both rules."""
    text = _QUOTED_RE.sub(lambda m: _PID_RE.sub("_pid_N", m.group(0)), _ABS_PATH_RE.sub(r'"\1"', text))
    return _LINE_COMMENT_RE.sub(lambda m: _PID_RE.sub("_pid_N", _COMMENT_DIR_RE.sub("", m.group(0))), text)


# A debug section, whose line tables and string offsets follow the source's path and name: in
# PTX `.section .debug_x` and a `{ ... }` block; in AMDGCN up to the next section directive.
_DEBUG_SECTION_RE = {
    "ptx": re.compile(r"^[ \t]*\.section[ \t]+\.debug_\w+[ \t]*\n?[ \t]*\{.*?^[ \t]*\}[ \t]*\n?", re.DOTALL | re.MULTILINE),
    "amdgcn": re.compile(r"^[ \t]*\.section[ \t]+\.debug_\w+[^\n]*\n?(?:(?![ \t]*\.(?:section|text|data|"
                         r"amdgpu_metadata)\b)[^\n]*(?:\n|$))*", re.MULTILINE)}


def normalize_text(text: str, level: str, prefixes: Optional[Sequence[str]] = None) -> str:
    """The text a level's fingerprint reads: paths cut, switch stamps removed, assembly debug dropped."""
    text = strip_switch_stamps(normalize_paths(text), prefixes if prefixes is not None else strip_prefixes())
    return debug.sub("", text) if (debug := _DEBUG_SECTION_RE.get(level)) else text


def digest_items(items: Iterable, level: str, prefixes: Optional[Sequence[str]] = None) -> str:
    """sha256 over (relative path, normalised text) pairs, in byte order of the path."""
    prefixes = list(prefixes) if prefixes is not None else strip_prefixes()
    return digest_normalized((rel, normalize_text(text, level, prefixes)) for rel, text in items)


def digest_normalized(items: Iterable) -> str:
    """digest_items over texts already normalised (a caller that also hashes each text alone)."""
    digest = hashlib.sha256()
    for rel, text in sorted(items, key=lambda it: it[0].encode("utf-8")):
        digest.update(rel.encode("utf-8") + b"\n")
        digest.update(text.encode("utf-8", errors="surrogateescape"))
    return digest.hexdigest()


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
    items = ((p.relative_to(root).as_posix(), p.read_text(encoding="utf-8", errors="surrogateescape"))
             for p in files)
    return digest_items(items, level, prefixes)


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


def load_record(run_dir: os.PathLike) -> Optional[Dict[str, Any]]:
    """`<run>/ttgir/ir_fingerprints.json` as a dict; None if absent or unreadable (said on stderr)."""
    path = ir_root(run_dir) / FINGERPRINTS_NAME
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or not isinstance(doc["levels"], dict):
            raise TypeError("not an object with a levels object")
        return doc
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # A corrupt record must not read as "this run has fewer levels": say so.
        print(f"[ir-fingerprint] unreadable {path} ({exc!r}); only dumped files are compared",
              file=sys.stderr)
        return None


def _levels_of(doc: Optional[Dict[str, Any]]) -> Dict[str, str]:
    if doc is None:
        return {}
    return {lv: str(info["hash"]) for lv, info in doc["levels"].items()
            if isinstance(info, dict) and info.get("complete") and info.get("hash")}


def _variants_of(doc: Optional[Dict[str, Any]]) -> Optional[List[Dict[str, Any]]]:
    """The per-variant digests of a schema >= 2 record; None when there are none to use."""
    if doc is None or not isinstance(doc.get("schema_version"), int) or doc["schema_version"] < 2:
        return None
    records = doc.get("per_variant")
    return records if isinstance(records, list) and records else None


def _hashing_rules(doc: Dict[str, Any]) -> tuple:
    """(normalisation, stripped prefixes) of a record; without `strip_prefixes`: the default list."""
    version, got = doc.get("schema_version"), doc.get("strip_prefixes")
    return (sum(isinstance(version, int) and version >= since for since in NORMALISATION_CHANGES),
            sorted(map(str, got)) if isinstance(got, list) else sorted(DEFAULT_STRIP_PREFIXES))


def recorded_levels(run_dir: os.PathLike) -> Dict[str, str]:
    """{level: hash} of the complete levels in `<run>/ttgir/ir_fingerprints.json` ({} if none)."""
    return _levels_of(load_record(run_dir))


def run_levels(run_dir: os.PathLike, doc: Optional[Dict[str, Any]]) -> Dict[str, str]:
    """Every level's hash for a run: recorded at dump time (`doc`, its record as load_record
    read it), else from the dumped files."""
    levels = _levels_of(doc)
    for level in LEVEL_ORDER:
        if level != "binary" and level not in levels:
            try:
                levels[level] = fingerprint(run_dir, level)
            except NoIRError:
                pass
    return levels


def verdict(run_a: os.PathLike, run_b: os.PathLike, ir: Optional[Sequence] = None) -> Dict[str, Any]:
    """The first-difference rule: {'verdict', 'compared', 'one_sided', 'a', 'b', 'exit_code',
    'variants_only'} (see the module docstring for VARIANTS_DIFFER). `ir`: each side's
    (run_levels, load_record) when the caller read them; else each record is read once here."""
    doc_a, doc_b = (ir[0][1], ir[1][1]) if ir else (load_record(run_a), load_record(run_b))
    if doc_a is not None and doc_b is not None and _hashing_rules(doc_a) != _hashing_rules(doc_b):
        doc_a = doc_b = ir = None       # two normalisations or ZL_IR_STRIP_ATTRS: hash the files again
        a, b = run_levels(run_a, None), run_levels(run_b, None)
    else:
        a, b = (ir[0][0], ir[1][0]) if ir else (run_levels(run_a, doc_a), run_levels(run_b, doc_b))
    compared: List[str] = []
    one_sided = [lv for lv in LEVEL_ORDER if (lv in a) != (lv in b)]
    out: Dict[str, Any] = {"a": a, "b": b, "compared": compared, "one_sided": one_sided,
                           "variants_only": "-"}
    if "ttgir" not in a or "ttgir" not in b:
        out.update(verdict=NO_IR, exit_code=EXIT_NO_IR)
        return out
    matched = per_variant.match_or_none(_variants_of(doc_a), _variants_of(doc_b))
    out["variants_only"] = per_variant.only_cell(matched)
    # Judged on common variants only when some are common and the rest are specialisations.
    by_variant = bool(matched and matched["common"] and (matched["only_a"] or matched["only_b"])
                      and not matched["unexplained"])
    sets_differ = False
    for level in LEVEL_ORDER:
        if level not in a or level not in b:
            continue
        compared.append(level)
        if a[level] == b[level]:
            continue
        same = per_variant.common_equal(matched, level) if by_variant else None
        if same is True:
            sets_differ = True
            continue
        word = BINARY_CHANGED if level == "binary" else IR_CHANGED_AT + level
        out.update(verdict=word, exit_code=EXIT_DIFFERENT)
        return out
    out.update(verdict=VARIANTS_DIFFER if sets_differ else NO_IR_DIFF, exit_code=EXIT_OK)
    return out


def verdict_row(result: Dict[str, Any]) -> List[str]:
    """screen.tsv cells: verdict, then VERDICT_COLUMNS (`A` when equal, `A/B` when not)."""
    def cell(levels) -> str:
        level = next((lv for lv in levels if lv in result["a"] or lv in result["b"]), None)
        if level is None:
            return "-"
        fa, fb = result["a"].get(level, "-")[:12], result["b"].get(level, "-")[:12]
        return fa if fa == fb else f"{fa}/{fb}"
    return [result["verdict"], ",".join(result["compared"]) or "-", cell(["ttgir"]), cell(["llir"]),
            cell(["ptx", "amdgcn"]), cell(["binary"]), result.get("variants_only", "-")]


def read_index(root: Path) -> Optional[List[Dict[str, str]]]:
    """Rows of `index.tsv` as dicts; None when missing or without the required columns."""
    index = root / INDEX_NAME
    if not index.is_file():
        return None
    try:
        lines = index.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    header = lines[0].split("\t") if lines else []
    if not {"shape", "kernel", "file", "launches"} <= set(header):
        return None
    return [dict(zip(header, fields)) for fields in (raw.split("\t") for raw in lines[1:])
            if len(fields) >= len(header)]


def indexed_launches(root: Path) -> Optional[Dict[str, int]]:
    """Relative IR file path (without extension) -> measured launches, from index.tsv.
    Placeholder rows (file starting with "("): autotune losers or IR not copied, no file."""
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
        description="fingerprint a run's dumped IR (exit 0 ok, 1 no IR, 2 usage, 10 different for `compare`)",
    )
    p.add_argument("args", nargs="*", metavar="RUN_DIR | compare RUN_A RUN_B | verdict RUN_A RUN_B")
    p.add_argument("--level", default="ttgir", help="IR level (file extension), default ttgir")
    p.add_argument("--converts", action="store_true", help="print convert_layout counts as JSON")
    p.add_argument("--launch-floor", type=int, default=DEFAULT_LAUNCH_FLOOR,
                   help="with --converts: variants launched at most N times are excluded (default 1)")
    p.add_argument("--tsv", action="store_true",
                   help="with verdict: one screen.tsv fragment (verdict + " + " ".join(VERDICT_COLUMNS) + ")")
    p.add_argument("--header", action="store_true", help="print the --tsv column names and exit")
    return p


def _print_verdict(args: List[str], tsv: bool) -> int:
    result = verdict(args[1], args[2])
    if tsv:
        print("\t".join(verdict_row(result)))
    else:
        print(result["verdict"])
    compared = ",".join(result["compared"]) or "none"
    note = f"levels compared: {compared}"
    if result["verdict"] in (NO_IR_DIFF, VARIANTS_DIFFER) and "binary" not in result["compared"]:
        note += " (no binary hash on both sides: identical at these levels only)"
    if result.get("variants_only", "-") != "-":
        note += f"; variants compiled on one side only: {result['variants_only']}"
    if result["one_sided"]:
        note += f"; present on one side only, not compared: {','.join(result['one_sided'])}"
    print(f"[ir-fingerprint] {note}", file=sys.stderr)
    return result["exit_code"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = _parser()
    ns = p.parse_args(argv)
    args: List[str] = ns.args
    if not re.fullmatch(r"[a-z][a-z0-9_]*", ns.level):
        p.error(f"invalid --level {ns.level!r}")
    if ns.header:
        print("\t".join(("verdict",) + VERDICT_COLUMNS))
        return EXIT_OK
    if not args:
        p.error("expected RUN_DIR, compare RUN_A RUN_B or verdict RUN_A RUN_B")
    try:
        if args[0] == "verdict":
            if len(args) != 3 or ns.converts:
                p.error("usage: verdict RUN_A RUN_B [--tsv]")
            for run in args[1:]:
                ir_root(run)
            return _print_verdict(args, ns.tsv)
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
