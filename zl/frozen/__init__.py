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
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Sequence, Tuple

# The frozen directory: prepare writes the first three (read-only; the matrix last), the
# runner the receipts beside them, tasks/<workload>/<cell>/ holding each task's run and receipt.
MANIFEST, SHAPES, MATRIX, LOCK = "manifest.json", "shapes.yaml", "task-matrix.json", ".freeze.lock"
CANARY_RECEIPT, CAMPAIGN_RECEIPT, TASK_RECEIPT = "canary-receipt.json", "campaign-receipt.json", "task-receipt.json"
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
    done = data.get("tasks") if isinstance(data.get("tasks"), dict) else {}
    ids = [t.get("id") for t in matrix.get("tasks", []) if isinstance(t, dict)]
    missing = [str(tid) for tid in ids if tid not in done]
    if missing:
        raise fail("canary_receipt_incomplete", at("tasks"), f"no status for {', '.join(missing)}")
    return {"path": str(receipt.resolve()), "sha256": sha256(raw)}


def canary_receipt(frozen_dir: Path, status: str, tasks: Mapping[str, str]) -> Dict[str, Any]:
    """The receipt a runner writes (atomically) as <frozen_dir>/canary-receipt.json once a
    canary matrix has run: `status` is `passed` only when the canary gate passed; `tasks`
    maps each task id it ran to that task's status word."""
    doc, matrix, matrix_raw = load_frozen(frozen_dir)
    unknown = sorted(set(tasks) - {t["id"] for t in matrix["tasks"]})
    if matrix["selection"] != "canary" or status not in RECEIPT_STATUSES or unknown:
        raise ValueError(f"a canary receipt needs a canary matrix, a status in {RECEIPT_STATUSES} and "
                         f"tasks of that matrix (selection {matrix['selection']}, status {status!r}, "
                         f"unknown tasks {unknown})")
    return {"schema_version": 1, "kind": RECEIPT_KIND, "campaign_id": doc["campaign_id"],
            "manifest_sha256": matrix["manifest_sha256"], "task_matrix_sha256": sha256(matrix_raw),
            "status": status, "tasks": dict(tasks)}


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
