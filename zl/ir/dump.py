"""Write the per-shape IR tree of one run.

    <dump_dir>/<shape>/<kernel>/<variant>.ttgir   every variant launched for that shape
    <dump_dir>/<shape>/<kernel>/<variant>.<lvl>   extra levels from ZL_IR_LEVELS (llir, ptx..)
    <dump_dir>/index.tsv                          one row per (shape, variant) + audit rows
    <dump_dir>/naming.md                          abbreviation legend

index.tsv columns (consumers find them by header name, so order may grow):
shape kernel file launches sweep_launches num_warps num_stages constexprs dtypes
specialization cache_hash ttgir_cache shared n_regs n_spills. `shared` is the compile
metadata's shared-memory bytes; `n_regs` / `n_spills` are what the driver reported when the
binary was loaded (zl.ir.collect.loaded_resources). An empty cell is "not recorded", never 0.
`file` is a file name in <shape>/<kernel>/, or a
placeholder starting with "(" for rows with no file: autotune losers that only ran in
the sweep, variants compiled but never launched (shape "-"), a launch of a variant
the plugin never saw compile, a variant whose IR could not be read from the cache, or one
launched only by PyTorch's CUDA-graph capture prologue (its RNG seed/offset `fill_`, which
FlagGems runs inside `use_gems()`; not the operator's code, so never fingerprinted).
`launches` counts launches outside the autotune sweep; `sweep_launches` those inside; on a
capture-prologue row `launches` counts the prologue's launches.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from zl import atomic
from zl.ir import naming

INDEX_COLUMNS = (
    "shape", "kernel", "file", "launches", "sweep_launches", "num_warps", "num_stages",
    "constexprs", "dtypes", "specialization", "cache_hash", "ttgir_cache", "shared", "n_regs", "n_spills",
)
NEVER_LAUNCHED_SHAPE = "-"
PH_SWEEP_ONLY = "(autotune sweep only, not dumped)"
PH_NEVER_LAUNCHED = "(compiled, never launched)"
PH_UNKNOWN = "(launched, compile not seen by the IR plugin)"
PH_UNREADABLE = "(ttgir not readable from the Triton cache)"
PH_CAPTURE_PROLOGUE = "(graph capture prologue only, not dumped)"


def _cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        text = json.dumps(value, sort_keys=False, separators=(",", ":"))
    else:
        text = "" if value is None else str(value)
    return text.replace("\t", " ").replace("\n", " ")


def _dtypes(v: Mapping[str, Any]) -> Dict[str, str]:
    return {k: t for k, t in (v.get("signature") or {}).items() if t != "constexpr"}


def _row(shape: str, kernel: str, file: str, launches: int, sweep: int, v: Optional[Mapping[str, Any]], h: str) -> List[str]:
    v = v or {}
    return [
        shape, kernel, file, str(launches), str(sweep),
        _cell(v.get("num_warps")), _cell(v.get("num_stages")),
        _cell(v.get("constexprs") or {}), _cell(_dtypes(v)), _cell(v.get("specialization") or {}),
        h, _cell((v.get("ir_paths") or {}).get("ttgir")),
        _cell(v.get("shared")), _cell(v.get("n_regs")), _cell(v.get("n_spills")),
    ]


def _read_ir(v: Mapping[str, Any], level: str) -> Optional[str]:
    path = (v.get("ir_paths") or {}).get(level)
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return None


def write_tree(
    dump_dir: os.PathLike,
    variants: Mapping[str, Mapping[str, Any]],
    counts: Mapping[Tuple[str, str], Sequence[int]],
    levels: Sequence[str] = ("ttgir",),
    unknown_names: Optional[Mapping[str, str]] = None,
    prologue: Optional[Mapping[Tuple[str, str], int]] = None,
) -> Dict[str, Any]:
    """Write the tree; return a summary {'files', 'rows', 'shapes', 'missing'}.

    variants: hash -> variant record (zl.ir.variants.variant_record).
    counts: (shape label, hash) -> (launches, sweep_launches).
    unknown_names: hash-like key -> kernel name, for launches of variants never seen compiling.
    prologue: (shape label, hash) -> launches made inside a CUDA-graph capture_begin.
    """
    root = Path(dump_dir)
    root.mkdir(parents=True, exist_ok=True)
    levels = ["ttgir"] + [lv for lv in levels if lv != "ttgir"]
    by_kernel = variants_by_kernel(variants)
    abbr_by_kernel = {k: naming.legend(naming.all_param_names(vs)) for k, vs in by_kernel.items()}

    rows, files, missing = write_launched(root, variants, counts, levels, abbr_by_kernel)
    rows += audit_rows(variants, counts, unknown_names or {}, prologue or {})
    write_index(root, rows)
    atomic.write_text(root / "naming.md", naming_markdown(by_kernel, abbr_by_kernel, levels))
    return {"files": files, "rows": len(rows), "shapes": len({r[0] for r in rows}), "missing": missing}


def variants_by_kernel(variants: Mapping[str, Mapping[str, Any]]) -> Dict[str, List[Mapping[str, Any]]]:
    by_kernel: Dict[str, List[Mapping[str, Any]]] = defaultdict(list)
    for v in variants.values():
        by_kernel[v["kernel"]].append(v)
    return by_kernel


def launched_groups(variants: Mapping[str, Mapping[str, Any]],
                    counts: Mapping[Tuple[str, str], Sequence[int]]) -> Dict[Tuple[str, str], List[str]]:
    """(shape, kernel) -> hashes of the known variants launched outside the sweep there.

    Names are unique within such a group, so this is the unit `naming.name_group` works on.
    """
    launched: Dict[Tuple[str, str], List[str]] = defaultdict(list)
    for (shape, h), (n, _sweep) in counts.items():
        if n > 0 and h in variants:
            launched[(shape, variants[h]["kernel"])].append(h)
    return {key: sorted(hashes) for key, hashes in launched.items()}


def write_launched(root: Path, variants: Mapping[str, Mapping[str, Any]],
                   counts: Mapping[Tuple[str, str], Sequence[int]], levels: Sequence[str],
                   abbr_by_kernel: Mapping[str, Mapping[str, str]]) -> Tuple[List[List[str]], int, List[str]]:
    """Copy each launched variant's IR out of the Triton cache; -> (rows, files written, missing)."""
    rows: List[List[str]] = []
    files = 0
    missing: List[str] = []
    for (shape, kernel), hashes in sorted(launched_groups(variants, counts).items()):
        names = naming.name_group([variants[h] for h in hashes], abbr_by_kernel.get(kernel))
        directory = root / naming.safe(shape) / naming.safe(kernel)
        for h in hashes:
            v = variants[h]
            if write_variant(directory, names[h], v, levels):
                file = f"{names[h]}.ttgir"
                files += 1
            else:
                missing.append(f"{shape}/{kernel}/{names[h]}")
                file = PH_UNREADABLE
            n, sweep = counts[(shape, h)]
            rows.append(_row(naming.safe(shape), naming.safe(kernel), file, n, sweep, v, h))
    return rows, files, missing


def write_variant(directory: Path, stem: str, v: Mapping[str, Any], levels: Sequence[str]) -> bool:
    """Write `<stem>.ttgir` and the other levels found; False when the TTGIR is unreadable."""
    text = _read_ir(v, "ttgir")
    if text is None:
        return False
    atomic.write_text(directory / f"{stem}.ttgir", text)
    for level in levels[1:]:
        extra = _read_ir(v, level)
        if extra is not None:
            atomic.write_text(directory / f"{stem}.{level}", extra)
    return True


def audit_rows(variants: Mapping[str, Mapping[str, Any]], counts: Mapping[Tuple[str, str], Sequence[int]],
               unknown_names: Mapping[str, str],
               prologue: Optional[Mapping[Tuple[str, str], int]] = None) -> List[List[str]]:
    """Rows with no file: launches of unseen variants, sweep-only losers, capture-prologue
    launches, never-launched variants."""
    rows: List[List[str]] = []
    prologue = prologue or {}
    for (shape, h), n in sorted(prologue.items()):
        if (shape, h) in counts:
            continue  # the operator launched it there too: dumped (or audited) as such
        v = variants.get(h)
        kernel = v["kernel"] if v is not None else unknown_names.get(h, "unknown_kernel")
        rows.append(_row(naming.safe(shape), naming.safe(kernel), PH_CAPTURE_PROLOGUE, n, 0, v, h))
    for (shape, h), (n, sweep) in sorted(counts.items()):
        if h not in variants:
            kernel = unknown_names.get(h, "unknown_kernel")
            rows.append(_row(naming.safe(shape), naming.safe(kernel), PH_UNKNOWN, n, sweep, None, h))
        elif n <= 0 and sweep > 0:
            v = variants[h]
            rows.append(_row(naming.safe(shape), naming.safe(v["kernel"]), PH_SWEEP_ONLY, n, sweep, v, h))
    counted = {h for _shape, h in counts} | {h for _shape, h in prologue}
    for h, v in sorted(variants.items()):
        if h not in counted:
            rows.append(_row(NEVER_LAUNCHED_SHAPE, naming.safe(v["kernel"]), PH_NEVER_LAUNCHED, 0, 0, v, h))
    return rows


def write_index(root: Path, rows: List[List[str]]) -> None:
    """index.tsv sorted by shape, kernel, then named files before placeholders."""
    rows.sort(key=lambda r: (r[0], r[1], r[2].startswith("("), r[2], r[10]))
    atomic.write_text(root / "index.tsv", "\n".join("\t".join(r) for r in [list(INDEX_COLUMNS)] + rows) + "\n")


def naming_markdown(by_kernel: Mapping[str, Sequence[Mapping[str, Any]]], abbr_by_kernel: Mapping[str, Mapping[str, str]], levels: Sequence[str]) -> str:
    lines = [
        "# IR dump naming",
        "",
        "`<shape>/<kernel>/<variant>.ttgir`: `<shape>` is the benchmark input (tensor shapes",
        "joined by `_`), `<kernel>` the Triton kernel name. `<variant>` lists only the",
        "parameters whose value differs between the variants launched for that (shape,",
        "kernel): constexprs (multi-word names shortened to initials, legend below), then",
        "`w<num_warps>` and `s<num_stages>`. When nothing differs the name is",
        "`w<num_warps>s<num_stages>`. Names that still collide get, in this order, a dtype",
        "suffix (`__fp16`), an alignment-specialisation suffix (`__<arg>div16`: the argument",
        "is specialised as divisible by 16) and a compile-hash prefix (`__h<hash>`).",
        "",
        f"Levels dumped: {', '.join(levels)}. index.tsv lists every variant with its full",
        "parameters; rows whose `file` starts with `(` have no file (autotune sweep only,",
        "never launched, not seen compiling, or launched only by the CUDA-graph capture prologue).",
        "",
        "| abbreviation | meaning |",
        "|---|---|",
        "| `w` | num_warps |",
        "| `s` | num_stages |",
        "",
    ]
    for kernel in sorted(by_kernel):
        abbr = abbr_by_kernel.get(kernel, {})
        consts = {a: n for n, a in abbr.items() if a != n and n not in naming.FIXED_ABBR}
        args = {}
        for v in by_kernel[kernel]:
            for a in v.get("specialization") or {}:
                if naming.abbreviate(a) != a:
                    args[naming.abbreviate(a)] = a
        if not consts and not args:
            continue
        lines.append(f"## {kernel}")
        lines.append("")
        lines.append("| abbreviation | meaning |")
        lines.append("|---|---|")
        for a, n in sorted(consts.items()):
            lines.append(f"| `{a}` | constexpr `{n}` |")
        for a, n in sorted(args.items()):
            lines.append(f"| `{a}` | argument `{n}` (alignment suffix) |")
        lines.append("")
    return "\n".join(lines)
