"""Prepare a frozen validation campaign: check its manifest against the inventory and the
real FlagGems tree, estimate its device time, and freeze the task matrix a runner executes.

Every target is resolved before any device time is spent: each workload's benchmark function
and correctness tests must exist in the FlagGems tree at the manifest's commit, and its
inventory row in ops/inventory_main.csv (or a stated inventory_missing_reason). A target the
inventory named but the pinned tree had split away used to fail only inside the device run,
as an empty log. The task matrix holds one task per (workload, cell), canaries first, each
workload's baseline before its controls and candidates, then its reverse-order timing tasks;
it is bound to the manifest's bytes by sha256, so a manifest edited by one byte never reuses
it. `--selection all` needs a passing canary receipt bound to the same manifest.

Examples:
  python -m zl.frozen.freeze campaign.json --flaggems-dir /path/to/FlagGems --dry-run
  python -m zl.frozen.freeze campaign.json --flaggems-dir /path/to/FlagGems --out runs/frozen_canary
  python -m zl.frozen.freeze campaign.json --flaggems-dir /path/to/FlagGems --selection all \\
      --canary-receipt runs/frozen_canary/canary-receipt.json --out runs/frozen_all

Outputs:
  --dry-run: the tasks in run order and the budget (an upper bound: every step killed at its
  cost class's timeout, one at a time) on stdout; nothing is written.
  --out DIR: manifest.json (the manifest's bytes), shapes.yaml (protocol.shape_file's bytes,
  when it names one) and, last, task-matrix.json (the tasks, the budget, the receipt paths the
  runner writes), each atomic and read-only (0444). The same inputs again write nothing (exit
  0); different ones are refused, DIR unchanged.
  Every problem is one line on stderr: `!!! <code> at <JSON path>: <what>`; all are listed.

Exit codes:
  0  valid (--dry-run), frozen, or already frozen from the same inputs
  2  usage, or a problem in the manifest, inventory, FlagGems tree, canary receipt or --out
"""

from __future__ import annotations

import ast
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from zl import atomic, cli_help, locks
from zl.backends import get_backend
from zl.batch import inventory as inv
from zl.config import environ
from zl.flaggems import checkout_commit
from zl.frozen import (CAMPAIGN_RECEIPT, CANARY_RECEIPT, LOCK, MANIFEST, MATRIX, MATRIX_KIND, SHAPES,
                       TASK_RECEIPT, CampaignError, Problem, fail, check_canary_receipt, git_status, read_json,
                       sha256)
from zl.frozen.manifest import SELECTIONS, check
from zl.shapefile import ShapeFileError, load_bounded, shape_problem

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_INVENTORY = REPO_ROOT / "ops" / "inventory_main.csv"
# The one placeholder in an argv: the runner puts the campaign's interpreter there (the one
# it gives run_pytest.sh as ZL_PYTHON), which prepare does not choose.
PYTHON = "{python}"


def read_manifest(path: Path) -> Tuple[Dict[str, Any], bytes]:
    """(the valid manifest, its bytes); CampaignError naming every problem."""
    doc, raw = read_json(path, "manifest_unreadable", "manifest")
    return check(doc), raw


@dataclass
class Resolved:
    """What prepare found in the inventory and the tree: the facts the matrix records."""
    flaggems_dir: str
    flaggems_commit: str
    inventory: str
    inventory_sha256: str
    inventory_commit: str
    nodes: Dict[str, str] = field(default_factory=dict)       # workload id -> TEST_NODE
    run_names: Dict[str, str] = field(default_factory=dict)   # workload id -> inventory run_name
    shape_file: Optional[str] = None
    shape_bytes: Optional[bytes] = None


def _module_names(path: Path) -> Optional[set]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def resolve(doc: Dict[str, Any], flaggems_dir: str, inventory: Path) -> Resolved:
    """Resolve every workload's targets (whatever the selection: a canary freeze already
    proves the whole campaign resolves); CampaignError naming every problem."""
    problems: List[Problem] = []
    add = lambda code, path, message: problems.append(Problem(code, path, message))  # noqa: E731
    root = Path(flaggems_dir).resolve()
    want = doc["source"]["flaggems_commit"]
    commit = ""
    if not root.is_dir():
        add("source_tree_missing", "$.source.flaggems_commit", f"{root} is not a directory")
    else:
        commit = checkout_commit(str(root))
        if not commit:
            add("source_not_a_checkout", "$.source.flaggems_commit",
                f"{root} is not the top of a git checkout: its commit cannot be shown to be {want}")
        elif commit != want:
            add("source_commit_mismatch", "$.source.flaggems_commit", f"{root} is at {commit}, not {want}")
    try:
        raw = Path(inventory).read_bytes()
        entries, source = inv.read_csv(Path(inventory))
    except (OSError, inv.InventoryError) as exc:
        raise CampaignError(problems + [Problem("inventory_unreadable", str(inventory), str(exc))]) from None
    rows = {(e.test_file, e.op): e for e in entries if e.repo == "main"}
    res = Resolved(str(root), commit, str(Path(inventory).resolve()), sha256(raw), inv.source_commit(source))
    targets: Dict[str, str] = {}   # tree-relative path -> the manifest field naming it
    for i, w in enumerate(doc["workloads"]):
        path, (test_file, op) = f"$.workloads[{i}]", (w["target"]["test_file"], w["target"]["op"])
        row, reason = rows.get((test_file, op)), w.get("inventory_missing_reason")
        if row is not None and reason is not None:
            add("reason_not_needed", f"{path}.inventory_missing_reason",
                f"{inventory} has benchmark/{test_file}::test_{op} (run_name {row.run_name})")
        elif row is None and reason is None:
            add("target_not_in_inventory", f"{path}.target",
                f"{inventory} has no benchmark/{test_file}::test_{op}; name another target, or say "
                "why the inventory lacks it in inventory_missing_reason")
        if row is not None and row.marked_skip == "1":
            add("inventory_marks_skip", f"{path}.target", f"{inventory} marks test_{op} skipped: it measures nothing")
        res.run_names[w["id"]] = row.run_name if row is not None else op
        if not root.is_dir():
            continue
        bench = root / "benchmark" / test_file
        targets[f"benchmark/{test_file}"] = f"{path}.target.test_file"
        try:
            scanned = [r for r in inv.scan_file(bench, test_file) if r["op"] == op] if bench.is_file() else []
        except (OSError, inv.InventoryError) as exc:
            add("benchmark_target_missing", f"{path}.target", str(exc))
            continue
        if not scanned:
            add("benchmark_target_missing", f"{path}.target",
                f"{bench} " + ("defines no module-level test_" + op if bench.is_file() else "does not exist"))
        else:
            res.nodes[w["id"]] = inv.Entry(repo="main", run_name=res.run_names[w["id"]], **scanned[0]).node(str(root))
        corr = w["correctness"]
        cfile = root / corr["file"]
        targets[corr["file"]] = f"{path}.correctness.file"
        if not cfile.is_file():
            add("correctness_target_missing", f"{path}.correctness.file", f"{cfile} does not exist")
            continue
        names = _module_names(cfile)
        for k, node in enumerate(corr.get("node_ids", [])):
            name = node.split("::")[1].split("[")[0]
            if names is None or name not in names:
                add("correctness_target_missing", f"{path}.correctness.node_ids[{k}]",
                    f"{cfile} " + ("does not parse" if names is None else f"defines no module-level {name}"))
    status = git_status(str(root)) if commit == want else []
    if status is None:
        add("source_tree_dirty", "$.source.flaggems_commit", f"git status failed in {root}: edits cannot be ruled out")
    else:
        dirty = [p for xy, p in status if xy != "??" or p in targets]
        if dirty:
            add("source_tree_dirty", "$.source.flaggems_commit",
                f"{root} differs from {want} (uncommitted edits or targets): {', '.join(sorted(dirty)[:8])}")
    _resolve_shapes(doc, res, add)
    if problems:
        raise CampaignError(problems)
    return res


def _resolve_shapes(doc: Dict[str, Any], res: Resolved, add: Any) -> None:
    """Load protocol.shape_file once; each workload's shape_key must hold usable shapes."""
    name = doc["protocol"].get("shape_file")
    if name is None:
        return
    path = REPO_ROOT / name   # an absolute name stays itself
    try:
        res.shape_bytes = path.read_bytes()
        data = load_bounded(str(path))
    except (OSError, ShapeFileError) as exc:
        add("shape_file_invalid", "$.protocol.shape_file", str(exc))
        return
    res.shape_file = str(path)
    for i, w in enumerate(doc["workloads"]):
        key = w["shape_key"]
        if key is None:
            continue
        entry = data.get(key) if isinstance(data, dict) else None
        shapes = entry.get("shapes") if isinstance(entry, dict) else None
        problem = "" if isinstance(shapes, list) and shapes else \
            ("has no shapes: list" if entry is not None else "is not a key of the file")
        for shape in shapes if not problem else ():
            why = shape_problem(shape)
            if why:
                problem = f"shape {shape!r} {why}"
                break
        if problem:
            add("shape_key_missing", f"$.workloads[{i}].shape_key", f"{key!r} {problem} ({path})")


def ordered_workloads(doc: Dict[str, Any], selection: str) -> List[Dict[str, Any]]:
    """The workloads a selection runs, in run order: the canaries in canary_order first,
    then (selection all) every other workload in manifest order."""
    by_id = {w["id"]: w for w in doc["workloads"]}
    first = [by_id[wid] for wid in doc["protocol"]["canary_order"]]
    return first if selection == "canary" else first + [w for w in doc["workloads"] if not w["canary"]]


def workload_dtypes(doc: Dict[str, Any], workload: Dict[str, Any]) -> List[str]:
    return list(workload.get("dtypes") or doc["protocol"]["dtypes"]["default"])


def build_matrix(doc: Dict[str, Any], manifest_sha: str, selection: str, out_dir: Path,
                 res: Resolved, receipt: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """The task matrix: canary workloads first (canary_order), then the others in manifest
    order. Per workload, one forward task per cell in manifest order (the baseline, controls,
    candidates), then the reverse order for timing: each timed candidate again (last first)
    and the baseline again, both replaying the baseline's record. A reverse task runs only
    when a candidate it names in `run_if_responded` responded (classification.response): a
    difference in one execution order alone was order, not the switch, as often as not.
    Paths are absolute: the runner writes under out_dir."""
    out_dir = Path(out_dir).resolve()
    proto = doc["protocol"]
    cells, timeouts = proto["cells"], proto["timeouts_s"]
    baseline = cells[0]["name"]
    timed = [c for c in cells if c["role"] == "candidate" and c["name"] in proto["timing_cells"]]
    reverse = [(c, f"{c['name']}@reverse") for c in reversed(timed)] + [(cells[0], f"{baseline}@reverse")]
    common = dict(proto.get("environment", {}))
    shapes = str(out_dir / SHAPES) if res.shape_file else None
    tasks = []
    for w in ordered_workloads(doc, selection):
        timeout = timeouts[w["cost_class"]]
        base_run = out_dir / "tasks" / w["id"] / baseline / "run"
        for cell, name in [(c, c["name"]) for c in cells] + reverse:
            here = out_dir / "tasks" / w["id"] / name
            order = "reverse" if name.endswith("@reverse") else "forward"
            env = {"ZL_ISOLATE_TUNER_CACHE": "1", **common, **cell["env"],
                   "TEST_NODE": res.nodes[w["id"]], "FLAGGEMS_DIR": res.flaggems_dir,
                   "DTYPES": " ".join(workload_dtypes(doc, w)),
                   "SHAPE_FILE": shapes if shapes and w["shape_key"] is not None else "upstream",
                   "OUT_DIR": str(here / "run"), "ZL_CAMPAIGN_ID": doc["campaign_id"],
                   "ZL_BACKEND": get_backend(doc["device"]["backend"]).name}
            replays = cell["role"] != "baseline" or order == "reverse"
            if replays:
                env["REPLAY_FROM"] = str(base_run)
            responders = [f"{w['id']}/{c['name']}" for c in (timed if cell["role"] == "baseline" else [cell])]
            tasks.append({
                "ordinal": len(tasks) + 1, "id": f"{w['id']}/{name}", "workload": w["id"],
                "cell": cell["name"], "role": cell["role"], "order": order, "canary": w["canary"],
                "timed": cell["name"] in proto["timing_cells"], "cost_class": w["cost_class"],
                "family": w["family"], "run_name": res.run_names[w["id"]], "shape_key": w["shape_key"],
                "autotune": "replay" if replays else "record",
                "replay_of": f"{w['id']}/{baseline}" if replays else None,
                "code_must_equal": f"{w['id']}/{baseline}" if cell["role"] == "control" else None,
                "run_if_responded": responders if order == "reverse" else None,
                "benchmark": {"argv": ["bash", str(REPO_ROOT / "run_pytest.sh")], "cwd": str(REPO_ROOT),
                              "env": env, "timeout_s": timeout},
                "correctness": _correctness(proto, w, cell, res, timeout)
                if cell["name"] in proto["correctness_cells"] and order == "forward" else None,
                "receipt": str(here / TASK_RECEIPT),
            })
    matrix = {
        "schema_version": 1, "kind": MATRIX_KIND, "campaign_id": doc["campaign_id"],
        "selection": selection, "manifest_sha256": manifest_sha, "manifest": str(out_dir / MANIFEST),
        "placeholders": {PYTHON: "the campaign's interpreter (ZL_PYTHON of its run_pytest.sh runs)"},
        "resolved": {"flaggems_dir": res.flaggems_dir, "flaggems_commit": res.flaggems_commit,
                     "inventory": res.inventory, "inventory_sha256": res.inventory_sha256,
                     "inventory_commit": res.inventory_commit},
        # Prepare checked the FlagGems tree; these the runner checks on the machine first.
        "verify_before_run": ["source.zl_bench_commit", "source.triton_commit",
                              "source.flaggems_commit", "device"],
        "shape_file": {"frozen": shapes, "from": res.shape_file, "sha256": sha256(res.shape_bytes)}
        if shapes and res.shape_bytes is not None else None,
        "canary_receipt": receipt,
        "cells": [{"name": c["name"], "role": c["role"], "env": c["env"]} for c in cells],
        "timing_cells": proto["timing_cells"], "correctness_cells": proto["correctness_cells"],
        "receipts": {"canary": str(out_dir / CANARY_RECEIPT) if selection == "canary" else None,
                     "campaign": str(out_dir / CAMPAIGN_RECEIPT)},
        "tasks": tasks,
    }
    matrix["budget"] = budget(doc, tasks)
    return matrix


def _correctness(proto: Dict[str, Any], w: Dict[str, Any], cell: Dict[str, Any], res: Resolved,
                 timeout: int) -> Dict[str, Any]:
    corr = w["correctness"]
    argv = [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
            *(corr.get("node_ids") or [corr["file"]])]
    if "select" in corr:
        argv += ["-k", corr["select"]]
    narrowed = {k: corr[k] for k in ("node_ids", "select", "reason") if k in corr}
    base = proto["cells"][0]
    # A candidate's failure is its own only if the same tests pass without the switch: the
    # baseline's environment runs them then, unless the baseline is a correctness cell anyway.
    isolation = {"cell": base["name"], "env": {**proto.get("environment", {}), **base["env"]}} \
        if cell["role"] == "candidate" and base["name"] not in proto["correctness_cells"] else None
    return {"argv": argv + list(proto.get("correctness_args", [])), "cwd": res.flaggems_dir,
            "env": {**proto.get("environment", {}), **cell["env"]}, "timeout_s": timeout,
            "narrowing": narrowed or None, "isolation": isolation}


def _correctness_runs(t: Dict[str, Any]) -> int:
    return 0 if not t["correctness"] else 1 + bool(t["correctness"]["isolation"])


def budget(doc: Dict[str, Any], tasks: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Worst-case device seconds: every step (a benchmark run, a correctness run, the
    baseline's correctness run a candidate's failure calls for, a reverse-order task) killed
    at its cost class's timeout, one step at a time. An upper bound to plan with, not a
    forecast."""
    classes: Dict[str, Dict[str, int]] = {}
    for t in tasks:
        k = classes.setdefault(t["cost_class"], {"timeout_s": doc["protocol"]["timeouts_s"][t["cost_class"]],
                                                 "tasks": 0, "benchmark_s": 0, "correctness_runs": 0,
                                                 "correctness_s": 0})
        k["tasks"] += 1
        k["benchmark_s"] += t["benchmark"]["timeout_s"]
        k["correctness_runs"] += _correctness_runs(t)
        k["correctness_s"] += _correctness_runs(t) * (t["correctness"] or {}).get("timeout_s", 0)
    step = lambda t: (t["benchmark"]["timeout_s"]  # noqa: E731
                      + _correctness_runs(t) * (t["correctness"] or {}).get("timeout_s", 0))
    total = sum(step(t) for t in tasks)
    return {"tasks": len(tasks), "workloads": len({t["workload"] for t in tasks}), "by_cost_class": classes,
            "benchmark_s": sum(k["benchmark_s"] for k in classes.values()),
            "correctness_s": sum(k["correctness_s"] for k in classes.values()),
            "worst_case_s": total, "worst_case_hours": round(total / 3600, 2),
            "canary_worst_case_s": sum(step(t) for t in tasks if t["canary"])}


def _encode(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def differences(out_dir: Path, files: Sequence[Tuple[str, bytes]]) -> List[Problem]:
    """The frozen names in out_dir whose bytes are not `files`' (one this freeze does not write
    included): a freeze there would mix two campaigns."""
    wanted = dict(files)
    out = []
    for name in (MANIFEST, SHAPES, MATRIX):
        path = Path(out_dir) / name
        if path.exists() or path.is_symlink():
            try:
                same = path.read_bytes() == wanted.get(name)
            except OSError:
                same = False
            if not same:
                out.append(Problem("frozen_dir_differs", str(path), "holds another freeze's file; freeze into a new --out"))
    return out


def freeze(out_dir: Path, files: Sequence[Tuple[str, bytes]]) -> int:
    """Write `files` (name, bytes) into out_dir in order, each atomic, then read-only; returns
    how many were written. Any `differences` refuse the whole freeze before a byte is written."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        lock = locks.acquire(out_dir / LOCK)
    except locks.LockHeld as exc:
        raise fail("frozen_dir_busy", str(out_dir), str(exc)) from None
    except OSError as exc:
        raise fail("frozen_dir_unwritable", str(out_dir), str(exc)) from None
    with lock:
        problems = differences(out_dir, files)
        if problems:
            raise CampaignError(problems)
        written = 0
        for name, data in files:
            path = out_dir / name
            if path.exists():
                continue
            try:
                atomic.write_bytes(path, data)
                os.chmod(path, 0o444)
            except OSError as exc:
                raise fail("frozen_dir_unwritable", str(path), str(exc)) from None
            written += 1
        return written


def prepare(manifest: Path, flaggems_dir: str, inventory: Path, selection: str,
            out_dir: Optional[Path], canary: Optional[Path] = None,
            dry_run: bool = False) -> Tuple[Dict[str, Any], int]:
    """Validate, resolve, check the receipt and build the matrix; freeze it unless dry_run.
    Returns (matrix, files written)."""
    doc, raw = read_manifest(manifest)
    res = resolve(doc, flaggems_dir, inventory)
    digest = sha256(raw)
    receipt = None
    if canary is not None:
        receipt = check_canary_receipt(doc, digest, Path(canary))
    elif selection == "all" and not dry_run:
        raise fail("canary_receipt_required", "--canary-receipt",
                    "--selection all runs only after a canary of this manifest passed")
    matrix = build_matrix(doc, digest, selection, out_dir or Path("frozen"), res, receipt)
    files = [(MANIFEST, raw)] + ([(SHAPES, res.shape_bytes)] if matrix["shape_file"] else []) \
        + [(MATRIX, _encode(matrix))]
    if dry_run:   # with --out: would this freeze be refused there?
        problems = differences(out_dir, files) if out_dir is not None else []
        if problems:
            raise CampaignError(problems)
        return matrix, 0
    return matrix, freeze(Path(out_dir), files)


def describe(matrix: Dict[str, Any]) -> List[str]:
    """The console lines: the tasks in run order, then the budget."""
    b = matrix["budget"]
    lines = [f"campaign {matrix['campaign_id']}: selection {matrix['selection']}, {b['workloads']} workloads, "
             f"{b['tasks']} tasks (manifest sha256 {matrix['manifest_sha256'][:16]})"]
    for t in matrix["tasks"]:
        what = t["autotune"] + (f" of {t['replay_of']}" if t["replay_of"] else "")
        what += ", code must equal the baseline's" if t["code_must_equal"] else ""
        what += f", correctness {t['correctness']['timeout_s']} s" if t["correctness"] else ""
        what += f", only if {' or '.join(t['run_if_responded'])} responded" if t["run_if_responded"] else ""
        lines.append(f"  {t['ordinal']:>4}  {t['id']:<40} {'canary' if t['canary'] else '      '}  "
                     f"{t['cost_class']:<8} {t['benchmark']['timeout_s']:>6} s  {what}")
    lines.append(f"budget (upper bound: every step killed at its timeout, one at a time): benchmark "
                 f"{b['benchmark_s']} s + correctness {b['correctness_s']} s = {b['worst_case_s']} s "
                 f"({b['worst_case_hours']} h); canary tasks {b['canary_worst_case_s']} s")
    for name, k in sorted(b["by_cost_class"].items()):
        lines.append(f"  {name}: {k['tasks']} tasks x {k['timeout_s']} s + {k['correctness_runs']} correctness "
                     f"x {k['timeout_s']} s = {k['benchmark_s'] + k['correctness_s']} s")
    return lines


def main(argv: Optional[List[str]] = None) -> int:
    p = cli_help.parser(__doc__, "python -m zl.frozen.freeze")
    p.add_argument("manifest", type=Path, help="the campaign manifest (JSON, schema 1)")
    p.add_argument("--flaggems-dir", default=None,
                   help="the FlagGems checkout at source.flaggems_commit (default: $FLAGGEMS_DIR)")
    p.add_argument("--inventory", type=Path, default=DEFAULT_INVENTORY, help="default: %(default)s")
    p.add_argument("--selection", choices=SELECTIONS, default="canary",
                   help="canary: the canary workloads only (default); all: every workload, canaries first")
    p.add_argument("--canary-receipt", type=Path, help="a passing canary-receipt.json (needed to freeze all)")
    p.add_argument("--out", type=Path, help="the directory to freeze into (a new one per freeze)")
    p.add_argument("--dry-run", action="store_true", help="validate and estimate; write nothing")
    args = p.parse_args(argv)
    flaggems_dir = args.flaggems_dir or environ().get("FLAGGEMS_DIR", "")
    if not flaggems_dir:
        p.error("--flaggems-dir (or FLAGGEMS_DIR) is required: targets are resolved in that tree")
    if args.canary_receipt is not None and args.selection != "all":
        p.error("--canary-receipt is what --selection all checks; a canary selection needs none")
    if args.out is None and not args.dry_run:
        p.error("--out DIR is required to freeze (or --dry-run)")
    try:
        matrix, written = prepare(args.manifest, flaggems_dir, args.inventory, args.selection,
                                  args.out, args.canary_receipt, args.dry_run)
    except CampaignError as exc:
        for problem in exc.problems:
            print(f"!!! {problem}", file=sys.stderr)
        return 2
    print("\n".join(describe(matrix)))
    if args.dry_run:
        if args.selection == "all" and args.canary_receipt is None:
            print("note: freezing --selection all needs --canary-receipt (a passing canary of this manifest)")
        return 0
    where = Path(args.out) / MATRIX
    print(f"frozen: {where}" if written else f"already frozen from the same inputs: {where} (nothing written)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
