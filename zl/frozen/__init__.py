"""Frozen validation campaigns: a reviewed manifest, checked and frozen before any device time.

A manifest (`zl.frozen.manifest`, schema-versioned JSON) states one campaign in full: the
claim it may support and the production-default policy, the pinned sources, the device, the
cells (a baseline that records autotune configs, controls that must compile to the
baseline's code, candidates that replay its configs), timeouts by cost class, judgement
thresholds and the workloads. `python -m zl.frozen.freeze` checks it against the inventory
and the real FlagGems tree, estimates its device time, and freezes the task matrix a runner
executes, bound to the manifest's bytes by sha256.

This package holds the vocabulary both sides share: every named problem (CODES), the
frozen directory's file names, the binding check (`load_frozen`) and the canary receipt
(`canary_receipt` builds it, `check_canary_receipt` is what `--selection all` demands).

Not to be confused with campaign.sh (and `zl.runlog.campaign`): that driver spreads
ab_repeat.sh over devices for the rows of a screen it is given; nothing there is fixed
before the run, and its campaign id only keeps one campaign's cells apart from another's.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from zl.flaggems import checkout_commit

# The frozen directory: prepare writes the first three (read-only; the matrix last), the
# runner the receipts beside them, tasks/<workload>/<cell>/ holding each task's run and receipt.
MANIFEST, SHAPES, MATRIX, LOCK = "manifest.json", "shapes.yaml", "task-matrix.json", ".freeze.lock"
CANARY_RECEIPT, CAMPAIGN_RECEIPT, TASK_RECEIPT = "canary-receipt.json", "campaign-receipt.json", "task-receipt.json"
WORKLOAD_RECEIPT, SUMMARY, RUN_LOCK = "workload-receipt.json", "campaign-summary.md", ".run.lock"
MATRIX_KIND, RECEIPT_KIND = "zl_bench.frozen_task_matrix", "zl_bench.canary_receipt"
RECEIPT_STATUSES = ("passed", "failed")

# Every named problem of a manifest and of its preparation: code -> what it means.
CODES: Dict[str, str] = {
    "manifest_unreadable": "the file cannot be read, is not UTF-8 or not JSON, or repeats a key",
    "unknown_schema_version": "schema_version is not one this zl_bench reads",
    "missing_field": "a required field is absent",
    "wrong_type": "a field has the wrong JSON type",
    "unknown_field": "a field this schema does not define (a misspelling is never ignored)",
    "empty_value": "a text or list that must not be empty is",
    "bad_name": "a name, dtype or variable outside its characters",
    "bad_commit": "a commit that is not full lowercase hex",
    "bad_value": "a value outside its allowed set or range",
    "bad_path": "a path that is absolute, climbs out with '..', or is not a test file",
    "unknown_backend": "device.backend names no zl_bench backend",
    "duplicate_cell": "a cell name given twice",
    "cell_order": "cells not in run order: one baseline first, then controls, then candidates",
    "no_candidate": "no candidate cell",
    "cell_variables_differ": "cells set different variables (one inherits what another sets)",
    "candidate_equals_baseline": "a candidate's environment is the baseline's",
    "reserved_variable": "a variable the runner sets per task",
    "zl_variable_in_cell": "a zl_bench measurement variable in a cell (it belongs to protocol.environment)",
    "variable_set_twice": "a variable in both protocol.environment and a cell",
    "autotune_off": "ZL_ENABLE_AUTOTUNE off: no record to replay",
    "unknown_cell": "a cell name no cell has",
    "timing_cells_incomplete": "timing_cells lacks the baseline or every candidate",
    "correctness_cells_incomplete": "correctness_cells lacks a candidate",
    "unknown_variable": "production_default names a variable no cell sets",
    "no_canary": "no workload is a canary",
    "canary_order_mismatch": "canary_order is not each canary workload exactly once",
    "unknown_cost_class": "a cost class with no timeout",
    "unsupported_dtype": "a dtype outside protocol.dtypes.supported",
    "duplicate_workload_id": "a workload id given twice",
    "duplicate_target": "two workloads measure the same target, shapes and dtypes",
    "shape_key_without_file": "a shape_key while protocol.shape_file is null",
    "narrowing_conflict": "correctness narrowed by node_ids and select at once",
    "narrowing_without_reason": "correctness narrowed without a stated reason",
    "node_id_outside_file": "a correctness node id outside the workload's correctness file",
    # prepare (zl.frozen.freeze): the manifest against the inventory, the tree and --out
    "inventory_unreadable": "the inventory CSV cannot be read",
    "target_not_in_inventory": "a target the inventory lacks, without inventory_missing_reason",
    "reason_not_needed": "inventory_missing_reason on a target the inventory has",
    "inventory_marks_skip": "the inventory marks the target's benchmark skipped",
    "source_tree_missing": "the FlagGems tree is not a directory",
    "source_not_a_checkout": "the FlagGems tree is not the top of a git checkout",
    "source_commit_mismatch": "the FlagGems tree is at another commit than source.flaggems_commit",
    "source_tree_dirty": "the tree has uncommitted edits, or a target that is not committed",
    "benchmark_target_missing": "no benchmark file, or no such test function in it",
    "correctness_target_missing": "no correctness file, or no such test in it",
    "shape_file_invalid": "protocol.shape_file cannot be read as a shape file",
    "shape_key_missing": "a shape_key the shape file lacks, or whose shapes are unusable",
    "canary_receipt_required": "--selection all without --canary-receipt",
    "canary_receipt_invalid": "the receipt cannot be read or is not a canary receipt",
    "canary_receipt_other_manifest": "the receipt is bound to another manifest",
    "canary_receipt_matrix_mismatch": "the canary matrix beside the receipt is not the one it names",
    "canary_receipt_not_passed": "the canary did not pass",
    "canary_receipt_incomplete": "the receipt lacks canary tasks",
    "frozen_dir_busy": "another prepare holds --out",
    "frozen_dir_unwritable": "--out cannot be created or written",
    "frozen_dir_differs": "--out holds another freeze (a different manifest or different inputs)",
    "frozen_binding_broken": "a frozen file no longer matches the hash the matrix binds",
    "canary_receipt_unverified": "the canary ran with a check skipped or the benchmark replaced",
    # the runner (zl.frozen.run): refused before a task runs, or the campaign stopped
    "run_dir_busy": "another runner holds the frozen directory",
    "matrix_paths_moved": "the matrix names another frozen directory or zl_bench checkout",
    "receipt_unbound": "a receipt in the frozen directory belongs to another matrix",
    "source_unverifiable": "a source's identity cannot be established (no git checkout, no commit record)",
    "zl_bench_source_mismatch": "the running zl_bench is not source.zl_bench_commit, or has edits",
    "flaggems_source_mismatch": "the FlagGems tree moved from source.flaggems_commit, or has edits",
    "triton_source_mismatch": "the imported Triton is not the one source names",
    "import_failed": "the campaign's interpreter cannot import triton, flag_gems or torch",
    "import_path_mismatch": "flag_gems imports from outside the frozen FlagGems tree",
    "devices_visible_mismatch": "not exactly device.visible_device_count devices are visible",
    "device_model_mismatch": "the visible device is not device.model",
    "device_busy": "another process runs on the device",
    "device_check_unavailable": "the backend offers no query that shows the device is idle",
    "device_changed": "sealed tasks ran on another physical device than this one",
    "environment_changed": "sealed tasks ran with other inherited compiler or import variables",
    "control_plane_broken": "a control did not reproduce the baseline's code at every level",
    "campaign_not_sealed": "reaccount: the directory holds no complete campaign",
    "reaccount_inside_sealed": "reaccount: the output lies inside the sealed campaign",
}



class Problem(NamedTuple):
    code: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.code} at {self.path}: {self.message}"


class CampaignError(ValueError):
    """One or more named problems; str() is one `code at path: message` line each."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    @property
    def codes(self) -> List[str]:
        return [p.code for p in self.problems]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fail(code: str, path: str, message: str) -> CampaignError:
    return CampaignError([Problem(code, path, message)])


def _unique_keys(pairs: Sequence[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in pairs:
        if key in out:   # json.loads would keep the last one without a word
            raise ValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def read_json(path: Path, code: str, what: str) -> Tuple[Any, bytes]:
    """(parsed, bytes) of a JSON file; CampaignError `code` when unreadable, not UTF-8, not
    JSON, or with a key repeated in one object."""
    try:
        raw = Path(path).read_bytes()
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys), raw
    except OSError as exc:
        raise fail(code, str(path), f"cannot read the {what}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise fail(code, str(path), f"the {what} is not UTF-8 JSON: {exc}") from None


def check_canary_receipt(doc: Dict[str, Any], manifest_sha: str, receipt: Path) -> Dict[str, str]:
    """A receipt that lets a full campaign start: written by the runner as
    <canary freeze>/canary-receipt.json, its manifest_sha256 this manifest's, its
    task_matrix_sha256 the canary task-matrix.json beside it (selection canary, same manifest),
    status `passed`, and a status for every task of that matrix. Returns {path, sha256}."""
    data, raw = read_json(receipt, "canary_receipt_invalid", "canary receipt")
    at = lambda key: f"{receipt}:$.{key}"  # noqa: E731
    if not isinstance(data, dict) or data.get("kind") != RECEIPT_KIND or data.get("schema_version") != 1:
        raise fail("canary_receipt_invalid", at("kind"), f"not a {RECEIPT_KIND} of schema 1")
    if data.get("manifest_sha256") != manifest_sha or data.get("campaign_id") != doc["campaign_id"]:
        raise fail("canary_receipt_other_manifest", at("manifest_sha256"),
                    f"bound to manifest {data.get('manifest_sha256')!r} of campaign {data.get('campaign_id')!r}, "
                    f"not this manifest ({manifest_sha}, {doc['campaign_id']})")
    matrix, matrix_raw = read_json(receipt.parent / MATRIX, "canary_receipt_matrix_mismatch", "canary task matrix")
    if sha256(matrix_raw) != data.get("task_matrix_sha256") or not isinstance(matrix, dict) \
            or matrix.get("selection") != "canary" or matrix.get("manifest_sha256") != manifest_sha:
        raise fail("canary_receipt_matrix_mismatch", at("task_matrix_sha256"),
                    f"{receipt.parent / MATRIX} is not the canary matrix of this manifest the receipt names")
    if data.get("status") != "passed":
        raise fail("canary_receipt_not_passed", at("status"), f"{data.get('status')!r}: the canary did not pass")
    if data.get("unverified"):
        raise fail("canary_receipt_unverified", at("unverified"),
                   f"{'; '.join(map(str, data['unverified']))}: a canary that skipped a check proves nothing "
                   "about the machine the campaign will run on")
    done = data.get("tasks") if isinstance(data.get("tasks"), dict) else {}
    ids = [t.get("id") for t in matrix.get("tasks", []) if isinstance(t, dict)]
    missing = [str(tid) for tid in ids if tid not in done]
    if missing:
        raise fail("canary_receipt_incomplete", at("tasks"), f"no status for {', '.join(missing)}")
    return {"path": str(receipt.resolve()), "sha256": sha256(raw)}


def canary_receipt(frozen_dir: Path, status: str, tasks: Mapping[str, str],
                   unverified: Sequence[str] = ()) -> Dict[str, Any]:
    """The receipt a runner writes (atomically) as <frozen_dir>/canary-receipt.json once a
    canary matrix has run: `status` is `passed` only when the canary gate passed; `tasks`
    maps each task id it ran to that task's status word; `unverified` names each check the
    run skipped (such a receipt never authorises --selection all)."""
    doc, matrix, matrix_raw = load_frozen(frozen_dir)
    unknown = sorted(set(tasks) - {t["id"] for t in matrix["tasks"]})
    if matrix["selection"] != "canary" or status not in RECEIPT_STATUSES or unknown:
        raise ValueError(f"a canary receipt needs a canary matrix, a status in {RECEIPT_STATUSES} and "
                         f"tasks of that matrix (selection {matrix['selection']}, status {status!r}, "
                         f"unknown tasks {unknown})")
    return {"schema_version": 1, "kind": RECEIPT_KIND, "campaign_id": doc["campaign_id"],
            "manifest_sha256": matrix["manifest_sha256"], "task_matrix_sha256": sha256(matrix_raw),
            "status": status, "tasks": dict(tasks), "unverified": list(unverified)}


def load_frozen(frozen_dir: Path) -> Tuple[Dict[str, Any], Dict[str, Any], bytes]:
    """(manifest, matrix, the matrix's bytes) of a freeze whose files still hash as the matrix
    binds them (the manifest's bytes are the ones prepare validated); CampaignError
    `frozen_binding_broken` naming the file that does not."""
    frozen_dir = Path(frozen_dir)
    matrix, matrix_raw = read_json(frozen_dir / MATRIX, "frozen_binding_broken", "task matrix")
    doc, raw = read_json(frozen_dir / MANIFEST, "frozen_binding_broken", "frozen manifest")
    if not isinstance(matrix, dict) or matrix.get("kind") != MATRIX_KIND or sha256(raw) != matrix.get("manifest_sha256"):
        raise fail("frozen_binding_broken", str(frozen_dir / MANIFEST),
                    f"sha256 {sha256(raw)} is not the manifest_sha256 {frozen_dir / MATRIX} was frozen for")
    tasks, need = matrix.get("tasks"), ("id", "workload", "receipt", "benchmark", "replay_of", "correctness")
    if not (isinstance((matrix.get("resolved") or {}).get("flaggems_dir"), str) and matrix.get("cells")
            and isinstance(tasks, list) and all(isinstance(t, dict) and all(k in t for k in need) for t in tasks)):
        raise fail("frozen_binding_broken", str(frozen_dir / MATRIX), "not a task matrix freeze wrote "
                   f"(resolved.flaggems_dir, cells, tasks with {', '.join(need)})")
    shapes = matrix.get("shape_file")
    if shapes is not None:
        try:
            digest = sha256((frozen_dir / SHAPES).read_bytes())
        except OSError as exc:
            digest = f"unreadable ({exc.strerror})"
        if digest != shapes.get("sha256"):
            raise fail("frozen_binding_broken", str(frozen_dir / SHAPES),
                        f"sha256 {digest} is not the {shapes.get('sha256')} the matrix binds")
    return doc, matrix, matrix_raw


# ------------------------------------------------------------------ classification

CLASSES: Dict[str, str] = {
    "G": "correct, the switch acted, and a stable speedup of at least gain_pct in both execution orders",
    "C": "correct and the switch acted, but below gain_pct in an order, or the orders' intervals overlap",
    "B": "correct, but the switch did not act on the measured kernels",
    "R": "correct, but a stable regression of loss_pct or worse",
    "K": "a correctness failure of the candidate alone",
    "X": "unsupported, timed out, a harness failure or a replay violation: nothing was judged",
}
GATE_CLASSES = ("G", "C", "B", "R")   # a canary passes when each canary workload is one of these


def rule_of(doc: Mapping[str, Any], **overrides: Any) -> Dict[str, Any]:
    """The manifest's classification rule (launch_floor, gain_pct, loss_pct, response), with
    the overrides that are not None laid over it (reaccount's changed rule)."""
    k = doc["protocol"]["classification"]
    rule = {"launch_floor": doc["protocol"]["launch_floor"], "gain_pct": k["gain_pct"],
            "loss_pct": k["loss_pct"], "response": k.get("response", "convert_layout")}
    rule.update({key: value for key, value in overrides.items() if value is not None})
    return rule


def scoped_converts(convert: Optional[Mapping[str, Any]], floor: int) -> Tuple[Optional[int], str]:
    """(ttg.convert_layout count of the measured kernels, "" or why there is none) from the
    per-file record of zl.ir.fingerprint.convert_count. A variant launched `floor` times or
    fewer built the benchmark's inputs, outside the timed region: counting it credited a
    switch with converts no timer could see."""
    files = (convert or {}).get("files") or []
    if not files:
        return None, "no TTGIR was dumped (nothing compiled through Triton)"
    if not convert.get("index_found"):
        return None, "no ttgir/index.tsv: the measured kernels cannot be told from the others"
    unindexed = [f["file"] for f in files if f["launches"] is None]
    if unindexed:
        return None, f"{len(unindexed)} dumped file(s) missing from index.tsv, e.g. {unindexed[0]}"
    return sum(f["convert_count"] for f in files if f["launches"] > floor), ""


def responded(rule: Mapping[str, Any], base: Mapping[str, Any], cand: Mapping[str, Any]) -> Tuple[Optional[bool], str]:
    """(did the switch act on this workload, why); None when the receipts cannot tell."""
    if rule["response"] == "code":
        word = (cand.get("code") or {}).get("verdict") or "NO_IR"
        if word == "NO_IR":
            return None, "no IR on a side: whether the code changed is unknown"
        return word.startswith("IR_CHANGED@") or word == "BINARY_CHANGED", f"code {word} against the baseline"
    floor = rule["launch_floor"]
    (b, why_b), (c, why_c) = scoped_converts(base.get("convert"), floor), scoped_converts(cand.get("convert"), floor)
    if b is None or c is None:
        return None, f"the measured convert topology cannot be scoped: {why_b or why_c}"
    return c < b, f"measured convert_layout {b} -> {c} (launch floor {floor})"


def _geomean(rows: Mapping[str, float], keys: Sequence[str]) -> float:
    return math.exp(sum(math.log(rows[k]) for k in keys) / len(keys))


def _not_run(name: str, r: Optional[Mapping[str, Any]]) -> str:
    return f"the {name} was not run" if not r else f"the {name} is {r.get('status')}: {r.get('reason') or '-'}"


def classify(rule: Mapping[str, Any], base: Mapping[str, Any], cand: Mapping[str, Any],
             rev_base: Optional[Mapping[str, Any]] = None, rev_cand: Optional[Mapping[str, Any]] = None,
             timed: bool = True) -> Dict[str, Any]:
    """One candidate of one workload: {class, reason, evidence} from its task receipts (the
    forward baseline and candidate, the reverse pair where the switch acted). Speedups are
    (baseline / candidate - 1) x 100 of the geometric mean latency over the shapes every
    compared run measured; each side's interval spans its two execution orders."""
    ev: Dict[str, Any] = {"rule": dict(rule)}

    def out(word: str, why: str) -> Dict[str, Any]:
        return {"class": word, "reason": why, "evidence": ev}
    if base.get("status") != "PASS":
        return out("X", _not_run("baseline", base))
    corr = cand.get("correctness") or {}
    ev["correctness"] = status = corr.get("status", "not run")
    if status == "FAIL":
        alone = (corr.get("isolation") or {}).get("status")
        ev["baseline_correctness"] = alone
        if alone == "PASS":
            return out("K", f"FlagGems' tests fail under the candidate and pass under the baseline: {corr.get('summary')}")
        return out("X", f"FlagGems' tests fail under the candidate and under the baseline ({alone}): "
                        "a defect the switch did not introduce" if alone == "FAIL" else
                   f"FlagGems' tests fail under the candidate; the baseline's run is {alone}: not judged")
    if status != "PASS":
        return out("X", f"the candidate's correctness is {status}: {corr.get('summary') or 'not judged'}")
    if cand.get("status") != "PASS":
        return out("X", _not_run("candidate", cand))
    if "MISMATCH" in str(cand.get("results")):
        return out("K", f"outputs differ from the baseline's beyond FlagGems' tolerance: {cand['results']}")
    acted, why = responded(rule, base, cand)
    ev["response"] = why
    if acted is None:
        return out("X", why)
    keys = sorted(set(base["rows"]) & set(cand["rows"]))
    if not keys:
        return out("X", "no shape was measured on both sides")
    fwd = (_geomean(base["rows"], keys) / _geomean(cand["rows"], keys) - 1) * 100
    ev["speedup_pct"], ev["shapes"] = {"forward": round(fwd, 3)}, len(keys)
    if not acted:
        if fwd <= rule["loss_pct"]:
            return out("R", f"{why}; {fwd:+.2f} % in the forward order (no reverse order where the switch did not act)")
        return out("B", f"{why}: the switch did not act")
    if not timed:
        return out("C", f"{why}; not a timing cell, so no gain is claimed")
    for name, r in (("reverse-order baseline", rev_base), ("reverse-order candidate", rev_cand)):
        if not r or r.get("status") != "PASS":
            return out("X", f"{why}, but {_not_run(name, r)}")
    keys = [k for k in keys if k in rev_base["rows"] and k in rev_cand["rows"]]
    if not keys:
        return out("X", f"{why}, but no shape was measured in both orders")
    g = [_geomean(r["rows"], keys) for r in (base, cand, rev_base, rev_cand)]
    fwd, rev = (g[0] / g[1] - 1) * 100, (g[2] / g[3] - 1) * 100
    b_iv, c_iv = sorted((g[0], g[2])), sorted((g[1], g[3]))
    overlap = b_iv[0] <= c_iv[1] and c_iv[0] <= b_iv[1]
    ev.update(speedup_pct={"forward": round(fwd, 3), "reverse": round(rev, 3)}, shapes=len(keys),
              latency_ms={"baseline": b_iv, "candidate": c_iv}, intervals_overlap=overlap)
    both = f"{fwd:+.2f} % forward, {rev:+.2f} % reverse"
    if not overlap and min(fwd, rev) >= rule["gain_pct"]:
        return out("G", f"{why}; {both}")
    if not overlap and max(fwd, rev) <= rule["loss_pct"]:
        return out("R", f"{why}; {both}")
    return out("C", f"{why}; {both}: " + ("the two orders' latency intervals overlap" if overlap else
                                          f"not {rule['gain_pct']:g} % or more in both orders"))


def classify_workload(rule: Mapping[str, Any], tasks: Sequence[Mapping[str, Any]],
                      receipts: Mapping[str, Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """{candidate cell: classify(...)} for one workload's matrix tasks and receipts by task id."""
    def find(role: str, order: str, cell: Optional[str] = None) -> Optional[Mapping[str, Any]]:
        hit = [t for t in tasks if t["role"] == role and t["order"] == order and cell in (None, t["cell"])]
        return receipts.get(hit[0]["id"]) if hit else None
    base = find("baseline", "forward") or {"status": "not run"}
    return {t["cell"]: classify(rule, base, receipts.get(t["id"]) or {"status": "not run"},
                                find("baseline", "reverse"), find("candidate", "reverse", t["cell"]), t["timed"])
            for t in tasks if t["role"] == "candidate" and t["order"] == "forward"}


# ------------------------------------------------------------------ source identities

DATA_DIR = "campaigns/"   # what a later zl_bench commit may change without changing the code


def git_status(root: str) -> Optional[List[Tuple[str, str]]]:
    """(XY, path) of `git status` in root: tracked edits and every untracked file; None when
    git cannot say."""
    try:
        proc = subprocess.run(["git", "-C", root, "status", "--porcelain=v1", "-z", "--untracked-files=all"],
                              capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode:
        return None
    out = proc.stdout.decode("utf-8", "surrogateescape")
    fields, entries = out.split("\0"), []
    i = 0
    while i < len(fields):
        item = fields[i]
        if len(item) > 3:
            entries.append((item[:2], item[3:]))
            i += 1 if item[0] not in "RC" else 2   # a rename's next field is its old path
        else:
            i += 1
    return entries


def _git(root: Any, *args: str) -> Tuple[int, str]:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout.strip()


def _edits(root: str) -> List[str]:
    status = git_status(root)
    return ["<git status failed>"] if status is None else [p for xy, p in status if xy != "??"]


def package_digest(pkg: Path) -> str:
    """sha256 over every file of an installed package (each relative path and its sha256,
    sorted; __pycache__ left out): identifies a build that records no commit (a wheel)."""
    total = hashlib.sha256()
    for path in sorted(p for p in Path(pkg).rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        one = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                one.update(chunk)
        total.update(f"{path.relative_to(pkg).as_posix()}\0{one.hexdigest()}\n".encode("utf-8", "surrogateescape"))
    return total.hexdigest()


def zl_bench_source(root: Path, pinned: str) -> Tuple[Dict[str, Any], List[Problem]]:
    at, head = "$.source.zl_bench_commit", checkout_commit(str(root))
    if not head:
        return {"path": str(root)}, [Problem("source_unverifiable", at, f"{root} is not the top of a git checkout: "
                                             f"the zl_bench that runs cannot be shown to be {pinned}")]
    seen: Dict[str, Any] = {"path": str(root), "commit": head}
    problems = []
    if head != pinned:
        ancestor, _ = _git(root, "merge-base", "--is-ancestor", pinned, head)
        rc, changed = _git(root, "diff", "--name-only", pinned, head)
        code = [p for p in changed.splitlines() if not p.startswith(DATA_DIR)]
        if ancestor or rc or code:
            problems.append(Problem("zl_bench_source_mismatch", at, f"{root} is at {head}, not {pinned}" + (
                f", and changed {', '.join(code[:6])}" if code and not (ancestor or rc) else " nor a later commit of it")))
        seen["changed_since_pinned"] = changed.splitlines()
    edits = [p for p in _edits(str(root)) if not p.startswith(DATA_DIR)]
    if edits:
        problems.append(Problem("zl_bench_source_mismatch", at, f"{root} has uncommitted edits: {', '.join(edits[:6])}"))
    return seen, problems


def flaggems_source(tree: str, pinned: str) -> Tuple[Dict[str, Any], List[Problem]]:
    at, commit = "$.source.flaggems_commit", checkout_commit(tree)
    if not commit:
        return {"path": tree}, [Problem("source_unverifiable", at, f"{tree} is not the top of a git checkout")]
    edits = _edits(tree)
    problems = [Problem("flaggems_source_mismatch", at, why) for why in (
        f"{tree} is at {commit}, not {pinned}" if commit != pinned else "",
        f"{tree} has uncommitted edits: {', '.join(edits[:6])}" if edits else "") if why]
    return {"path": tree, "commit": commit}, problems


def triton_source(source: Mapping[str, str], probe: Mapping[str, Any]) -> Tuple[Dict[str, Any], List[Problem]]:
    """Triton by its files (triton_package_sha256), else by the tracked checkout it imports
    from, else by pip's direct_url.json: the commit it was installed from."""
    pkg = Path(probe["triton_file"]).parent
    seen = {"path": str(pkg), "version": probe["triton_version"], "package_sha256": package_digest(pkg)}
    pinned, at = source.get("triton_commit"), "$.source.triton_commit"
    if source.get("triton_package_sha256"):
        seen["identified_by"] = "package_sha256"
        if seen["package_sha256"] == source["triton_package_sha256"]:
            return seen, []
        return seen, [Problem("triton_source_mismatch", "$.source.triton_package_sha256",
                              f"the imported triton at {pkg} ({seen['version']}) hashes to {seen['package_sha256']}, "
                              f"not {source['triton_package_sha256']}")]
    tracked, _ = _git(pkg, "ls-files", "--error-unmatch", "__init__.py")
    _, top = _git(pkg, "rev-parse", "--show-toplevel")
    if not tracked and top:
        seen.update(identified_by="git", checkout=top, commit=_git(top, "rev-parse", "HEAD")[1])
        edits = _edits(top)
        why = (f"{top} is at {seen['commit']}, not {pinned}" if seen["commit"] != pinned else
               f"{top} has uncommitted edits: {', '.join(edits[:6])}" if edits else "")
    elif probe.get("triton_vcs_commit"):
        seen.update(identified_by="direct_url.json", commit=probe["triton_vcs_commit"])
        why = f"triton at {pkg} was installed from {seen['commit']}, not {pinned}" if seen["commit"] != pinned else ""
    else:
        return seen, [Problem("source_unverifiable", at, f"the imported triton at {pkg} ({seen['version']}) records no "
                              f"commit: install it from a checkout, or pin its files with source.triton_package_sha256 "
                              f"= {seen['package_sha256']}")]
    return seen, [Problem("triton_source_mismatch", at, why)] if why else []
