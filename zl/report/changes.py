"""What changed in the code of a pair, per kernel variant, next to its verdict.

`pair_changes(a, b)`: for a pair whose every-level code verdict says the code differs
(IR_CHANGED@<level>, BINARY_CHANGED), every dumped kernel variant whose code differs between
side A (before) and side B (after), each with
- the compiled kernel's facts on both sides and their delta: num_warps, num_stages, shared
  memory bytes, registers and spills (index.tsv, written by the IR plugin), the
  ttg.convert_layout count of its TTGIR and the line count of its first differing level;
  a fact a side did not record is None ("not recorded" on a page), never 0;
- the first level at which it differs (its per-variant digests in ir_fingerprints.json,
  else its dumped files), the first hunk of a unified diff of that level as the
  fingerprint compares it (paths cut to basenames, switch stamps removed), a few lines, each
  cut short; a level that was not dumped (ZL_IR_LEVELS) has no excerpt, and says so;
- the full IR files on both sides.
Variants are matched within one (shape, kernel): the same identity (zl.ir.per_variant),
then the same constexprs/dtypes/specialisation (num_warps or num_stages moved), then the
one variant left on each side; the rest are listed as one side's only. Without index.tsv on
both sides, the dumped files are matched by name.

The node's change signature sums the counted deltas over its changed variants, e.g.
"+1 convert_layout, -8 registers", "code only" when none moved; a field some changed variant
did not record is named "(registers not recorded)" instead of being summed, so equal strings
mean the same measured pattern and a screen groups its changed nodes by it.
"""

from __future__ import annotations

import difflib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from zl.ir import fingerprint as fp
from zl.ir import per_variant
from zl.report.run import LoadedRun, Runs, pair_code

TEXT_LEVELS = tuple(lv for lv in fp.LEVEL_ORDER if lv != "binary")
# (field, index.tsv column, word in a signature), in signature order; convert_layout is
# counted in the dumped TTGIR.
FIELDS = (("convert_layout", None, "convert_layout"), ("registers", "n_regs", "registers"),
          ("spills", "n_spills", "spills"), ("shared", "shared", "B shared memory"),
          ("num_warps", "num_warps", "num_warps"), ("num_stages", "num_stages", "num_stages"))
EXCERPT_LINES = 12        # diff lines shown per variant, after the hunk header
EXCERPT_CONTEXT = 2       # unchanged lines around the first change
LINE_WIDTH = 160          # characters kept of each excerpt line
DIFF_WINDOW = 400         # lines past the first difference the hunk is looked for in
NOT_RECORDED = "not recorded"


def is_change(code: Optional[Dict[str, Any]]) -> bool:
    """Whether a code verdict (run.pair_code) says the generated code differs (an older
    screen.tsv's bare IR_CHANGED included)."""
    word = str((code or {}).get("verdict") or "")
    return word.startswith(fp.IR_CHANGED_AT.rstrip("@")) or word == fp.BINARY_CHANGED


def _int(text: Any) -> Optional[int]:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def _variants(run: LoadedRun) -> Tuple[List[Dict[str, Any]], bool]:
    """(the run's dumped variants, whether index.tsv named them). A variant: its stem
    `shape/kernel/name` under ttgir/, identity, index row and per-level digests."""
    try:
        record = run.ir[1]
    except (fp.RunDirError, fp.NoIRError, OSError):
        record = None
    digests: Dict[str, Dict[str, Any]] = {}
    if record and isinstance(record.get("schema_version"), int) and record["schema_version"] >= 2:
        for rec in record.get("per_variant") or []:
            if isinstance(rec, dict) and isinstance(rec.get("path"), str) and isinstance(rec.get("levels"), dict):
                digests[rec["path"]] = rec["levels"]
    rows = run.ir_index
    out = []
    if rows is not None:
        for row in rows:
            name = row["file"].strip()
            if name and not name.startswith("("):
                stem = f"{row['shape']}/{row['kernel']}/{name.rsplit('.', 1)[0]}"
                out.append({"stem": stem, "shape": row["shape"], "kernel": row["kernel"],
                            "name": stem.rsplit("/", 1)[1], "identity": per_variant.identity_of(row),
                            "row": row, "digests": digests.get(stem)})
        return out, True
    root = run.dir / fp.IR_SUBDIR
    for path in fp.ir_files(run.dir) if root.is_dir() else []:
        parts = path.relative_to(root).as_posix()[:-len(".ttgir")].split("/")
        out.append({"stem": "/".join(parts), "shape": "/".join(parts[:-2]),
                    "kernel": parts[-2] if len(parts) > 1 else "", "name": parts[-1],
                    "identity": {"file": "/".join(parts)}, "row": None, "digests": None})
    return out, False


def _match(ga: List[Dict], gb: List[Dict], key: Callable[[Dict], str],
           pairs: List[Tuple[Dict, Dict]]) -> Tuple[List[Dict], List[Dict]]:
    bucket: Dict[str, List[Dict]] = defaultdict(list)
    for v in gb:
        bucket[key(v)].append(v)
    left_a = []
    for v in ga:
        if bucket[key(v)]:
            pairs.append((v, bucket[key(v)].pop(0)))
        else:
            left_a.append(v)
    return left_a, [v for vs in bucket.values() for v in vs]


def _config_key(v: Dict) -> str:
    ident = v["identity"]
    return json.dumps([ident.get(f) for f in ("constexprs", "dtypes", "specialization", "file")], sort_keys=True)


def pair_variants(va: Sequence[Dict], vb: Sequence[Dict]) -> Tuple[List[Tuple[Dict, Dict]], List[Dict], List[Dict]]:
    """(pairs, A only, B only) within each (shape, kernel): see the module docstring."""
    groups: Dict[Tuple[str, str], Tuple[List[Dict], List[Dict]]] = defaultdict(lambda: ([], []))
    for side, vs in ((0, va), (1, vb)):
        for v in vs:
            groups[(v["shape"], v["kernel"])][side].append(v)
    pairs: List[Tuple[Dict, Dict]] = []
    only_a: List[Dict] = []
    only_b: List[Dict] = []
    for key in sorted(groups):
        ga, gb = groups[key]
        for keyfn in (lambda v: per_variant.key_of(v["identity"]) + v["identity"].get("file", ""), _config_key):
            ga, gb = _match(ga, gb, keyfn, pairs)
        if len(ga) == 1 and len(gb) == 1:
            pairs.append((ga[0], gb[0]))
            ga, gb = [], []
        only_a += ga
        only_b += gb
    return pairs, only_a, only_b


class _Texts:
    """The dumped IR texts of one pair, raw and normalised, each file read once
    (LoadedRun.ir_text) and dropped with the pair."""

    def __init__(self) -> None:
        self.prefixes = fp.strip_prefixes()
        self.texts: Dict[Tuple[str, str, str], Optional[str]] = {}
        self.norm: Dict[Tuple[str, str, str], Optional[str]] = {}

    def raw(self, run: LoadedRun, v: Dict, level: str) -> Optional[str]:
        key = (str(run.dir), v["stem"], level)
        if key not in self.texts:
            self.texts[key] = run.ir_text(f"{v['stem']}.{level}")
        return self.texts[key]

    def normalised(self, run: LoadedRun, v: Dict, level: str) -> Optional[str]:
        key = (str(run.dir), v["stem"], level)
        if key not in self.norm:
            text = self.raw(run, v, level)
            self.norm[key] = None if text is None else fp.normalize_text(text, level, self.prefixes)
        return self.norm[key]


def _first_level(texts: _Texts, ra: LoadedRun, a: Dict, rb: LoadedRun, b: Dict) -> Optional[str]:
    """The first level at which the pair's code differs; None when identical everywhere."""
    da, db = a["digests"], b["digests"]
    if da and db and any(lv in da and lv in db for lv in fp.LEVEL_ORDER):
        return next((lv for lv in fp.LEVEL_ORDER if lv in da and lv in db and str(da[lv]) != str(db[lv])), None)
    for level in TEXT_LEVELS:
        ta, tb = texts.normalised(ra, a, level), texts.normalised(rb, b, level)
        if ta is not None and tb is not None and ta != tb:
            return level
    return None


def _facts(texts: _Texts, run: LoadedRun, v: Dict) -> Dict[str, Optional[int]]:
    row = v["row"] or {}
    out = {f: _int(row.get(col)) for f, col, _ in FIELDS if col}
    ttgir = texts.raw(run, v, "ttgir")
    out["convert_layout"] = None if ttgir is None else len(fp.CONVERT_RE.findall(ttgir))
    return {f: out[f] for f, _, _ in FIELDS}


def _files(run: LoadedRun, v: Dict) -> Dict[str, str]:
    base = run.dir / fp.IR_SUBDIR
    return {lv: str(base / f"{v['stem']}.{lv}") for lv in TEXT_LEVELS
            if (base / f"{v['stem']}.{lv}").is_file()}


def _cut(line: str, width: int = LINE_WIDTH) -> str:
    return line if len(line) <= width else line[:width - 1] + "…"


def excerpt(a: str, b: str, limit: int = EXCERPT_LINES, context: int = EXCERPT_CONTEXT) -> List[str]:
    """The first hunk of a unified diff of a and b: its `@@` header, then at most `limit`
    lines, each cut to LINE_WIDTH; [] when the line sequences are equal. The hunk is looked for
    within DIFF_WINDOW lines past the first differing line, so a huge file costs no more."""
    la, lb = a.splitlines(), b.splitlines()
    first = next((i for i, (x, y) in enumerate(zip(la, lb)) if x != y), min(len(la), len(lb)))
    lo = max(0, first - context)
    wa, wb = la[lo:first + DIFF_WINDOW], lb[lo:first + DIFF_WINDOW]
    group = next(iter(difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_grouped_opcodes(context)), None)
    if group is None or all(op[0] == "equal" for op in group):
        return []
    i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
    body: List[str] = []
    for tag, a1, a2, b1, b2 in group:
        if tag == "equal":
            body += [" " + x for x in wa[a1:a2]]
        else:
            body += ["-" + x for x in wa[a1:a2]] + ["+" + x for x in wb[b1:b2]]
    out = [f"@@ -{lo + i1 + 1},{i2 - i1} +{lo + j1 + 1},{j2 - j1} @@"] + [_cut(x) for x in body[:limit]]
    if len(body) > limit:
        out.append(f"... {len(body) - limit} more line(s) in this hunk (full files named below)")
    return out


def _lines(text: Optional[str]) -> Optional[int]:
    return None if text is None else sum(1 for x in text.splitlines() if x.strip())


def _kernel(texts: _Texts, ra: LoadedRun, a: Dict, rb: LoadedRun, b: Dict, level: str) -> Dict[str, Any]:
    fa, fb = _facts(texts, ra, a), _facts(texts, rb, b)
    fields = {f: {"A": fa[f], "B": fb[f],
                  "delta": None if fa[f] is None or fb[f] is None else fb[f] - fa[f]} for f in fa}
    entry: Dict[str, Any] = {"shape": a["shape"], "kernel": a["kernel"],
                             "variant": {"A": a["name"], "B": b["name"]}, "first_level": level,
                             "fields": fields, "lines": None, "excerpt": None, "excerpt_note": "",
                             "files": {"A": _files(ra, a), "B": _files(rb, b)}}
    if level == "binary":
        entry["excerpt_note"] = "only the binary differs: every text level recorded is identical"
        return entry
    ta, tb = texts.normalised(ra, a, level), texts.normalised(rb, b, level)
    if ta is None or tb is None:
        sides = " and ".join(s for s, t in (("A", ta), ("B", tb)) if t is None)
        entry["excerpt_note"] = (f"{level} was not dumped on side {sides} (its digest differs; "
                                 f"ZL_IR_LEVELS=ttgir,{level} keeps its text)")
        return entry
    la, lb = _lines(ta), _lines(tb)
    entry["lines"] = {"level": level, "A": la, "B": lb, "delta": lb - la}
    entry["excerpt"] = excerpt(ta, tb) or None
    if entry["excerpt"] is None:
        entry["excerpt_note"] = f"the {level} texts differ only in line endings or trailing blank lines"
    return entry


def _one_sided(texts: _Texts, run: LoadedRun, v: Dict, side: str, others: Sequence[Dict],
               by_identity: bool) -> Dict[str, Any]:
    spec = by_identity and any(per_variant.specialisation_of(v["identity"], w["identity"]) for w in others)
    return {"side": side, "shape": v["shape"], "kernel": v["kernel"], "variant": v["name"],
            "specialisation": spec, "fields": _facts(texts, run, v), "files": _files(run, v)}


def signature(kernels: Sequence[Dict], only: Sequence[Dict]) -> Tuple[Optional[str], List[str]]:
    """(the change signature, the counted fields not recorded on some changed variant);
    (None, []) when no changed variant and no unexplained one-sided variant is known."""
    extra = [o for o in only if not o["specialisation"]]
    if not kernels and not extra:
        return None, []
    parts: List[str] = []
    missing: List[str] = []
    for field, _, word in FIELDS:
        deltas = [k["fields"][field]["delta"] for k in kernels]
        if any(d is None for d in deltas):
            missing.append(field)
            continue
        up, down = sum(d for d in deltas if d > 0), sum(d for d in deltas if d < 0)
        if up and down:
            parts.append(f"+{up}/{down} {word}")
        elif up or down:
            parts.append(f"{up + down:+d} {word}")
    for side in "AB":
        n = sum(1 for o in extra if o["side"] == side)
        if n:
            parts.append(f"{n} variant{'s' if n > 1 else ''} {side} only")
    text = ", ".join(parts) or "code only"
    return (text + (f" ({', '.join(missing)} {NOT_RECORDED})" if missing else "")), missing


def pair_changes(a: LoadedRun, b: LoadedRun, code: Optional[Dict[str, Any]] = None) -> Optional[Dict[str, Any]]:
    """What changed between side A and side B of one node (module docstring); None when their
    code verdict (`code`, else run.pair_code) does not say the code differs."""
    code = code if code is not None else pair_code(a, b)
    if not is_change(code):
        return None
    (va, ia), (vb, ib) = _variants(a), _variants(b)
    by_identity = ia and ib
    if not by_identity:  # one side without index.tsv: both matched by file name
        for v in va + vb:
            v["identity"] = {"file": v["stem"]}
    pairs, only_a, only_b = pair_variants(va, vb)
    texts = _Texts()
    kernels, unchanged = [], 0
    for x, y in pairs:
        level = _first_level(texts, a, x, b, y)
        if level is None:
            unchanged += 1
        else:
            kernels.append(_kernel(texts, a, x, b, y, level))
    only = ([_one_sided(texts, a, v, "A", vb, by_identity) for v in only_a]
            + [_one_sided(texts, b, v, "B", va, by_identity) for v in only_b])
    sig, missing = signature(kernels, only)
    first: Dict[str, int] = {}
    for k in kernels:
        first[k["first_level"]] = first.get(k["first_level"], 0) + 1
    note = ""
    if sig is None:
        note = ("no dumped IR on either side" if not va and not vb else
                f"the code differs ({code['verdict']}) but no dumped kernel variant shows where: "
                "the differing level was neither dumped nor recorded per variant")
    return {"signature": sig, "not_recorded": missing, "first_levels": first, "kernels": kernels,
            "only": only, "unchanged": unchanged,
            "matched_by": "identity (index.tsv)" if by_identity else "file name (no index.tsv on both sides)",
            "note": note}


def add_to_screen(result: Dict[str, Any], runs: Runs) -> None:
    """`changes` on every screen cell (views.screen_result's ops) whose code differs."""
    for o in result["ops"]:
        if not is_change(o.get("code")):
            continue
        before, after = Path(o["dirs"]["before"]), Path(o["dirs"]["after"])
        if o["code"].get("source") != "run directories" or not (before.is_dir() and after.is_dir()):
            o["changes"] = {"signature": None, "not_recorded": [], "first_levels": {}, "kernels": [],
                            "only": [], "unchanged": 0, "matched_by": "",
                            "note": "run directories not found: screen.tsv holds no per-kernel facts"}
            continue
        o["changes"] = pair_changes(runs.get(before), runs.get(after), o["code"])


# ---------------------------------------------------------------- views of one node

def headline(ch: Dict[str, Any]) -> str:
    """One line: the signature (or why there is none), what differs and where."""
    if ch.get("signature") is None:
        return f"unknown ({ch.get('note')})"
    firsts = ", ".join(f"{lv} x{n}" for lv, n in ch["first_levels"].items())
    more = [f"{len(ch['kernels'])} variant(s) differ" + (f", first at {firsts}" if firsts else "")]
    if ch["only"]:
        more.append(f"{len(ch['only'])} on one side only")
    if ch["unchanged"]:
        more.append(f"{ch['unchanged']} identical")
    return f"{ch['signature']} ({'; '.join(more)})"


def value(cell: Dict[str, Optional[int]]) -> str:
    """`A -> B (+d)`, `A` when equal, NOT_RECORDED for a side without the fact."""
    a, b = cell.get("A"), cell.get("B")
    if a is None and b is None:
        return NOT_RECORDED
    if a is None or b is None:
        return f"{NOT_RECORDED if a is None else a} -> {NOT_RECORDED if b is None else b}"
    return str(a) if a == b else f"{a} -> {b} ({b - a:+d})"


def _name(k: Dict[str, Any]) -> str:
    va, vb = k["variant"]["A"], k["variant"]["B"]
    return f"{k['shape']}/{k['kernel']}[{va if va == vb else f'{va} -> {vb}'}]"


def files_text(files: Dict[str, str]) -> str:
    """`/run/ttgir/1024/k/w4s3.{ttgir,llir}`: each dumped level's file, shell-brace style."""
    if not files:
        return "none dumped"
    stem = next(iter(files.values())).rsplit(".", 1)[0]
    return f"{stem}.{{{','.join(files)}}}" if len(files) > 1 else next(iter(files.values()))


TABLE_HEADERS = ("variant", "first level", "convert_layout", "registers", "spills", "shared (B)",
                 "num_warps", "num_stages", "lines", "IR files")


def table_rows(ch: Dict[str, Any]) -> List[List[str]]:
    """The per-variant table of a page (TABLE_HEADERS), changed variants then one-sided ones."""
    rows = []
    for k in ch["kernels"]:
        lines = k["lines"]
        rows.append([_name(k), k["first_level"]] + [value(k["fields"][f]) for f, _, _ in FIELDS]
                    + [f"{value(lines)} ({lines['level']})" if lines else NOT_RECORDED,
                       f"A: {files_text(k['files']['A'])}; B: {files_text(k['files']['B'])}"])
    for o in ch["only"]:
        why = " (argument specialisation)" if o["specialisation"] else ""
        rows.append([f"{o['shape']}/{o['kernel']}[{o['variant']}]", f"side {o['side']} only{why}"]
                    + [NOT_RECORDED if o["fields"][f] is None else str(o["fields"][f]) for f, _, _ in FIELDS]
                    + ["", f"{o['side']}: {files_text(o['files'])}"])
    return rows


def excerpts(ch: Dict[str, Any], most: int = 5) -> List[Tuple[str, List[str]]]:
    """(title, lines) per distinct excerpt (variants sharing one are named together), at most
    `most`; a variant without an excerpt gives its note instead."""
    groups: Dict[Tuple[str, ...], List[Dict]] = {}
    for k in ch["kernels"]:
        key = tuple(k["excerpt"] or [f"({k['excerpt_note']})"])
        groups.setdefault((k["first_level"],) + key, []).append(k)
    out = []
    for key, ks in list(groups.items())[:most]:
        names = ", ".join(_name(k) for k in ks[:3]) + (f" and {len(ks) - 3} more" if len(ks) > 3 else "")
        out.append((f"{key[0]}, first differing lines of {names}", list(key[1:])))
    if len(groups) > most:
        out.append((f"{len(groups) - most} more distinct excerpt(s) in --json", []))
    return out


def text_lines(prefix: str, ch: Optional[Dict[str, Any]], most: int = 10) -> List[str]:
    """Console lines: the headline, then one line per changed variant (at most `most`)."""
    if ch is None:
        return []
    out = [f"{prefix}: what changed: {headline(ch)}"]
    for k in ch["kernels"][:most]:
        moved = [f"{word} {value(k['fields'][f])}" for f, _, word in FIELDS
                 if k["fields"][f]["delta"] not in (0, None)]
        out.append(f"{prefix}:   {_name(k)}: differs from {k['first_level']}; "
                   + ("; ".join(moved) or "no counted field moved"))
    if most and len(ch["kernels"]) > most:
        out.append(f"{prefix}:   ... {len(ch['kernels']) - most} more (--json / --html)")
    return out
