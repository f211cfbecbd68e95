"""Write the per-shape IR tree of one run.

    <dump_dir>/<shape>/<kernel>/<variant>.ttgir   every variant launched for that shape
    <dump_dir>/<shape>/<kernel>/<variant>.<lvl>   extra levels from ZL_IR_LEVELS (llir, ptx..)
    <dump_dir>/index.tsv                          one row per (shape, variant) + audit rows
    <dump_dir>/naming.md                          abbreviation legend

index.tsv columns (consumers find them by header name, so order may grow):
shape kernel file launches sweep_launches num_warps num_stages constexprs dtypes
specialization cache_hash ttgir_cache. `file` is a file name in <shape>/<kernel>/, or a
placeholder starting with "(" for rows with no file: autotune losers that only ran in
the sweep, variants compiled but never launched (shape "-"), a launch of a variant
the plugin never saw compile, or a variant whose IR could not be read from the cache.
`launches` counts launches outside the autotune sweep; `sweep_launches` those inside.
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
    "constexprs", "dtypes", "specialization", "cache_hash", "ttgir_cache",
)
NEVER_LAUNCHED_SHAPE = "-"
PH_SWEEP_ONLY = "(autotune sweep only, not dumped)"
PH_NEVER_LAUNCHED = "(compiled, never launched)"
PH_UNKNOWN = "(launched, compile not seen by the IR plugin)"
PH_UNREADABLE = "(ttgir not readable from the Triton cache)"


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
) -> Dict[str, Any]:
    """Write the tree; return a summary {'files', 'rows', 'shapes', 'missing'}.

    variants: hash -> variant record (zl.ir.variants.variant_record).
    counts: (shape label, hash) -> (launches, sweep_launches).
    unknown_names: hash-like key -> kernel name, for launches of variants never seen compiling.
    """
    root = Path(dump_dir)
    root.mkdir(parents=True, exist_ok=True)
    unknown_names = dict(unknown_names or {})
    levels = ["ttgir"] + [lv for lv in levels if lv != "ttgir"]

    by_kernel: Dict[str, List[Mapping[str, Any]]] = defaultdict(list)
    for v in variants.values():
        by_kernel[v["kernel"]].append(v)
    abbr_by_kernel = {k: naming.legend(naming.all_param_names(vs)) for k, vs in by_kernel.items()}

    launched: Dict[Tuple[str, str], List[str]] = defaultdict(list)  # (shape, kernel) -> hashes
    for (shape, h), (n, _sweep) in counts.items():
        if n > 0 and h in variants:
            launched[(shape, variants[h]["kernel"])].append(h)

    rows: List[List[str]] = []
    files = 0
    missing: List[str] = []
    seen_hashes = set()
    for (shape, kernel), hashes in sorted(launched.items()):
        members = [variants[h] for h in sorted(hashes)]
        names = naming.name_group(members, abbr_by_kernel.get(kernel))
        for h in sorted(hashes):
            v = variants[h]
            n, sweep = counts[(shape, h)]
            directory = root / naming.safe(shape) / naming.safe(kernel)
            text = _read_ir(v, "ttgir")
            if text is None:
                missing.append(f"{shape}/{kernel}/{names[h]}")
                file = PH_UNREADABLE
            else:
                file = f"{names[h]}.ttgir"
                atomic.write_text(directory / file, text)
                files += 1
                for level in levels[1:]:
                    extra = _read_ir(v, level)
                    if extra is not None:
                        atomic.write_text(directory / f"{names[h]}.{level}", extra)
            rows.append(_row(naming.safe(shape), naming.safe(kernel), file, n, sweep, v, h))

    for (shape, h), (n, sweep) in sorted(counts.items()):
        seen_hashes.add(h)
        if h not in variants:
            kernel = unknown_names.get(h, "unknown_kernel")
            rows.append(_row(naming.safe(shape), naming.safe(kernel), PH_UNKNOWN, n, sweep, None, h))
        elif n <= 0 and sweep > 0:
            v = variants[h]
            rows.append(_row(naming.safe(shape), naming.safe(v["kernel"]), PH_SWEEP_ONLY, n, sweep, v, h))
    for h, v in sorted(variants.items()):
        if h not in seen_hashes:
            rows.append(_row(NEVER_LAUNCHED_SHAPE, naming.safe(v["kernel"]), PH_NEVER_LAUNCHED, 0, 0, v, h))

    rows.sort(key=lambda r: (r[0], r[1], r[2].startswith("("), r[2], r[10]))
    atomic.write_text(root / "index.tsv", "\n".join("\t".join(r) for r in [list(INDEX_COLUMNS)] + rows) + "\n")
    atomic.write_text(root / "naming.md", naming_markdown(by_kernel, abbr_by_kernel, levels))
    return {"files": files, "rows": len(rows), "shapes": len({r[0] for r in rows}), "missing": missing}


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
        "never launched, or not seen compiling).",
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
