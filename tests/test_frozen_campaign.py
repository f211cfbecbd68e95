"""Frozen validation campaigns (zl/frozen/): the manifest's named errors, its resolution against
an inventory and a real (git) FlagGems tree, the budget, the frozen task matrix and its hash
binding, idempotence, and the canary receipt `--selection all` demands."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from zl import locks
from zl.batch import inventory as inv
from zl.frozen import CODES, MANIFEST, MATRIX, SHAPES, CampaignError, canary_receipt, load_frozen
from zl.frozen import freeze as fz
from zl.frozen.manifest import validate

FAKE = Path(__file__).resolve().parent / "fake_flaggems"
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
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "tree")
    commit = _git(tree, "rev-parse", "HEAD")
    inventory = base / "inventory_main.csv"
    inv.write_csv(inventory, inv.scan_tree(tree, "main"), f"source=fake commit={commit}")
    shapes = base / "shapes.yaml"
    shapes.write_text(SHAPES_YAML)
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
    assert written == 0 and len(relu) == 3
    assert relu[0]["benchmark"]["env"]["TEST_NODE"] == f"{world['tree']}/benchmark/test_relu.py::test_relu"


def test_a_reason_for_a_target_the_inventory_has_is_refused(world, tmp_path):
    doc = _manifest(world)
    doc["workloads"][0]["inventory_missing_reason"] = "stale"
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, doc), dry_run=True)
    assert _codes(exc) == [("reason_not_needed", "$.workloads[0].inventory_missing_reason")]


def test_a_benchmark_the_inventory_marks_skipped_is_refused(world, tmp_path):
    doc = _manifest(world)
    doc["workloads"][2]["target"] = {"test_file": "test_zl_batch.py", "op": "zl_skipped"}
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, doc), dry_run=True)
    assert _codes(exc) == [("inventory_marks_skip", "$.workloads[2].target")]


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
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, doc), dry_run=True)
    assert _codes(exc) == [("source_commit_mismatch", "$.source.flaggems_commit")]
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
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, doc), dry_run=True)
    assert _codes(exc) == [("shape_file_invalid", "$.protocol.shape_file")]
    doc = _manifest(world)
    doc["workloads"][1]["shape_key"] = "abs_inplace"
    with pytest.raises(CampaignError) as exc:
        _prepare(world, _write(tmp_path, doc), dry_run=True)
    assert _codes(exc) == [("shape_key_missing", "$.workloads[1].shape_key")]


# ------------------------------------------------------------------ the frozen task matrix

def test_canaries_run_first_and_each_baseline_before_its_control_and_candidate(world, tmp_path):
    out = tmp_path / "frozen"
    matrix, _ = _prepare(world, _write(tmp_path, _manifest(world)), out=out, selection="all", canary=None,
                         dry_run=True)
    assert [t["id"] for t in matrix["tasks"]] == [
        "abs/off", "abs/mask0", "abs/on", "softmax/off", "softmax/mask0", "softmax/on",
        "relu/off", "relu/mask0", "relu/on"]
    assert [t["canary"] for t in matrix["tasks"]] == [True] * 6 + [False] * 3
    assert [t["ordinal"] for t in matrix["tasks"]] == list(range(1, 10))
    off, mask0, on = matrix["tasks"][:3]
    assert (off["autotune"], off["replay_of"], off["code_must_equal"]) == ("record", None, None)
    assert (mask0["autotune"], mask0["replay_of"], mask0["code_must_equal"]) == ("replay", "abs/off", "abs/off")
    assert (on["autotune"], on["replay_of"], on["code_must_equal"]) == ("replay", "abs/off", None)
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
    """canary: abs (heavy, 1800 s) and softmax (light, 300 s), 3 cells each, correctness in one
    cell; all adds relu (light)."""
    path = _write(tmp_path, _manifest(world))
    canary, _ = _prepare(world, path, dry_run=True)
    b = canary["budget"]
    assert (b["tasks"], b["workloads"]) == (6, 2)
    assert b["by_cost_class"] == {
        "heavy": {"timeout_s": 1800, "tasks": 3, "benchmark_s": 3 * 1800, "correctness_runs": 1, "correctness_s": 1800},
        "light": {"timeout_s": 300, "tasks": 3, "benchmark_s": 3 * 300, "correctness_runs": 1, "correctness_s": 300}}
    assert (b["benchmark_s"], b["correctness_s"]) == (3 * 1800 + 3 * 300, 1800 + 300)
    assert b["worst_case_s"] == b["canary_worst_case_s"] == 8400 and b["worst_case_hours"] == 2.33
    full, _ = _prepare(world, path, selection="all", dry_run=True)
    b = full["budget"]
    assert (b["tasks"], b["workloads"], b["worst_case_s"], b["canary_worst_case_s"]) == (9, 3, 8400 + 4 * 300, 8400)
    assert b["worst_case_hours"] == round(9600 / 3600, 2) == 2.67


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
    assert written == 3 and len(matrix["tasks"]) == 9
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
    assert "6 tasks" in out and "= 8400 s (2.33 h)" in out and "heavy: 3 tasks x 1800 s + 1 correctness x 1800 s = 7200 s" in out
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
        "canary_receipt_matrix_mismatch", "canary_receipt_invalid"}
    assert covered == set(CODES)
