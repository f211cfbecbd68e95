"""Frozen validation campaigns (zl/frozen/): the manifest's named errors, its resolution against
an inventory and a real (git) FlagGems tree, the budget, the frozen task matrix and its hash
binding, idempotence, and the canary receipt `--selection all` demands."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.runner import base_env, procs_with_env
from zl import locks, preflight
from zl.batch import inventory as inv
from zl.frozen import (CLASSES, CODES, MANIFEST, MATRIX, SHAPES, CampaignError, Problem, canary_receipt, classify,
                       classify_workload, flaggems_source, load_frozen, package_digest, rule_of, triton_source,
                       zl_bench_source)
from zl.frozen import freeze as fz
from zl.frozen import run as fr
from zl.frozen.manifest import validate

REPO_ROOT = Path(__file__).resolve().parents[1]
FAKE = REPO_ROOT / "tests" / "fake_flaggems"
GIT = ["git", "-c", "user.name=zl", "-c", "user.email=zl@localhost", "-c", "commit.gpgsign=false"]
SHAPES_YAML = "softmax:\n  shapes:\n  - [64, 64]\nabs:\n  shapes:\n  - [1024]\nrelu:\n  shapes:\n  - [2048]\n"


def _git(root, *args):
    return subprocess.run([*GIT, "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A committed FlagGems-shaped tree (the fake tree plus correctness tests), its inventory
    and a shape file: what a manifest is checked against."""
    base = tmp_path_factory.mktemp("frozen")
    tree = base / "FlagGems"
    shutil.copytree(FAKE, tree, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    (tree / "tests").mkdir()
    for op in ("softmax", "abs", "relu"):
        (tree / "tests" / f"test_{op}.py").write_text(
            f"def test_accuracy_{op}():\n    pass\n\n\ndef test_accuracy_{op}_out():\n    pass\n")
    # Correctness that the switch breaks (a candidate-only failure) and one broken without it.
    (tree / "tests" / "test_guard.py").write_text(
        "import os\n\n\ndef test_switch_guard():\n    assert os.environ.get('MY_SWITCH') != '1'\n\n\n"
        "def test_always_broken():\n    assert False, 'broken whatever the switch'\n")
    (tree / ".gitignore").write_text("__pycache__/\n")
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "tree")
    commit = _git(tree, "rev-parse", "HEAD")
    inventory = base / "inventory_main.csv"
    inv.write_csv(inventory, inv.scan_tree(tree, "main"), f"source=fake commit={commit}")
    shapes = base / "shapes.yaml"
    shapes.write_text(SHAPES_YAML)
    # The fake tree's benchmark conftest loads the CPU driver from ../../harness: a real run of
    # run_pytest.sh on this copy finds it there.
    (base / "harness").symlink_to(REPO_ROOT / "tests" / "harness")
    return {"tree": tree, "commit": commit, "inventory": inventory, "shapes": shapes, "base": base}


def _workload(wid, op, cost, canary):
    return {"id": wid, "target": {"test_file": f"test_{op}.py", "op": op}, "shape_key": op,
            "family": "pointwise", "cost_class": cost, "canary": canary,
            "correctness": {"file": f"tests/test_{op}.py"}, "prior_evidence": {"gain_pct": 4.5}}


def _manifest(world):
    return {
        "schema_version": 1,
        "campaign_id": "layout-switch-v1",
        "permitted_claim": "correctness and same-contract latency of these workloads on this device only",
        "production_default": {"policy": "unchanged", "environment": {"MY_SWITCH": "0"}},
        "source": {"triton": "flagtree", "triton_commit": "1" * 40, "flaggems_commit": world["commit"],
                   "zl_bench_commit": "2" * 40},
        "device": {"backend": "cuda", "model": "NVIDIA H200", "visible_device_count": 1},
        "protocol": {
            "cells": [{"name": "off", "role": "baseline", "env": {"MY_SWITCH": "0", "MY_MASK": "13"}},
                      {"name": "mask0", "role": "control", "env": {"MY_SWITCH": "1", "MY_MASK": "0"}},
                      {"name": "on", "role": "candidate", "env": {"MY_SWITCH": "1", "MY_MASK": "13"}}],
            "timing_cells": ["off", "on"],
            "correctness_cells": ["on"],
            "canary_order": ["abs", "softmax"],
            "dtypes": {"default": ["float16"], "supported": ["float16", "float32", "bfloat16"]},
            "timeouts_s": {"light": 300, "heavy": 1800},
            "launch_floor": 1,
            "classification": {"gain_pct": 5.0, "loss_pct": -3.0},
            "environment": {"ZL_L2": "warm", "ZL_SEED": "7"},
            "shape_file": str(world["shapes"]),
            "correctness_args": ["-p", "no:randomly"],
        },
        "workloads": [_workload("softmax", "softmax", "light", True),
                      _workload("abs", "abs", "heavy", True),
                      _workload("relu", "relu", "light", False)],
    }


def _write(tmp_path, doc, name="campaign.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=2))
    return path


def _prepare(world, manifest, out=None, selection="canary", canary=None, dry_run=False, tree=None,
             inventory=None):
    return fz.prepare(manifest, str(tree or world["tree"]), inventory or world["inventory"], selection,
                      out, canary, dry_run)


def _refused(world, tmp_path, doc):
    """The (code, JSON path) pairs a dry run of `doc` is refused with."""
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, doc), dry_run=True)
    return _codes(exc)


def _codes(excinfo):
    return [(p.code, p.path) for p in excinfo.value.problems]


def test_the_example_manifest_is_valid(world):
    assert validate(_manifest(world)) == []


def _set(path, value):
    def edit(doc):
        *parents, last = path
        node = doc
        for key in parents:
            node = node[key]
        node[last] = value
    return edit


def _delete(path):
    def edit(doc):
        *parents, last = path
        node = doc
        for key in parents:
            node = node[key]
        del node[last]
    return edit


def _dup_workload(doc):
    doc["workloads"][2]["id"] = "abs"


def _cells_swapped(doc):
    cells = doc["protocol"]["cells"]
    cells[0], cells[2] = cells[2], cells[0]


def _no_canary(doc):
    for w in doc["workloads"]:
        w["canary"] = False
    doc["protocol"]["canary_order"] = []


def _same_target_as_abs(doc):
    doc["workloads"][2].update(target={"test_file": "test_abs.py", "op": "abs"}, shape_key="abs")
    doc["workloads"][2]["dtypes"] = ["float16"]   # the default, spelt out: the same measurement


# (mutation, code, JSON path of the bad field): one case per named manifest error.
MANIFEST_CASES = [
    (_set(["schema_version"], 2), "unknown_schema_version", "$.schema_version"),
    (_delete(["campaign_id"]), "missing_field", "$.campaign_id"),
    (_set(["device", "visible_device_count"], "1"), "wrong_type", "$.device.visible_device_count"),
    (_set(["workloads", 0, "canery"], True), "unknown_field", "$.workloads[0].canery"),
    (_set(["permitted_claim"], "  "), "empty_value", "$.permitted_claim"),
    (_set(["campaign_id"], "a/b"), "bad_name", "$.campaign_id"),
    (_set(["source", "flaggems_commit"], "HEAD"), "bad_commit", "$.source.flaggems_commit"),
    (_delete(["source", "triton_commit"]), "missing_field", "$.source.triton_commit"),
    (_set(["source", "triton_package_sha256"], "abc"), "bad_value", "$.source.triton_package_sha256"),
    (_set(["protocol", "classification", "response"], "topology"), "bad_value", "$.protocol.classification.response"),
    (_set(["protocol", "launch_floor"], -1), "bad_value", "$.protocol.launch_floor"),
    (_set(["workloads", 0, "target", "test_file"], "../test_softmax.py"), "bad_path",
     "$.workloads[0].target.test_file"),
    (_set(["device", "backend"], "tpu"), "unknown_backend", "$.device.backend"),
    (_set(["protocol", "cells", 1, "name"], "off"), "duplicate_cell", "$.protocol.cells[1].name"),
    (_cells_swapped, "cell_order", "$.protocol.cells"),
    (_set(["protocol", "cells", 2, "role"], "control"), "no_candidate", "$.protocol.cells"),
    (_delete(["protocol", "cells", 1, "env", "MY_MASK"]), "cell_variables_differ", "$.protocol.cells[1].env"),
    (_set(["protocol", "cells", 2, "env"], {"MY_SWITCH": "0", "MY_MASK": "13"}), "candidate_equals_baseline",
     "$.protocol.cells[2].env"),
    (_set(["protocol", "cells", 2, "env", "REPLAY_FROM"], "/tmp/x"), "reserved_variable",
     "$.protocol.cells[2].env.REPLAY_FROM"),
    (_set(["protocol", "cells", 2, "env", "ZL_L2"], "cold"), "zl_variable_in_cell",
     "$.protocol.cells[2].env.ZL_L2"),
    (_set(["protocol", "environment", "MY_MASK"], "13"), "variable_set_twice", "$.protocol.cells[0].env.MY_MASK"),
    (_set(["protocol", "environment", "ZL_ENABLE_AUTOTUNE"], "off"), "autotune_off",
     "$.protocol.environment.ZL_ENABLE_AUTOTUNE"),
    (_set(["protocol", "timing_cells"], ["off", "onn"]), "unknown_cell", "$.protocol.timing_cells[1]"),
    (_set(["protocol", "timing_cells"], ["off", "mask0"]), "timing_cells_incomplete", "$.protocol.timing_cells"),
    (_set(["protocol", "correctness_cells"], ["off"]), "correctness_cells_incomplete",
     "$.protocol.correctness_cells"),
    (_set(["production_default", "environment", "OTHER"], "1"), "unknown_variable",
     "$.production_default.environment.OTHER"),
    (_set(["protocol", "canary_order"], ["abs"]), "canary_order_mismatch", "$.protocol.canary_order"),
    (_no_canary, "no_canary", "$.workloads"),
    (_set(["workloads", 2, "cost_class"], "medium"), "unknown_cost_class", "$.workloads[2].cost_class"),
    (_set(["workloads", 1, "dtypes"], ["int8"]), "unsupported_dtype", "$.workloads[1].dtypes[0]"),
    (_dup_workload, "duplicate_workload_id", "$.workloads[2].id"),
    (_same_target_as_abs, "duplicate_target", "$.workloads[2].target"),
    (_set(["protocol", "shape_file"], None), "shape_key_without_file", "$.workloads[0].shape_key"),
    (_set(["workloads", 0, "correctness"], {"file": "tests/test_softmax.py", "select": "not out",
                                            "node_ids": ["tests/test_softmax.py::test_accuracy_softmax"],
                                            "reason": "the out= variant is another operator"}),
     "narrowing_conflict", "$.workloads[0].correctness"),
    (_set(["workloads", 0, "correctness", "select"], "not out"), "narrowing_without_reason",
     "$.workloads[0].correctness.reason"),
    (_set(["protocol", "correctness_args"], ["-k", "not out"]), "narrowing_without_reason",
     "$.protocol.correctness_args[0]"),
    (_set(["workloads", 0, "correctness"], {"file": "tests/test_softmax.py", "reason": "x",
                                            "node_ids": ["tests/test_abs.py::test_accuracy_abs"]}),
     "node_id_outside_file", "$.workloads[0].correctness.node_ids[0]"),
]


@pytest.mark.parametrize("edit,code,path", MANIFEST_CASES, ids=[c[1] + ":" + c[2] for c in MANIFEST_CASES])
def test_each_manifest_error_is_named_at_its_json_path(world, edit, code, path):
    doc = _manifest(world)
    edit(doc)
    problems = validate(doc)
    assert (code, path) in [(p.code, p.path) for p in problems], problems


def test_bad_variable_words_are_read_by_zl_benchs_own_parsers(world):
    doc = _manifest(world)
    doc["protocol"]["environment"].update(ZL_SEED="-1", ZL_ENABLE_IR="maybe", BENCH_LEVEL="core")
    got = {(p.code, p.path) for p in validate(doc)}
    assert got == {("bad_value", "$.protocol.environment.ZL_SEED"),
                   ("bad_value", "$.protocol.environment.ZL_ENABLE_IR")}


def test_every_problem_is_reported_at_once_and_an_unknown_version_reads_nothing_else(world):
    doc = _manifest(world)
    doc["device"]["visible_device_count"] = 0
    doc["workloads"][0]["cost_class"] = "huge"
    doc["protocol"]["dtypes"]["default"] = ["float8"]
    assert sorted(p.code for p in validate(doc)) == ["bad_value", "unknown_cost_class", "unsupported_dtype"]
    doc["schema_version"] = 2
    assert [p.code for p in validate(doc)] == ["unknown_schema_version"]


def test_a_repeated_key_or_a_non_json_file_is_named_not_a_traceback(world, tmp_path):
    repeated = json.dumps(_manifest(world)).replace('"launch_floor": 1,', '"launch_floor": 1, "launch_floor": 0,')
    path = tmp_path / "m.json"
    for body, says in ((repeated.encode(), "'launch_floor' appears twice"), (b"{not json", "not UTF-8 JSON"),
                       (b"\xff\xfe", "not UTF-8 JSON")):
        path.write_bytes(body)
        with pytest.raises(CampaignError, match=says) as exc:
            fz.read_manifest(path)
        assert _codes(exc) == [("manifest_unreadable", str(path))]


# ------------------------------------------------------------------ against the inventory and the tree

def _inventory_without(world, tmp_path, op):
    entries, source = inv.read_csv(world["inventory"])
    path = tmp_path / "inventory.csv"
    inv.write_csv(path, [e for e in entries if e.op != op], source)
    return path


def test_a_target_the_inventory_lacks_needs_a_reason(world, tmp_path):
    inventory = _inventory_without(world, tmp_path, "relu")
    doc = _manifest(world)
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, doc), dry_run=True, inventory=inventory)
    assert _codes(exc) == [("target_not_in_inventory", "$.workloads[2].target")]
    doc["workloads"][2]["inventory_missing_reason"] = "upstream split the file after the inventory was made"
    matrix, written = _prepare(world, _write(tmp_path, doc), selection="all", dry_run=True, inventory=inventory)
    relu = [t for t in matrix["tasks"] if t["workload"] == "relu"]
    assert written == 0 and len(relu) == 5
    assert relu[0]["benchmark"]["env"]["TEST_NODE"] == f"{world['tree']}/benchmark/test_relu.py::test_relu"


def test_a_reason_for_a_target_the_inventory_has_is_refused(world, tmp_path):
    doc = _manifest(world)
    doc["workloads"][0]["inventory_missing_reason"] = "stale"
    assert _refused(world, tmp_path, doc) == [("reason_not_needed", "$.workloads[0].inventory_missing_reason")]


def test_a_benchmark_the_inventory_marks_skipped_is_refused(world, tmp_path):
    doc = _manifest(world)
    doc["workloads"][2]["target"] = {"test_file": "test_zl_batch.py", "op": "zl_skipped"}
    assert _refused(world, tmp_path, doc) == [("inventory_marks_skip", "$.workloads[2].target")]


def test_targets_missing_from_the_tree_are_named(world, tmp_path):
    doc = _manifest(world)
    doc["workloads"][2]["target"]["op"] = "relu_gone"
    doc["workloads"][2]["inventory_missing_reason"] = "named by hand"
    doc["workloads"][1]["correctness"] = {"file": "tests/test_abs.py", "node_ids": ["tests/test_abs.py::test_nope[x]"],
                                          "reason": "one variant is this workload"}
    doc["workloads"][0]["correctness"]["file"] = "tests/test_softmax_gone.py"
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, doc), dry_run=True)
    assert sorted(_codes(exc)) == [("benchmark_target_missing", "$.workloads[2].target"),
                                   ("correctness_target_missing", "$.workloads[0].correctness.file"),
                                   ("correctness_target_missing", "$.workloads[1].correctness.node_ids[0]")]


def test_the_bundled_fake_tree_has_no_correctness_files_and_is_no_checkout(world, tmp_path):
    """The fake tree has benchmarks only, and sits inside zl_bench's checkout: both named."""
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, _manifest(world)), dry_run=True, tree=FAKE)
    codes = _codes(exc)
    assert ("source_not_a_checkout", "$.source.flaggems_commit") in codes
    assert {("correctness_target_missing", f"$.workloads[{i}].correctness.file") for i in range(3)} <= set(codes)
    assert not any(code == "benchmark_target_missing" for code, _ in codes)


def test_the_tree_must_be_the_pinned_commit_without_edits(world, tmp_path):
    doc = _manifest(world)
    doc["source"]["flaggems_commit"] = "a" * 40
    assert _refused(world, tmp_path, doc) == [("source_commit_mismatch", "$.source.flaggems_commit")]
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, _manifest(world)), dry_run=True, tree=tmp_path / "nowhere")
    assert ("source_tree_missing", "$.source.flaggems_commit") in _codes(exc)
    clone = tmp_path / "clone"
    subprocess.run([*GIT, "clone", "-q", str(world["tree"]), str(clone)], check=True)
    (clone / "untracked_note.txt").write_text("not a target: allowed\n")
    _prepare(world, _write(tmp_path, _manifest(world)), dry_run=True, tree=clone)
    (clone / "src/flag_gems/ops/relu.py").write_text("# edited\n")
    with pytest.raises(CampaignError, match="src/flag_gems/ops/relu.py") as exc:
        _prepare(world, _write(tmp_path, _manifest(world)), dry_run=True, tree=clone)
    assert _codes(exc) == [("source_tree_dirty", "$.source.flaggems_commit")]
    _git(clone, "checkout", "--", "src/flag_gems/ops/relu.py")
    doc = _manifest(world)
    doc["workloads"][0]["correctness"]["file"] = "tests/test_new.py"
    (clone / "tests/test_new.py").write_text("def test_x():\n    pass\n")
    with pytest.raises(CampaignError, match="tests/test_new.py") as exc:
        _prepare(world, _write(tmp_path, doc), dry_run=True, tree=clone)
    assert _codes(exc) == [("source_tree_dirty", "$.source.flaggems_commit")]


def test_inventory_and_shape_file_problems_are_named(world, tmp_path):
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, _manifest(world)), dry_run=True, inventory=tmp_path / "none.csv")
    assert [c for c, _ in _codes(exc)] == ["inventory_unreadable"]
    doc = _manifest(world)
    doc["protocol"]["shape_file"] = str(tmp_path / "none.yaml")
    assert _refused(world, tmp_path, doc) == [("shape_file_invalid", "$.protocol.shape_file")]
    doc = _manifest(world)
    doc["workloads"][1]["shape_key"] = "abs_inplace"
    assert _refused(world, tmp_path, doc) == [("shape_key_missing", "$.workloads[1].shape_key")]


# ------------------------------------------------------------------ the frozen task matrix

def test_canaries_run_first_and_each_baseline_before_its_control_and_candidate(world, tmp_path):
    out = tmp_path / "frozen"
    matrix, _ = _prepare(world, _write(tmp_path, _manifest(world)), out=out, selection="all", canary=None,
                         dry_run=True)
    assert [t["id"] for t in matrix["tasks"]] == [
        "abs/off", "abs/mask0", "abs/on", "abs/on@reverse", "abs/off@reverse",
        "softmax/off", "softmax/mask0", "softmax/on", "softmax/on@reverse", "softmax/off@reverse",
        "relu/off", "relu/mask0", "relu/on", "relu/on@reverse", "relu/off@reverse"]
    assert [t["canary"] for t in matrix["tasks"]] == [True] * 10 + [False] * 5
    assert [t["ordinal"] for t in matrix["tasks"]] == list(range(1, 16))
    off, mask0, on, on_rev, off_rev = matrix["tasks"][:5]
    assert (off["autotune"], off["replay_of"], off["code_must_equal"]) == ("record", None, None)
    assert (mask0["autotune"], mask0["replay_of"], mask0["code_must_equal"]) == ("replay", "abs/off", "abs/off")
    assert (on["autotune"], on["replay_of"], on["code_must_equal"]) == ("replay", "abs/off", None)
    # The reverse order: the candidate first, then the baseline replaying its own record, each
    # only where the candidate acted.
    assert [(t["cell"], t["order"], t["autotune"], t["run_if_responded"], t["correctness"]) for t in (on_rev, off_rev)] \
        == [("on", "reverse", "replay", ["abs/on"], None), ("off", "reverse", "replay", ["abs/on"], None)]
    assert off_rev["benchmark"]["env"]["REPLAY_FROM"] == off["benchmark"]["env"]["OUT_DIR"]
    assert off_rev["benchmark"]["env"]["OUT_DIR"] == str(out.resolve() / "tasks/abs/off@reverse/run")
    assert [t["run_if_responded"] for t in (off, mask0, on)] == [None] * 3
    assert "REPLAY_FROM" not in off["benchmark"]["env"]
    assert mask0["benchmark"]["env"]["REPLAY_FROM"] == on["benchmark"]["env"]["REPLAY_FROM"] \
        == off["benchmark"]["env"]["OUT_DIR"] == str(out.resolve() / "tasks/abs/off/run")
    assert [t["timed"] for t in (off, mask0, on)] == [True, False, True]
    env = on["benchmark"]["env"]
    assert {k: env[k] for k in ("MY_SWITCH", "MY_MASK", "ZL_L2", "ZL_SEED", "ZL_ISOLATE_TUNER_CACHE",
                                "DTYPES", "ZL_BACKEND", "ZL_CAMPAIGN_ID", "SHAPE_FILE", "FLAGGEMS_DIR")} == {
        "MY_SWITCH": "1", "MY_MASK": "13", "ZL_L2": "warm", "ZL_SEED": "7", "ZL_ISOLATE_TUNER_CACHE": "1",
        "DTYPES": "float16", "ZL_BACKEND": "cuda", "ZL_CAMPAIGN_ID": "layout-switch-v1",
        "SHAPE_FILE": str(out.resolve() / SHAPES), "FLAGGEMS_DIR": str(world["tree"].resolve())}
    assert env["TEST_NODE"] == f"{world['tree'].resolve()}/benchmark/test_abs.py::test_abs"
    assert on["benchmark"]["argv"][0] == "bash" and on["benchmark"]["argv"][1].endswith("/run_pytest.sh")
    assert on["benchmark"]["timeout_s"] == 1800 and on["receipt"] == str(out.resolve() / "tasks/abs/on/task-receipt.json")
    assert off["correctness"] is None and mask0["correctness"] is None
    assert on["correctness"]["argv"] == ["{python}", "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
                                         "tests/test_abs.py", "-p", "no:randomly"]
    assert on["correctness"]["cwd"] == str(world["tree"].resolve())
    assert on["correctness"]["env"] == {"MY_SWITCH": "1", "MY_MASK": "13", "ZL_L2": "warm", "ZL_SEED": "7"}
    # The baseline is no correctness cell: its environment runs the tests where the candidate's fail.
    assert on["correctness"]["isolation"] == {"cell": "off", "env": {"MY_SWITCH": "0", "MY_MASK": "13",
                                                                     "ZL_L2": "warm", "ZL_SEED": "7"}}
    assert matrix["receipts"] == {"canary": None, "campaign": str(out.resolve() / "campaign-receipt.json")}


def test_a_narrowed_correctness_run_carries_its_selection_and_reason(world, tmp_path):
    doc = _manifest(world)
    doc["workloads"][1]["correctness"] = {
        "file": "tests/test_abs.py", "node_ids": ["tests/test_abs.py::test_accuracy_abs"],
        "reason": "test_accuracy_abs_out measures the out= overload, another workload"}
    doc["workloads"][0]["correctness"].update(select="not out", reason="the out= overload is another workload")
    matrix, _ = _prepare(world, _write(tmp_path, doc), dry_run=True)
    on = {t["id"]: t["correctness"] for t in matrix["tasks"] if t["cell"] == "on"}
    assert on["abs/on"]["argv"][7:] == ["tests/test_abs.py::test_accuracy_abs", "-p", "no:randomly"]
    assert on["abs/on"]["narrowing"]["reason"].startswith("test_accuracy_abs_out")
    assert on["softmax/on"]["argv"][7:] == ["tests/test_softmax.py", "-k", "not out", "-p", "no:randomly"]


def test_the_budget_is_every_step_at_its_cost_class_timeout(world, tmp_path):
    """canary: abs (heavy, 1800 s) and softmax (light, 300 s), 3 cells and 2 reverse-order tasks
    each, correctness in one cell plus the baseline's where it fails; all adds relu (light)."""
    path = _write(tmp_path, _manifest(world))
    canary, _ = _prepare(world, path, dry_run=True)
    b = canary["budget"]
    assert (b["tasks"], b["workloads"]) == (10, 2)
    assert b["by_cost_class"] == {
        "heavy": {"timeout_s": 1800, "tasks": 5, "benchmark_s": 5 * 1800, "correctness_runs": 2, "correctness_s": 3600},
        "light": {"timeout_s": 300, "tasks": 5, "benchmark_s": 5 * 300, "correctness_runs": 2, "correctness_s": 600}}
    assert (b["benchmark_s"], b["correctness_s"]) == (5 * 1800 + 5 * 300, 3600 + 600)
    assert b["worst_case_s"] == b["canary_worst_case_s"] == 14700 and b["worst_case_hours"] == 4.08
    full, _ = _prepare(world, path, selection="all", dry_run=True)
    b = full["budget"]
    assert (b["tasks"], b["workloads"], b["worst_case_s"], b["canary_worst_case_s"]) == (15, 3, 14700 + 7 * 300, 14700)
    assert b["worst_case_hours"] == round(16800 / 3600, 2) == 4.67


def test_freeze_writes_read_only_files_bound_to_the_manifest_bytes(world, tmp_path):
    path = _write(tmp_path, _manifest(world))
    out = tmp_path / "frozen"
    matrix, written = _prepare(world, path, out=out)
    assert written == 3
    for name in (MANIFEST, SHAPES, MATRIX):
        assert (out / name).stat().st_mode & 0o777 == 0o444
    assert (out / MANIFEST).read_bytes() == path.read_bytes()
    assert (out / SHAPES).read_bytes() == world["shapes"].read_bytes()
    assert json.loads((out / MATRIX).read_text()) == matrix
    assert matrix["manifest_sha256"] == fz.sha256(path.read_bytes())
    assert matrix["shape_file"]["sha256"] == fz.sha256(world["shapes"].read_bytes())
    assert matrix["resolved"]["flaggems_commit"] == world["commit"]
    assert matrix["receipts"]["canary"] == str(out.resolve() / "canary-receipt.json")
    doc, loaded, raw = load_frozen(out)
    assert loaded == matrix and doc == _manifest(world) and raw == (out / MATRIX).read_bytes()


def test_the_same_inputs_again_write_nothing(world, tmp_path):
    path = _write(tmp_path, _manifest(world))
    out = tmp_path / "frozen"
    _prepare(world, path, out=out)
    frozen = lambda: {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()  # noqa: E731
                      if p.name != ".freeze.lock"}
    before = frozen()
    matrix, written = _prepare(world, path, out=out)
    assert written == 0 and frozen() == before and sorted(before) == [MANIFEST, SHAPES, MATRIX]


def test_a_manifest_edited_by_one_byte_never_reuses_the_frozen_matrix(world, tmp_path):
    path = _write(tmp_path, _manifest(world))
    out = tmp_path / "frozen"
    _prepare(world, path, out=out)
    frozen = {p.name: p.read_bytes() for p in out.iterdir()}
    path.write_bytes(path.read_bytes() + b" ")          # one byte, same JSON
    with pytest.raises(CampaignError) as exc:
        _prepare(world, path, out=out)
    assert _codes(exc) == [("frozen_dir_differs", str(out / MANIFEST)), ("frozen_dir_differs", str(out / MATRIX))]
    with pytest.raises(CampaignError):
        _prepare(world, path, out=out, dry_run=True)      # a dry run with --out says so too
    assert {p.name: p.read_bytes() for p in out.iterdir()} == frozen
    matrix, written = _prepare(world, path, out=tmp_path / "frozen2")
    assert written == 3 and matrix["manifest_sha256"] == fz.sha256(path.read_bytes())
    # The frozen copy itself edited by one byte: the binding is broken.
    frozen_manifest = out / MANIFEST
    frozen_manifest.chmod(0o644)
    data = frozen_manifest.read_bytes()
    frozen_manifest.write_bytes(data[:-2] + (b"\n" if data[-2:-1] != b"\n" else b" ") + data[-1:])
    with pytest.raises(CampaignError) as exc:
        load_frozen(out)
    assert _codes(exc) == [("frozen_binding_broken", str(out / MANIFEST))]
    frozen_manifest.write_bytes(data)
    (out / SHAPES).chmod(0o644)
    (out / SHAPES).write_text(SHAPES_YAML.replace("64", "65"))
    with pytest.raises(CampaignError) as exc:
        load_frozen(out)
    assert _codes(exc) == [("frozen_binding_broken", str(out / SHAPES))]
    (out / SHAPES).write_text(SHAPES_YAML)
    # A matrix edited into another shape: named, never a KeyError (whose exit 1 reads as a gate)
    (out / MATRIX).chmod(0o644)
    good = json.loads((out / MATRIX).read_text())
    for edit in (lambda m: m.pop("resolved"), lambda m: m.update(cells=[]), lambda m: m.update(tasks="x"),
                 lambda m: m["tasks"][0].pop("benchmark")):
        m = json.loads(json.dumps(good))
        edit(m)
        (out / MATRIX).write_text(json.dumps(m))
        with pytest.raises(CampaignError) as exc:
            load_frozen(out)
        assert _codes(exc) == [("frozen_binding_broken", str(out / MATRIX))]


def test_a_busy_or_unwritable_out_is_refused(world, tmp_path):
    path = _write(tmp_path, _manifest(world))
    out = tmp_path / "frozen"
    out.mkdir()
    with locks.acquire(out / ".freeze.lock"):
        with pytest.raises(CampaignError) as exc:
            _prepare(world, path, out=out)
        assert [c for c, _ in _codes(exc)] == ["frozen_dir_busy"] and str(os.getpid()) in str(exc.value)
    assert sorted(p.name for p in out.iterdir()) == [".freeze.lock"]
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(CampaignError) as exc:
        _prepare(world, path, out=blocker)
    assert _codes(exc) == [("frozen_dir_unwritable", str(blocker))]


# ------------------------------------------------------------------ the canary receipt

def _canary(world, tmp_path, doc, status="passed", drop=0, name="canary"):
    path = _write(tmp_path, doc, f"{name}.json")
    out = tmp_path / name
    matrix, _ = _prepare(world, path, out=out)
    tasks = {t["id"]: "PASS" for t in matrix["tasks"][drop:]}
    receipt = out / "canary-receipt.json"
    receipt.write_text(json.dumps(canary_receipt(out, status, tasks)))
    return receipt


def test_selection_all_needs_a_passing_canary_of_the_same_manifest(world, tmp_path):
    doc = _manifest(world)
    path = _write(tmp_path, doc)
    with pytest.raises(CampaignError) as exc:
        _prepare(world, path, out=tmp_path / "all", selection="all")
    assert _codes(exc) == [("canary_receipt_required", "--canary-receipt")]
    assert not (tmp_path / "all").exists()

    receipt = _canary(world, tmp_path, doc)
    matrix, written = _prepare(world, path, out=tmp_path / "all", selection="all", canary=receipt)
    assert written == 3 and len(matrix["tasks"]) == 15
    assert matrix["canary_receipt"] == {"path": str(receipt.resolve()), "sha256": fz.sha256(receipt.read_bytes())}
    assert matrix["receipts"]["canary"] is None

    other = copy_with(doc, permitted_claim=doc["permitted_claim"] + ", nothing more")
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, other, "other.json"), out=tmp_path / "all2", selection="all",
                 canary=receipt)
    assert _codes(exc) == [("canary_receipt_other_manifest", f"{receipt}:$.manifest_sha256")]
    foreign = _canary(world, tmp_path, other, name="other_canary")
    with pytest.raises(CampaignError) as exc:
        _prepare(world, path, out=tmp_path / "all3", selection="all", canary=foreign)
    assert _codes(exc) == [("canary_receipt_other_manifest", f"{foreign}:$.manifest_sha256")]


def copy_with(doc, **changes):
    return {**json.loads(json.dumps(doc)), **changes}


@pytest.mark.parametrize("case,code,field", [
    ("failed", "canary_receipt_not_passed", "status"),
    ("incomplete", "canary_receipt_incomplete", "tasks"),
    ("matrix_edited", "canary_receipt_matrix_mismatch", "task_matrix_sha256"),
    ("not_a_receipt", "canary_receipt_invalid", "kind"),
])
def test_a_canary_receipt_that_does_not_pass_is_refused(world, tmp_path, case, code, field):
    doc = _manifest(world)
    receipt = _canary(world, tmp_path, doc, status="failed" if case == "failed" else "passed",
                      drop=2 if case == "incomplete" else 0)
    if case == "matrix_edited":
        matrix = receipt.parent / MATRIX
        matrix.chmod(0o644)
        matrix.write_bytes(matrix.read_bytes() + b"\n")
    if case == "not_a_receipt":
        receipt.write_text(json.dumps({**json.loads(receipt.read_text()), "kind": "something_else"}))
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, doc), out=tmp_path / "all", selection="all", canary=receipt)
    assert _codes(exc) == [(code, f"{receipt}:$.{field}")]
    if case == "incomplete":
        assert "abs/off, abs/mask0" in str(exc.value)
    assert not (tmp_path / "all").exists()


def test_a_receipt_is_only_built_for_a_canary_matrix_and_its_tasks(world, tmp_path):
    out = tmp_path / "frozen"
    _prepare(world, _write(tmp_path, _manifest(world)), out=out)
    with pytest.raises(ValueError, match="unknown tasks"):
        canary_receipt(out, "passed", {"relu/on": "PASS"})
    with pytest.raises(ValueError, match="status"):
        canary_receipt(out, "maybe", {})


# ------------------------------------------------------------------ the command

def test_the_command_prints_the_plan_and_names_each_problem(world, tmp_path, capsys, monkeypatch):
    path = _write(tmp_path, _manifest(world))
    common = [str(path), "--flaggems-dir", str(world["tree"]), "--inventory", str(world["inventory"])]
    assert fz.main(common + ["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "10 tasks" in out and "= 14700 s (4.08 h)" in out and "heavy: 5 tasks x 1800 s + 2 correctness x 1800 s = 12600 s" in out
    assert "abs/on@reverse" in out and "only if abs/on responded" in out
    assert out.index("abs/off") < out.index("abs/mask0") < out.index("softmax/off")
    assert fz.main(common + ["--dry-run", "--selection", "all"]) == 0
    assert "needs --canary-receipt" in capsys.readouterr().out
    assert fz.main(common + ["--out", str(tmp_path / "f")]) == 0
    assert "frozen: " in capsys.readouterr().out
    assert fz.main(common + ["--out", str(tmp_path / "f")]) == 0
    assert "already frozen from the same inputs" in capsys.readouterr().out
    doc = _manifest(world)
    del doc["campaign_id"]
    doc["workloads"][0]["correctness"]["select"] = "not out"
    assert fz.main([str(_write(tmp_path, doc))] + common[1:] + ["--dry-run"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["!!! missing_field at $.campaign_id: required (string)",
                   "!!! narrowing_without_reason at $.workloads[0].correctness.reason: a narrowed correctness "
                   "run must say why the rest of the file does not judge this workload"]
    monkeypatch.delenv("FLAGGEMS_DIR", raising=False)
    for argv, says in ((common, "--out DIR is required"), (common + ["--dry-run", "--canary-receipt", "x"],
                                                            "a canary selection needs none"),
                       ([str(path), "--dry-run"], "--flaggems-dir (or FLAGGEMS_DIR) is required")):
        with pytest.raises(SystemExit) as stop:
            fz.main(argv)
        assert stop.value.code == 2 and says in capsys.readouterr().err


def test_every_named_problem_has_a_case_here():
    covered = {code for _, code, _ in MANIFEST_CASES} | {
        "manifest_unreadable", "target_not_in_inventory", "reason_not_needed",
        "inventory_marks_skip", "benchmark_target_missing", "correctness_target_missing",
        "source_not_a_checkout", "source_commit_mismatch", "source_tree_missing", "source_tree_dirty",
        "inventory_unreadable", "shape_file_invalid", "shape_key_missing", "frozen_dir_differs",
        "frozen_binding_broken", "frozen_dir_busy", "frozen_dir_unwritable", "canary_receipt_required",
        "canary_receipt_other_manifest", "canary_receipt_not_passed", "canary_receipt_incomplete",
        "canary_receipt_matrix_mismatch", "canary_receipt_invalid", "canary_receipt_unverified",
        "run_dir_busy", "control_plane_broken", "campaign_not_sealed", "reaccount_inside_sealed"} | set(REFUSALS)
    assert covered == set(CODES)


# ------------------------------------------------------------------ the runner (python -m zl.frozen.run)

STUB = REPO_ROOT / "tests" / "fixtures" / "runlogs" / "stub_run_pytest.sh"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """This zl_bench's code as a committed checkout of its own: the runner refuses a zl_bench
    that is not the manifest's commit or has edits, which the shared working tree cannot
    promise. (path, commit)."""
    root = tmp_path_factory.mktemp("zl") / "zl_bench"
    shutil.copytree(REPO_ROOT / "zl", root / "zl", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ["run_pytest.sh", "plugin_plan.py", *(p.name for p in REPO_ROOT.glob("_*_plugin.py"))]:
        shutil.copy2(REPO_ROOT / name, root / name)
    (root / ".gitignore").write_text("__pycache__/\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "zl_bench")
    return root, _git(root, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def triton_digest():
    import triton
    return package_digest(Path(triton.__file__).parent)


def _runner_manifest(world, checkout, digest, response="code", control="00", canaries=("relu", "abs"), **env):
    """A campaign the stub run script (tests/fixtures/runlogs/stub_run_pytest.py) acts out:
    MY_SWITCH=1 changes its TTGIR and makes it 20 % faster; the control's "00" changes nothing."""
    doc = _manifest(world)
    doc["source"].update(triton="triton", zl_bench_commit=checkout[1], triton_package_sha256=digest)
    doc["protocol"].update(
        cells=[{"name": "off", "role": "baseline", "env": {"MY_SWITCH": "0"}},
               {"name": "ctl", "role": "control", "env": {"MY_SWITCH": control}},
               {"name": "on", "role": "candidate", "env": {"MY_SWITCH": "1"}}],
        timing_cells=["off", "on"], correctness_cells=["on"], canary_order=list(canaries),
        dtypes={"default": ["float32"], "supported": ["float32"]}, timeouts_s={"light": 120, "heavy": 120},
        classification={"gain_pct": 5.0, "loss_pct": -3.0, "response": response}, correctness_args=[],
        environment={"ZL_STUB_SWITCH": "MY_SWITCH", "ZL_STUB_EFFECT": "0.2", "ZL_STUB_NOISE": "0.001", **env})
    doc["production_default"]["environment"] = {"MY_SWITCH": "0"}
    for w in doc["workloads"]:
        w["canary"] = w["id"] in canaries
    return doc


def _freeze_for(world, checkout, doc, out, selection="canary"):
    """Freeze `doc` into `out` as the copied checkout would (its run_pytest.sh in every argv)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fz, "REPO_ROOT", checkout[0])
        path = _write(out.parent, doc, f"{out.name}.json")
        matrix, _ = fz.prepare(path, str(world["tree"]), world["inventory"], selection, out)
    return matrix


def _runner(world, checkout, frozen, *extra, stub=True, skip=True, popen=False, timeout=300):
    home = frozen.parent / "home"
    home.mkdir(exist_ok=True)
    env = base_env(home, PYTHONPATH=f"{checkout[0]}{os.pathsep}{world['tree'] / 'src'}")
    argv = [sys.executable, "-m", "zl.frozen.run", str(frozen), "--device", "0",
            *(["--skip-device-checks", "CPU test"] if skip else []),
            *(["--benchmark-script", str(STUB)] if stub else []), *extra]
    # From outside both checkouts: `python -m` puts the working directory first on sys.path.
    if popen:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=str(frozen.parent))
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=str(frozen.parent))


def _receipt(frozen, task):
    return json.loads((frozen / "tasks" / task / "task-receipt.json").read_text())


def _files(root):
    """{relative path: (bytes digest, mtime_ns)} of every file under root."""
    return {str(p.relative_to(root)): (fz.sha256(p.read_bytes()), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file() and ".lock" not in p.name}


@pytest.fixture(scope="module")
def sealed(world, checkout, triton_digest, tmp_path_factory):
    """A stub canary run to the end: (frozen dir, the runner's CompletedProcess)."""
    out = tmp_path_factory.mktemp("sealed") / "frozen"
    _freeze_for(world, checkout, _runner_manifest(world, checkout, triton_digest), out)
    return out, _runner(world, checkout, out)


def test_a_canary_runs_every_task_and_seals_receipts_per_task_workload_and_campaign(sealed, world, checkout, tmp_path):
    frozen, r = sealed
    assert r.returncode == 0, r.stdout + r.stderr
    order = ["relu/off", "relu/ctl", "relu/on", "relu/on@reverse", "relu/off@reverse",
             "abs/off", "abs/ctl", "abs/on", "abs/on@reverse", "abs/off@reverse"]
    recs = {t: _receipt(frozen, t) for t in order}
    assert [recs[t]["status"] for t in order] == ["PASS"] * 10
    # Serial, one fresh process per task, in matrix order.
    assert [line.split()[1:3] for line in r.stdout.splitlines() if line.startswith("[frozen] ") and "/10 " in line] \
        == [[f"{i}/10", f"{t}:"] for i, t in enumerate(order, 1)]
    on = recs["relu/on"]
    env = on["benchmark"]["env"]
    assert (env["MY_SWITCH"], env["CUDA_VISIBLE_DEVICES"], env["ZL_DEVICE"], env["ZL_CAMPAIGN_ID"]) == \
        ("1", "0", "0", "layout-switch-v1")
    assert env["REPLAY_FROM"] == recs["relu/off"]["run"] and env["OUT_DIR"] == on["run"]
    assert on["benchmark"]["argv"] == ["bash", str(STUB)] and on["benchmark"]["rc"] == 0
    assert on["identity"]["autotune_mode"] == "replay" and recs["relu/off"]["identity"]["autotune_mode"] == "record"
    assert on["identity"]["replay_source_run_id"] == recs["relu/off"]["identity"]["run_id"]
    assert set(on["fingerprints"]) == {"ttgir", "llir", "ptx", "binary"} and len(on["rows"]) == 6
    assert on["code"]["verdict"] == "IR_CHANGED@ttgir" and on["code"]["identical_everywhere"] is False
    assert recs["relu/ctl"]["control"] == {"reproduces_baseline": True, "why": recs["relu/ctl"]["code"]["why"]}
    assert recs["relu/ctl"]["code"]["compared"] == ["ttgir", "llir", "ptx", "binary"]
    corr = on["correctness"]
    assert corr["status"] == "PASS" and corr["counts"] == {"passed": 2} and "isolation" not in corr
    assert corr["argv"][1:] == ["-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "tests/test_relu.py"]
    assert corr["cwd"] == str(world["tree"].resolve()) and corr["env"]["MY_SWITCH"] == "1"
    assert corr["env"]["TRITON_CACHE_DIR"] != env.get("TRITON_CACHE_DIR") and corr["env"]["GEMS_VENDOR"] == "nvidia"
    assert on["unverified"] == ["device checks skipped: CPU test", f"benchmark replaced by {STUB} (--benchmark-script)"]
    # The switch acted (its code changed), so both orders were timed and the gain held in both.
    workload = json.loads((frozen / "tasks/relu/workload-receipt.json").read_text())
    k = workload["classes"]["on"]
    assert k["class"] == "G" and k["reason"].startswith("code IR_CHANGED@ttgir against the baseline; +2")
    assert 24 < k["evidence"]["speedup_pct"]["forward"] < 26 and 24 < k["evidence"]["speedup_pct"]["reverse"] < 26
    assert k["evidence"]["intervals_overlap"] is False and workload["prior_evidence"] == {"gain_pct": 4.5}
    assert workload["tasks"]["relu/on@reverse"] == {"status": "PASS", "receipt": "tasks/relu/on@reverse/task-receipt.json"}
    camp = json.loads((frozen / "campaign-receipt.json").read_text())
    assert camp["status"] == "complete" and camp["counts"] == {"G": 2, "C": 0, "B": 0, "R": 0, "K": 0, "X": 0}
    assert [(w["workload"], w["class"], w["receipt"]) for w in camp["workloads"]] == [
        ("relu", "G", "tasks/relu/workload-receipt.json"), ("abs", "G", "tasks/abs/workload-receipt.json")]
    assert camp["observed"]["zl_bench"] == {"path": str(checkout[0]), "commit": checkout[1]}
    assert camp["observed"]["triton"]["identified_by"] == "package_sha256"
    assert camp["observed"]["flaggems"]["commit"] == world["commit"]
    assert camp["observed"]["devices"] == {"skipped": "CPU test"} and camp["unverified"] == on["unverified"]
    assert camp["observed"]["probe"]["flag_gems_file"].startswith(str(world["tree"].resolve()))
    summary = (frozen / "campaign-summary.md").read_text()
    assert "| relu | on | G |" in summary and "(tasks/abs/workload-receipt.json)" in summary and "unverified:" in summary
    receipt = json.loads((frozen / "canary-receipt.json").read_text())
    assert receipt["status"] == "passed" and set(receipt["tasks"]) == set(order) and receipt["unverified"]
    # ... but a canary that skipped a check never authorises the full campaign.
    doc = json.loads((frozen / "manifest.json").read_text())
    with pytest.raises(CampaignError) as exc:
        fz.prepare(frozen / "manifest.json", str(world["tree"]), world["inventory"], "all", tmp_path / "all",
                   frozen / "canary-receipt.json")
    assert _codes(exc) == [("canary_receipt_unverified", f"{frozen / 'canary-receipt.json'}:$.unverified")]
    assert doc["campaign_id"] == receipt["campaign_id"]


def test_a_control_that_does_not_reproduce_the_baseline_stops_the_campaign(world, checkout, triton_digest, tmp_path):
    """The control sets what the candidate sets: its code differs from the baseline's, so the
    campaign's control plane is broken; it stops at once, and stays stopped on a rerun."""
    frozen = tmp_path / "frozen"
    _freeze_for(world, checkout, _runner_manifest(world, checkout, triton_digest, control="1"), frozen)
    r = _runner(world, checkout, frozen)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "!!! control_plane_broken at relu/ctl: relu/ctl did not reproduce the baseline's code: the code differs " \
           "(IR_CHANGED@ttgir)" in r.stdout
    assert sorted(p.parent.name for p in frozen.glob("tasks/*/*/task-receipt.json")) == ["ctl", "off"]
    camp = json.loads((frozen / "campaign-receipt.json").read_text())
    assert camp["status"] == "control_plane_broken" and "IR_CHANGED@ttgir" in camp["stopped_by"]
    assert json.loads((frozen / "canary-receipt.json").read_text())["status"] == "failed"
    before = _files(frozen / "tasks")
    again = _runner(world, checkout, frozen)
    assert again.returncode == 4 and "control_plane_broken at relu/ctl" in again.stdout
    assert _files(frozen / "tasks") == before


def test_the_real_run_pytest_runs_each_task_and_no_ir_is_no_control(world, checkout, triton_digest, tmp_path):
    """run_pytest.sh itself on the fake tree (Triton's interpreter compiles nothing, so no IR is
    dumped): the baseline records and the control replays it for real, and a control whose code
    cannot be shown identical at every level stops the campaign like one whose code differs."""
    frozen = tmp_path / "frozen"
    doc = _runner_manifest(world, checkout, triton_digest, canaries=("relu",))
    doc["protocol"]["environment"] = {}
    _freeze_for(world, checkout, doc, frozen)
    r = _runner(world, checkout, frozen, stub=False)
    assert r.returncode == 4, r.stdout + r.stderr
    off, ctl = _receipt(frozen, "relu/off"), _receipt(frozen, "relu/ctl")
    assert off["status"] == ctl["status"] == "PASS" and off["benchmark"]["argv"][1] == str(checkout[0] / "run_pytest.sh")
    assert (off["identity"]["autotune_mode"], ctl["identity"]["autotune_mode"]) == ("record", "replay")
    assert ctl["identity"]["replay_source_dir"] == off["run"] and off["rows"]
    assert ctl["control"] == {"reproduces_baseline": False, "why": "no IR recorded on one side or both"}


def test_a_candidate_only_test_failure_is_k_and_one_the_baseline_shares_is_x(world, checkout, triton_digest, tmp_path):
    frozen = tmp_path / "frozen"
    doc = _runner_manifest(world, checkout, triton_digest)
    doc["workloads"][2]["correctness"] = {"file": "tests/test_guard.py", "node_ids": ["tests/test_guard.py::test_switch_guard"],
                                          "reason": "the guard test is this workload's operator"}
    doc["workloads"][1]["correctness"] = {"file": "tests/test_guard.py", "node_ids": ["tests/test_guard.py::test_always_broken"],
                                          "reason": "the broken test is this workload's operator"}
    _freeze_for(world, checkout, doc, frozen)
    r = _runner(world, checkout, frozen)
    assert r.returncode == 1, r.stdout + r.stderr     # a canary whose gate failed
    relu, absw = (json.loads((frozen / f"tasks/{w}/workload-receipt.json").read_text())["classes"]["on"]
                  for w in ("relu", "abs"))
    assert relu["class"] == "K" and "fail under the candidate and pass under the baseline" in relu["reason"]
    assert absw["class"] == "X" and "a defect the switch did not introduce" in absw["reason"]
    corr = _receipt(frozen, "relu/on")["correctness"]
    assert (corr["status"], corr["counts"], corr["isolation"]["status"]) == ("FAIL", {"failed": 1}, "PASS")
    assert corr["isolation"]["env"]["MY_SWITCH"] == "0" and corr["narrowing"]["node_ids"] == ["tests/test_guard.py::test_switch_guard"]
    receipt = json.loads((frozen / "canary-receipt.json").read_text())
    assert receipt["status"] == "failed" and receipt["gate"] == ["relu/on: K", "abs/on: X"]


def test_a_killed_runner_resumes_without_redoing_sealed_tasks(world, checkout, triton_digest, tmp_path):
    frozen = tmp_path / "frozen"
    _freeze_for(world, checkout, _runner_manifest(world, checkout, triton_digest, ZL_STUB_SLEEP="1.5"), frozen)
    stopped = _runner(world, checkout, frozen, "--budget-s", "0")
    assert stopped.returncode == 3 and "10 task(s) left; rerun to resume" in stopped.stdout
    assert not list(frozen.glob("tasks/*/*/task-receipt.json"))
    assert json.loads((frozen / "campaign-receipt.json").read_text())["status"] == "stopped_at_budget"
    proc = _runner(world, checkout, frozen, popen=True)
    sealed_first = frozen / "tasks/relu/on/task-receipt.json"
    deadline = time.monotonic() + 120
    while not sealed_first.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    while not (frozen / "tasks/relu/on@reverse/benchmark.log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()                      # SIGKILL: no handler runs
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 30   # the task's processes die with the runner (zl.supervise)
    while procs_with_env(str(frozen)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert procs_with_env(str(frozen)) == []
    assert json.loads((frozen / "campaign-receipt.json").read_text())["status"] == "running"
    sealed = {p.parent.name for p in frozen.glob("tasks/relu/*/task-receipt.json")}
    assert sealed == {"off", "ctl", "on"}
    before = _files(frozen / "tasks" / "relu")
    r = _runner(world, checkout, frozen)
    assert r.returncode == 0, r.stdout + r.stderr
    after = _files(frozen / "tasks" / "relu")
    for cell in sealed:              # sealed tasks untouched: receipts, logs, run directories
        for name, stamp in before.items():
            if name.startswith(f"{cell}/"):
                assert after[name] == stamp, name
    assert after["on@reverse/task-receipt.json"] and _receipt(frozen, "relu/on@reverse")["status"] == "PASS"
    assert "[frozen] 4/10 relu/on@reverse: PASS" in r.stdout and "1/10" not in r.stdout
    assert "[frozen] resuming: 3 of 10 task(s) sealed, not run again" in r.stdout
    assert "resuming" not in stopped.stdout
    assert json.loads((frozen / "campaign-receipt.json").read_text())["counts"]["G"] == 2


# ------------------------------------------------------------------ refusals before a task

def _args(**kw):
    return argparse.Namespace(**{"device": "0", "python": sys.executable, "budget_s": None,
                                 "skip_device_checks": None, "benchmark_script": None, **kw})


def _smi(tmp_path, monkeypatch, body):
    """A stand-in nvidia-smi first on PATH: `body` is its shell script."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho \"$@\" >> {bin_dir}/calls\n{body}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir / "calls"


@pytest.fixture
def tiny_triton(tmp_path):
    """An installed-looking triton package of one file (its digest costs nothing)."""
    pkg = tmp_path / "site" / "triton"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "9.9"\n')
    return pkg


def _probe(world, triton_dir, **kw):
    return {"triton_file": str(triton_dir / "__init__.py"), "triton_version": "9.9", "triton_vcs_commit": "",
            "flag_gems_file": str(world["tree"].resolve() / "src/flag_gems/__init__.py"), "torch_version": "0",
            "device_count": 1, "device_name": "NVIDIA H200", "device_arch": "9.0", **kw}


def _clone(src, dst):
    subprocess.run([*GIT, "clone", "-q", str(src), str(dst)], check=True)
    return dst


def _break_binding(frozen):
    (frozen / MANIFEST).chmod(0o644)
    (frozen / MANIFEST).write_bytes((frozen / MANIFEST).read_bytes() + b" ")


def _sealed_elsewhere(c, uuid="GPU-aaaa"):
    """A sealed task, and the campaign receipt naming the device that ran it."""
    sha = fz.sha256((c["frozen"] / MATRIX).read_bytes())
    (c["frozen"] / "tasks/relu/off").mkdir(parents=True)
    (c["frozen"] / "tasks/relu/off/task-receipt.json").write_text(json.dumps({"task_matrix_sha256": sha, "status": "PASS"}))
    (c["frozen"] / "campaign-receipt.json").write_text(json.dumps({"observed": {"probe": {"device_uuid": uuid}}}))
    c["probe"]["device_uuid"] = "GPU-bbbb"


def _sealed_under_other_variables(c):
    """A task sealed on this device by a call that inherited another compiler knob."""
    _sealed_elsewhere(c, uuid="GPU-bbbb")
    receipt = json.loads((c["frozen"] / "campaign-receipt.json").read_text())
    receipt["inherited"] = {"dropped": [], "recorded": {"TRITON_DEBUG": "1"}}
    (c["frozen"] / "campaign-receipt.json").write_text(json.dumps(receipt))


REFUSALS = {
    "device_changed": _sealed_elsewhere,
    "environment_changed": _sealed_under_other_variables,
    "frozen_binding_broken": lambda c: _break_binding(c["frozen"]),
    "matrix_paths_moved": lambda c: c["mp"].setattr(fr, "REPO_ROOT", REPO_ROOT),
    "receipt_unbound": lambda c: (c["frozen"] / "tasks/relu/off").mkdir(parents=True) or
    (c["frozen"] / "tasks/relu/off/task-receipt.json").write_text('{"task_matrix_sha256": "another matrix"}'),
    "source_unverifiable": lambda c: c["mp"].setattr(fr, "REPO_ROOT", c["plain"]),
    "zl_bench_source_mismatch": lambda c: c["mp"].setattr(fr, "REPO_ROOT", c["edited"]),
    "flaggems_source_mismatch": lambda c: (c["tree"] / "src/flag_gems/ops/relu.py").write_text("# edited\n"),
    "triton_source_mismatch": lambda c: (c["triton"] / "__init__.py").write_text('__version__ = "9.10"\n'),
    "import_failed": lambda c: c["probe"].clear(),
    "import_path_mismatch": lambda c: c["probe"].update(flag_gems_file=str(FAKE / "src/flag_gems/__init__.py")),
    "devices_visible_mismatch": lambda c: c["probe"].update(device_count=2),
    "device_model_mismatch": lambda c: c["probe"].update(device_name="NVIDIA A100-SXM4-80GB"),
    "device_busy": lambda c: _smi(c["tmp"], c["mp"], "echo '4242, python3, 1024 MiB'"),
    "device_check_unavailable": lambda c: _smi(c["tmp"], c["mp"], "exit 9"),
}


@pytest.mark.parametrize("code", sorted(REFUSALS))
def test_each_refusal_before_a_task_is_named_and_runs_nothing(world, checkout, tiny_triton, tmp_path, monkeypatch, code):
    tree = _clone(world["tree"], tmp_path / "FlagGems")
    frozen = tmp_path / "frozen"
    doc = _runner_manifest(world, checkout, package_digest(tiny_triton))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fz, "REPO_ROOT", checkout[0])
        fz.prepare(_write(tmp_path, doc), str(tree), world["inventory"], "canary", frozen)
    monkeypatch.setattr(fr, "REPO_ROOT", checkout[0])
    _smi(tmp_path, monkeypatch, "exit 0")          # an idle device
    probe = _probe(world, tiny_triton)
    probe["flag_gems_file"] = str(tree.resolve() / "src/flag_gems/__init__.py")

    def fake_probe(*_args):
        if not probe:
            raise preflight.PreflightFailed("interpreter", "python3 cannot import flag_gems")
        return dict(probe)
    monkeypatch.setattr(preflight, "probe_interpreter", fake_probe)
    plain = tmp_path / "plain"
    shutil.copytree(checkout[0], plain, ignore=shutil.ignore_patterns(".git"))
    edited = _clone(checkout[0], tmp_path / "edited")
    (edited / "zl" / "frozen" / "run.py").write_text("# another runner\n")
    _git(edited, "commit", "-qam", "another runner")
    REFUSALS[code]({"frozen": frozen, "mp": monkeypatch, "plain": plain, "edited": edited, "tree": tree,
                    "triton": tiny_triton, "probe": probe, "tmp": tmp_path})
    with pytest.raises(CampaignError) as exc:
        fr.Campaign(frozen, _args()).preflight()
    assert code in [p.code for p in exc.value.problems], exc.value
    assert not list(frozen.glob("tasks/*/*/benchmark.log"))
    if code == "environment_changed":
        assert "TRITON_DEBUG: sealed tasks '1', this call '<unset>'" in str(exc.value)
    if code in ("device_changed", "environment_changed"):   # the same device and variables resume
        campaign = fr.Campaign(frozen, _args())
        (frozen / "campaign-receipt.json").write_text(json.dumps(
            {"observed": {"probe": {"device_uuid": "GPU-bbbb"}}, "inherited": campaign.inherited}))
        campaign.preflight()
        assert list(campaign.receipts) == ["relu/off"]


def test_device_checks_are_skipped_only_by_the_recorded_option(world, checkout, tiny_triton, tmp_path, monkeypatch):
    frozen = tmp_path / "frozen"
    _freeze_for(world, checkout, _runner_manifest(world, checkout, package_digest(tiny_triton)), frozen)
    monkeypatch.setattr(fr, "REPO_ROOT", checkout[0])
    calls = _smi(tmp_path, monkeypatch, "echo '4242, python3, 1024 MiB'")
    monkeypatch.setattr(preflight, "probe_interpreter", lambda *_a: _probe(world, tiny_triton, device_count=0))
    with pytest.raises(CampaignError) as exc:
        fr.Campaign(frozen, _args()).preflight()
    assert {p.code for p in exc.value.problems} == {"devices_visible_mismatch", "device_busy"}
    assert calls.read_text().split() == ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader",
                                         "-i", "0"]
    campaign = fr.Campaign(frozen, _args(skip_device_checks="CPU test"))
    seen = campaign.preflight()
    assert seen["devices"] == {"skipped": "CPU test"} and campaign.unverified == ["device checks skipped: CPU test"]


def test_the_device_is_checked_idle_before_every_task(world, checkout, triton_digest, tmp_path, monkeypatch):
    """Busy before the third task: the runner stops there (exit 2 from the command), the two
    sealed tasks stay, the third never ran."""
    frozen = tmp_path / "frozen"
    _freeze_for(world, checkout, _runner_manifest(world, checkout, triton_digest), frozen)
    campaign = fr.Campaign(frozen, _args(benchmark_script=str(STUB)))
    monkeypatch.setattr(campaign, "preflight", lambda: {})
    calls = []

    def busy(*_args):
        calls.append(1)
        return [Problem("device_busy", "--device", "device 0 runs 1 other process(es)")] if len(calls) == 3 else []
    monkeypatch.setattr(campaign, "busy", busy)
    with pytest.raises(CampaignError, match="device_busy"):
        campaign.run()
    assert sorted(p.parent.name for p in frozen.glob("tasks/relu/*/task-receipt.json")) == ["ctl", "off"]
    assert not (frozen / "tasks/relu/on").exists()


def test_the_command_names_each_refusal_with_exit_2(world, checkout, tmp_path, capsys, sealed):
    """On this machine (no CUDA device, no nvidia-smi) a run without --skip-device-checks is
    refused; a frozen directory another runner holds, a broken binding and bad options too."""
    frozen = tmp_path / "frozen"
    _freeze_for(world, checkout, json.loads((sealed[0] / MANIFEST).read_text()), frozen)
    r = _runner(world, checkout, frozen, skip=False)
    assert r.returncode == 2 and "!!! devices_visible_mismatch at $.device.visible_device_count: 0 device(s) visible " \
                                  "through CUDA_VISIBLE_DEVICES=0, the manifest declares 1" in r.stderr, r.stderr
    assert not (frozen / "tasks").exists() and "Traceback" not in r.stderr
    with locks.acquire(frozen / ".run.lock"):
        assert fr.main([str(frozen), "--device", "0"]) == 2
    assert f"!!! run_dir_busy at {frozen}" in capsys.readouterr().err
    _break_binding(frozen)
    assert fr.main([str(frozen), "--device", "0"]) == 2
    assert "!!! frozen_binding_broken at" in capsys.readouterr().err
    for argv, says in (([str(frozen)], "--device is required"), ([str(frozen), "--device", "0", "--gain-pct", "3"],
                                                                   "change the rule of --reaccount only"),
                       ([str(frozen), "--reaccount", str(tmp_path / "r"), "--loss-pct", "2"], "--loss-pct: out of range"),
                       ([str(frozen), "--reaccount", str(tmp_path / "r"), "--gain-pct", "0"], "--gain-pct: out of range")):
        with pytest.raises(SystemExit) as stop:
            fr.main(argv)
        assert stop.value.code == 2 and says in capsys.readouterr().err


def test_source_identities(world, checkout, tiny_triton, tmp_path):
    """zl_bench: the pinned commit, or a later one that changed only campaigns/; FlagGems: the
    pinned commit; both without tracked edits. Triton: by its files, its tracked checkout, or
    pip's record of the commit it was installed from; else unverifiable, naming its digest."""
    root, pinned = checkout
    assert zl_bench_source(root, pinned) == ({"path": str(root), "commit": pinned}, [])
    later = _clone(root, tmp_path / "later")
    (later / "campaigns").mkdir()
    (later / "campaigns" / "new.json").write_text("{}\n")
    _git(later, "add", "-A")
    _git(later, "commit", "-qm", "a manifest")
    seen, problems = zl_bench_source(later, pinned)
    assert problems == [] and seen["changed_since_pinned"] == ["campaigns/new.json"]
    (later / "zl" / "locks.py").write_text("# edited\n")
    assert [p.message.split(": ")[0] for p in zl_bench_source(later, pinned)[1]] == [f"{later} has uncommitted edits"]
    _git(later, "commit", "-qam", "code")
    problems = zl_bench_source(later, pinned)[1]
    assert [p.code for p in problems] == ["zl_bench_source_mismatch"] and "changed zl/locks.py" in problems[0].message
    assert "nor a later commit" in zl_bench_source(root, "a" * 40)[1][0].message
    tree = str(world["tree"])
    assert flaggems_source(tree, world["commit"])[1] == []
    assert [p.code for p in flaggems_source(tree, "b" * 40)[1]] == ["flaggems_source_mismatch"]
    assert [p.code for p in flaggems_source(str(tmp_path), world["commit"])[1]] == ["source_unverifiable"]
    probe = _probe(world, tiny_triton)
    digest = package_digest(tiny_triton)
    assert triton_source({"triton_commit": "1" * 40, "triton_package_sha256": digest}, probe)[1] == []
    seen, problems = triton_source({"triton_commit": "1" * 40}, probe)
    assert [p.code for p in problems] == ["source_unverifiable"] and digest in problems[0].message
    assert triton_source({"triton_commit": "1" * 40}, {**probe, "triton_vcs_commit": "1" * 40}) == (
        {**seen, "identified_by": "direct_url.json", "commit": "1" * 40}, [])
    assert [p.code for p in triton_source({"triton_commit": "2" * 40}, {**probe, "triton_vcs_commit": "1" * 40})[1]] \
        == ["triton_source_mismatch"]
    repo = tiny_triton.parent
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "triton")
    head = _git(repo, "rev-parse", "HEAD")
    assert triton_source({"triton_commit": head}, probe)[1] == []
    assert triton_source({"triton_commit": head}, probe)[0]["identified_by"] == "git"
    (tiny_triton / "__init__.py").write_text("# edited\n")
    assert "uncommitted edits" in triton_source({"triton_commit": head}, probe)[1][0].message
    # A package lying untracked inside another checkout (a venv in a repository) is no checkout.
    (repo / "triton" / "__init__.py").write_text('__version__ = "9.9"\n')
    venv = repo / "venv" / "triton"
    venv.mkdir(parents=True)
    (venv / "__init__.py").write_text("")
    assert [p.code for p in triton_source({"triton_commit": head}, {**probe, "triton_file": str(venv / "__init__.py")})[1]] \
        == ["source_unverifiable"]


# ------------------------------------------------------------------ classification (recorded inputs)

RULE = {"launch_floor": 1, "gain_pct": 5.0, "loss_pct": -3.0, "response": "convert_layout"}


def _cell(lat=1.0, converts=((100, 2),), status="PASS", code="IR_CHANGED@ttgir", results="match", corr="PASS",
          iso=None, index=True):
    """A task receipt's facts: three shapes at lat, 2 lat, 3 lat ms; converts: (launches, count)
    per dumped TTGIR file (launches None: missing from index.tsv)."""
    return {"status": status, "reason": "" if status == "PASS" else "why it is not PASS",
            "rows": {f"torch.float16|[{i}]": lat * i for i in (1, 2, 3)},
            "convert": {"index_found": index, "files": [{"file": f"1024/k/{j}.ttgir", "launches": n, "convert_count": c}
                                                        for j, (n, c) in enumerate(converts)]},
            "code": {"verdict": code}, "results": results,
            "correctness": {"status": corr, "summary": f"1 {corr.lower()}", "isolation": iso and {"status": iso}}}


ACTED = ((100, 3),)   # the baseline's converts; candidates below keep ((100, 2),): the switch acted
CLASSIFY_CASES = [
    # (name, base, cand, reverse base, reverse cand, rule changes, class, words in the reason)
    ("gain in both orders", _cell(converts=ACTED), _cell(0.9), _cell(converts=ACTED), _cell(0.9), {}, "G",
     "measured convert_layout 3 -> 2 (launch floor 1); +11.11 % forward, +11.11 % reverse"),
    ("gain below the threshold", _cell(converts=ACTED), _cell(0.97), _cell(converts=ACTED), _cell(0.97), {}, "C",
     "not 5 % or more in both orders"),
    ("gain in one order only", _cell(converts=ACTED), _cell(0.9), _cell(converts=ACTED), _cell(0.99), {}, "C",
     "+1.01 % reverse: not 5 % or more in both orders"),
    ("orders overlap", _cell(converts=ACTED), _cell(0.9), _cell(1.3, converts=ACTED), _cell(1.1), {}, "C",
     "the two orders' latency intervals overlap"),
    ("stable regression", _cell(converts=ACTED), _cell(1.1), _cell(converts=ACTED), _cell(1.1), {}, "R",
     "-9.09 % forward, -9.09 % reverse"),
    ("no response", _cell(), _cell(0.9), None, None, {}, "B", "measured convert_layout 2 -> 2 (launch floor 1): the switch did not act"),
    ("no response but slower", _cell(), _cell(1.1), None, None, {}, "R", "-9.09 % in the forward order"),
    ("an input kernel's converts do not count", _cell(converts=((1, 5), (100, 2))), _cell(converts=((1, 0), (100, 2))),
     None, None, {}, "B", "measured convert_layout 2 -> 2"),
    ("... unless the launch floor says so", _cell(converts=((1, 5), (100, 2))), _cell(converts=((1, 0), (100, 2))),
     None, None, {"launch_floor": 0}, "X", "measured convert_layout 7 -> 2 (launch floor 0), but the reverse-order baseline was not run"),
    ("code response: changed", _cell(), _cell(0.9, code="IR_CHANGED@llir"), _cell(), _cell(0.9), {"response": "code"}, "G",
     "code IR_CHANGED@llir against the baseline"),
    ("code response: identical", _cell(), _cell(code="NO_IR_DIFF"), None, None, {"response": "code"}, "B",
     "code NO_IR_DIFF against the baseline: the switch did not act"),
    ("code response: no IR", _cell(), _cell(code="NO_IR"), None, None, {"response": "code"}, "X", "no IR on a side"),
    ("candidate-only test failure", _cell(), _cell(corr="FAIL", iso="PASS"), None, None, {}, "K",
     "fail under the candidate and pass under the baseline"),
    ("outputs differ", _cell(), _cell(results="MISMATCH (max abs err 3 > 1e-3)"), None, None, {}, "K",
     "outputs differ from the baseline's beyond FlagGems' tolerance"),
    ("tests fail without the switch too", _cell(), _cell(corr="FAIL", iso="FAIL"), None, None, {}, "X",
     "a defect the switch did not introduce"),
    ("the baseline's tests could not run", _cell(), _cell(corr="FAIL", iso="TIMEOUT"), None, None, {}, "X",
     "the baseline's run is TIMEOUT: not judged"),
    ("tests timed out", _cell(), _cell(corr="TIMEOUT"), None, None, {}, "X", "the candidate's correctness is TIMEOUT"),
    ("baseline failed", _cell(status="NO_ROWS"), _cell(), None, None, {}, "X", "the baseline is NO_ROWS"),
    ("replay violation", _cell(), _cell(status="REPLAY_VIOLATION"), None, None, {}, "X", "the candidate is REPLAY_VIOLATION"),
    ("timeout", _cell(), _cell(status="TIMEOUT"), None, None, {}, "X", "the candidate is TIMEOUT"),
    ("no index.tsv", _cell(index=False), _cell(), None, None, {}, "X", "cannot be scoped: no ttgir/index.tsv"),
    ("a file missing from the index", _cell(converts=((None, 3),)), _cell(), None, None, {}, "X",
     "1 dumped file(s) missing from index.tsv"),
    ("no TTGIR", {**_cell(), "convert": None}, _cell(), None, None, {}, "X", "no TTGIR was dumped"),
    ("reverse order failed", _cell(converts=ACTED), _cell(0.9), _cell(converts=ACTED, status="FAIL"), _cell(0.9), {}, "X",
     "but the reverse-order baseline is FAIL"),
    ("no common shape", _cell(), {**_cell(), "rows": {"torch.float32|[9]": 1.0}}, None, None, {}, "X",
     "no shape was measured on both sides"),
]


@pytest.mark.parametrize("name,base,cand,rev_base,rev_cand,change,word,says", CLASSIFY_CASES,
                         ids=[c[0] for c in CLASSIFY_CASES])
def test_classification_on_recorded_receipts(name, base, cand, rev_base, rev_cand, change, word, says):
    got = classify({**RULE, **change}, base, cand, rev_base, rev_cand)
    assert (got["class"], got["class"] in CLASSES) == (word, True) and says in got["reason"], got


def test_every_class_has_a_case():
    assert {c[6] for c in CLASSIFY_CASES} == set(CLASSES)


def test_an_untimed_candidate_that_acted_claims_no_gain():
    tasks = [{"id": "w/off", "role": "baseline", "order": "forward", "cell": "off", "timed": True},
             {"id": "w/on", "role": "candidate", "order": "forward", "cell": "on", "timed": False}]
    got = classify_workload(RULE, tasks, {"w/off": _cell(converts=ACTED), "w/on": _cell(0.5)})
    assert got["on"]["class"] == "C" and "not a timing cell, so no gain is claimed" in got["on"]["reason"]


# ------------------------------------------------------------------ reaccount

def test_reaccount_reclassifies_a_sealed_campaign_without_touching_it(sealed, tmp_path, capsys):
    frozen, _ = sealed
    before = _files(frozen)
    out = tmp_path / "reaccount"
    assert fr.main([str(frozen), "--reaccount", str(out), "--gain-pct", "30"]) == 0
    printed = capsys.readouterr().out
    assert "[reaccount] relu/on: G -> C: code IR_CHANGED@ttgir against the baseline; +2" in printed
    assert "2 of 2 changed class" in printed
    assert _files(frozen) == before
    doc = json.loads((out / "reaccount.json").read_text())
    assert doc["changed"] == ["relu/on", "abs/on"] and doc["rule"]["gain_pct"] == 30 and doc["sealed_rule"]["gain_pct"] == 5
    assert doc["counts"] == {"sealed": {"G": 2, "C": 0, "B": 0, "R": 0, "K": 0, "X": 0},
                             "reaccounted": {"G": 0, "C": 2, "B": 0, "R": 0, "K": 0, "X": 0}}
    assert [(w["sealed"], w["reaccounted"], w["sealed_reason"].split(";")[0]) for w in doc["workloads"]] == \
        [("G", "C", "code IR_CHANGED@ttgir against the baseline")] * 2
    assert "| relu | on | G | C |" in (out / "reaccount.md").read_text()
    # Unchanged rule: nothing changes.
    assert fr.main([str(frozen), "--reaccount", str(tmp_path / "same")]) == 0
    assert json.loads((tmp_path / "same" / "reaccount.json").read_text())["changed"] == []
    for where in (frozen / "reaccount", frozen):
        assert fr.main([str(frozen), "--reaccount", str(where)]) == 2
        assert "!!! reaccount_inside_sealed" in capsys.readouterr().err
    assert _files(frozen) == before


def _seal_by_hand(world, checkout, where, cells, launch_floor):
    """A campaign sealed from recorded receipts (what a runner would have written): `cells`
    maps each task id of a relu + abs canary to its facts."""
    where.mkdir(parents=True, exist_ok=True)
    frozen = where / "frozen"
    doc = _runner_manifest(world, checkout, "0" * 64, response="convert_layout")
    doc["protocol"]["launch_floor"] = launch_floor
    matrix = _freeze_for(world, checkout, doc, frozen)
    sha = fz.sha256((frozen / MATRIX).read_bytes())
    receipts = {t["id"]: {**cells[t["id"]], "task_matrix_sha256": sha} for t in matrix["tasks"]}
    for t in matrix["tasks"]:
        Path(t["receipt"]).parent.mkdir(parents=True, exist_ok=True)
        Path(t["receipt"]).write_text(json.dumps(receipts[t["id"]]))
    rule = rule_of(doc)
    for wid in ("relu", "abs"):
        tasks = [t for t in matrix["tasks"] if t["workload"] == wid]
        (frozen / "tasks" / wid / "workload-receipt.json").write_text(json.dumps(
            {"classes": classify_workload(rule, tasks, receipts)}))
    (frozen / "campaign-receipt.json").write_text(json.dumps({"status": "complete", "task_matrix_sha256": sha,
                                                              "rule": rule}))
    return frozen


def test_reaccount_under_another_launch_floor_names_what_changed_and_why(world, checkout, tmp_path, capsys):
    """relu's candidate removed converts only from a kernel launched once (it built the
    inputs): sealed at launch floor 0 that read as a response (7 -> 2), timed in both orders,
    G; at floor 1 nothing the timer saw changed: B. abs's candidate removed one from its
    measured kernel: G under either floor."""
    inputs, measured = ((1, 5), (100, 2)), ((1, 0), (100, 2))
    cells = {"relu/off": _cell(converts=inputs), "relu/ctl": _cell(converts=inputs), "relu/on": _cell(0.9, converts=measured),
             "relu/on@reverse": _cell(0.9, converts=measured), "relu/off@reverse": _cell(converts=inputs),
             "abs/off": _cell(converts=ACTED), "abs/ctl": _cell(converts=ACTED), "abs/on": _cell(0.9),
             "abs/on@reverse": _cell(0.9), "abs/off@reverse": _cell(converts=ACTED)}
    frozen = _seal_by_hand(world, checkout, tmp_path / "a", cells, launch_floor=0)
    before = _files(frozen)
    out = tmp_path / "floor1"
    assert fr.main([str(frozen), "--reaccount", str(out), "--launch-floor", "1"]) == 0
    doc = json.loads((out / "reaccount.json").read_text())
    rows = {w["workload"]: w for w in doc["workloads"]}
    assert (rows["relu"]["sealed"], rows["relu"]["reaccounted"], doc["changed"]) == ("G", "B", ["relu/on"])
    assert rows["relu"]["reason"] == "measured convert_layout 2 -> 2 (launch floor 1): the switch did not act"
    assert rows["relu"]["sealed_reason"].startswith("measured convert_layout 7 -> 2 (launch floor 0); +11.11 %")
    assert (rows["abs"]["sealed"], rows["abs"]["reaccounted"]) == ("G", "G")
    assert (doc["sealed_rule"]["launch_floor"], doc["rule"]["launch_floor"]) == (0, 1)
    assert "relu/on: G -> B" in capsys.readouterr().out and _files(frozen) == before
    # Sealed at floor 1, where relu did not act, its reverse order was not run: a rule that
    # now sees a response gets no timing the campaign never measured.
    cells["relu/on@reverse"] = cells["relu/off@reverse"] = {"status": "NOT_NEEDED", "reason": "no candidate acted"}
    frozen = _seal_by_hand(world, checkout, tmp_path / "b", cells, launch_floor=1)
    assert fr.main([str(frozen), "--reaccount", str(tmp_path / "floor0"), "--launch-floor", "0"]) == 0
    row = json.loads((tmp_path / "floor0" / "reaccount.json").read_text())["workloads"][0]
    assert (row["sealed"], row["reaccounted"]) == ("B", "X")
    assert row["reason"] == ("measured convert_layout 7 -> 2 (launch floor 0), but the reverse-order baseline is "
                             "NOT_NEEDED: no candidate acted")
    assert "relu/on: B -> X" in capsys.readouterr().out


def test_reaccount_refuses_a_campaign_that_is_not_sealed(world, checkout, triton_digest, tmp_path, capsys):
    frozen = tmp_path / "frozen"
    _freeze_for(world, checkout, _runner_manifest(world, checkout, triton_digest), frozen)
    assert fr.main([str(frozen), "--reaccount", str(tmp_path / "out")]) == 2
    assert "!!! campaign_not_sealed at" in capsys.readouterr().err
    (frozen / "campaign-receipt.json").write_text(json.dumps({"status": "stopped_at_budget"}))
    assert fr.main([str(frozen), "--reaccount", str(tmp_path / "out")]) == 2
    assert "status 'stopped_at_budget': only a complete campaign" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ the shipped manifests

@pytest.mark.parametrize("name", ["musa-rlc-32-product-v1.json", "cuda-llvm-opt-h200-v1.json",
                                  "cuda-llvm-opt-h100-v1.json"])
def test_the_shipped_manifests_resolve_against_the_inventory(name, tmp_path):
    """Every target of each shipped manifest is checked against ops/inventory_main.csv and
    ops/shapes_single.yaml; their FlagGems trees are not here, so the tree is the one problem."""
    path = REPO_ROOT / "campaigns" / name
    doc, _ = fz.read_manifest(path)
    with pytest.raises(CampaignError) as exc:
        fz.prepare(path, str(tmp_path / "FlagGems"), fz.DEFAULT_INVENTORY, "all", None, dry_run=True)
    assert _codes(exc) == [("source_tree_missing", "$.source.flaggems_commit")]
    canaries = [w["id"] for w in doc["workloads"] if w["canary"]]
    cells = [(c["name"], c["role"]) for c in doc["protocol"]["cells"]]
    if name.startswith("musa"):
        assert (len(doc["workloads"]), len(canaries), doc["device"]["backend"]) == (32, 8, "musa")
        assert cells == [("off", "baseline"), ("mask0", "control"), ("candidate", "candidate")]
        assert [c["env"]["FLAGTREE_MUSA_RLC_PHASE_MASK"] for c in doc["protocol"]["cells"]] == ["13", "0", "13"]
    else:
        assert len(doc["workloads"]) >= 8 and len(canaries) == 3 and doc["device"]["backend"] == "cuda"
        assert [c["env"] for c in doc["protocol"]["cells"]] == [{"DISABLE_LLVM_OPT": v} for v in ("", "0", "1")]
        assert doc["protocol"]["classification"]["response"] == "code"
        assert doc["source"]["triton_package_sha256"]
        # one campaign per GPU model, the same contract otherwise
        twin = json.loads((REPO_ROOT / "campaigns" / "cuda-llvm-opt-h200-v1.json").read_text())
        same = ("campaign_id", "permitted_claim", "device")
        assert {k: v for k, v in doc.items() if k not in same} == {k: v for k, v in twin.items() if k not in same}
        assert doc["device"]["model"] in doc["permitted_claim"]


@pytest.mark.parametrize("case,says", [
    ("fallback marker", "1 key(s) fell back to live tuning (AUTOTUNE_REPLAY_FALLBACK): a replay fallback fails the task"),
    ("fallback mode", "all key(s) fell back to live tuning"),
    ("another record", "autotune record link: relu/on replayed record"),
    ("baseline tuned live", "the baseline did not record (autotune_mode=uncontrolled)"),
])
def test_a_replay_that_is_not_the_baselines_record_fails_its_task(sealed, world, checkout, tmp_path, case, says):
    """Run directories of the sealed canary, edited: a key that fell back to live tuning, a
    whole-run fallback, a replay of another record, a baseline that recorded nothing."""
    frozen = tmp_path / "frozen"
    matrix = _freeze_for(world, checkout, json.loads((sealed[0] / MANIFEST).read_text()), frozen)
    tasks = {t["id"]: t for t in matrix["tasks"]}
    for cell in ("off", "on"):
        shutil.copytree(sealed[0] / "tasks/relu" / cell / "run", frozen / "tasks/relu" / cell / "run")
    campaign = fr.Campaign(frozen, _args())
    campaign.receipts["relu/off"] = {"run": str(frozen / "tasks/relu/off/run")}
    task = tasks["relu/off" if case == "baseline tuned live" else "relu/on"]
    run = Path(task["benchmark"]["env"]["OUT_DIR"])
    ident = json.loads((run / "run_identity.json").read_text())
    if case == "fallback marker":
        with open(run / "run.log", "a") as fh:
            fh.write("AUTOTUNE_REPLAY_FALLBACK op=relu kernel=relu_kernel key=(1024,) reason=key_missing\n")
    ident.update({"fallback mode": {"autotune_mode": "replay_fallback", "replay_fallback_scope": "keys"},
                  "another record": {"replay_record_digest": "sha256:" + "9" * 64},
                  "baseline tuned live": {"autotune_mode": "uncontrolled"}}.get(case, {}))
    (run / "run_identity.json").write_text(json.dumps(ident))
    facts = campaign.measure(task, {"rc": 0, "timed_out": False, "timeout_s": 60, "log": str(tmp_path / "none")})
    assert facts["status"] == "REPLAY_VIOLATION" and says in facts["reason"], facts["reason"]
    assert len(facts["rows"]) == 6     # it measured; the measurement just does not count
