"""The frozen campaign manifest, schema 1, and its hand-written checks.

`validate(doc)` returns every problem at once, each a `Problem(code, path, message)`: `code`
is a key of CODES, `path` the JSON path of the bad field (`$.workloads[2].correctness.reason`).
A manifest with no problem has every field below with the right type, so callers index it
directly. Unknown fields are problems too: a misspelt optional field (`canery`) would
otherwise be ignored and the campaign run without it.

Schema 1 (every field required unless marked optional):
  schema_version 1; campaign_id (a name: it becomes a directory); permitted_claim (text);
  production_default {policy: unchanged | proposed-change, environment {VAR: value of the
    production build, for cell variables}};
  source {triton: flagtree | triton, triton_commit, flaggems_commit, zl_bench_commit} (full
    lowercase hex commits; an installed Triton build that records no commit is named by
    triton_package_sha256 instead, zl.frozen.package_digest of its files);
  device {backend (ZL_BACKEND's names), model, visible_device_count >= 1};
  protocol {cells [{name, role: baseline | control | candidate, env {VAR: value}}] in run
    order (one baseline first, then controls, then candidates); timing_cells and
    correctness_cells (cell names); canary_order (workload ids); dtypes {default, supported};
    timeouts_s {cost class: seconds}; launch_floor (launches at or below it are not the
    measured operator's); classification {gain_pct > 0, loss_pct < 0, optional response:
    convert_layout (default) | code, what counts as the switch acting}; optional environment
    {VAR: value} for every cell; optional shape_file (path, relative to the zl_bench
    checkout; null: FlagGems' own shapes); optional correctness_args (extra pytest words)};
  workloads [{id, target {test_file (under benchmark/), op}, shape_key (null: upstream
    shapes), family, cost_class, canary, correctness {file, optional node_ids or select,
    reason when narrowed}, optional dtypes, optional prior_evidence {key: scalar}, optional
    inventory_missing_reason}].
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from zl.backends import UnknownBackendError, get_backend
from zl.backends.base import ALL_VISIBILITY_KEYS
from zl.config import DTYPE_RE, NAME_RE, SETTINGS, ConfigError, run_variables
from zl.flaggems import VENDOR_ENV_KEYS
from zl.frozen import CODES, CampaignError, Problem
from zl.onoff import SwitchError, parse_switch

SCHEMA_VERSION = 1
ROLES = ("baseline", "control", "candidate")
PRODUCTION_POLICIES = ("unchanged", "proposed-change")
TRITONS = ("flagtree", "triton")
SELECTIONS = ("canary", "all")
# What counts as the switch acting on a workload (zl.frozen.classify): its measured kernels'
# convert_layout count went down, or its code differs at some fingerprint level.
RESPONSES = ("convert_layout", "code")

COMMIT_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")   # a variable, a test function

# Set per task by the runner from the manifest's other fields (target, dtypes, shapes,
# device, the baseline's run): a manifest that set one would contradict them.
_RUN_FACTS = {"backend", "device", "device_share", "op", "out_dir", "shape_file", "shape_mode",
              "record_dir", "replay_dir", "ttgir_dump_dir", "parallel_worker"}
RUNNER_VARIABLES = frozenset(
    {"TEST_NODE", "OP", "OP_FILE", "FLAGGEMS_DIR", "SHAPE_FILE", "SHAPE_MODE", "DTYPES",
     "OUT_DIR", "REPLAY_FROM", "ZL_CAMPAIGN_ID", "ZL_RUNS_ROOT", "ZL_PYTHON"}
    | {s.env for s in SETTINGS if s.attr in _RUN_FACTS}
    | set(ALL_VISIBILITY_KEYS) | set(VENDOR_ENV_KEYS))
# zl_bench's own measurement conditions: the same for every cell (protocol.environment),
# since a cell that differs on one is a caliber difference, not the switch under test.
ONOFF_VARIABLES = ("USE_FLAGTUNE", "ZL_ISOLATE_TUNER_CACHE", "ZL_ENABLE_AUTOTUNE", "ZL_ENABLE_IR",
                   "ZL_ENABLE_MM_CLUSTER", "ZL_ENABLE_RESULTS", "ZL_RESULTS_PREWARM",
                   "ZL_PRETTY_FOLD", "ZL_MUSA_COMPAT")
_CHECKED_BY_RUN_VARIABLES = ("BENCH_LEVEL", "FLAGGEMS_PERF_COLOR", "ZL_DIRECT_REPEAT", "ZL_SEED")
# pytest words that choose which tests run: per workload only, with its stated reason.
NARROWING_ARGS = ("-k", "-m", "--deselect", "--ignore", "--lf", "--last-failed")

_KINDS = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


class _Checker:
    def __init__(self) -> None:
        self.problems: List[Problem] = []

    def add(self, code: str, path: str, message: str) -> None:
        assert code in CODES, code
        self.problems.append(Problem(code, path, message))

    def fields(self, obj: Dict[str, Any], path: str, required: Dict[str, str],
               optional: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        """The fields of `obj` that exist with their kind ("string|null": either); the rest
        are reported as missing, wrong-typed or unknown."""
        optional = optional or {}
        for name in obj:
            if name not in required and name not in optional:
                self.add("unknown_field", f"{path}.{name}", f"schema {SCHEMA_VERSION} has no field {name!r}")
        good: Dict[str, Any] = {}
        for name, kind in {**required, **optional}.items():
            if name not in obj:
                if name in required:
                    self.add("missing_field", f"{path}.{name}", f"required ({kind})")
                continue
            value, kinds = obj[name], kind.split("|")
            if value is None and "null" in kinds or any(_KINDS[k](value) for k in kinds if k != "null"):
                good[name] = value
            else:
                self.add("wrong_type", f"{path}.{name}", f"must be {kind.replace('|', ' or ')}, got {value!r}")
        return good

    def text(self, value: str, path: str) -> bool:
        if not value.strip():
            self.add("empty_value", path, "must not be empty")
            return False
        return True

    def name(self, value: str, path: str, pattern: "re.Pattern[str]" = NAME_RE) -> bool:
        if not pattern.match(value) or (pattern is NAME_RE and (".." in value or not value.strip("."))):
            self.add("bad_name", path, f"{value!r} is not a name ({pattern.pattern})")
            return False
        return True

    def strings(self, value: List[Any], path: str, nonempty: bool = True) -> List[Tuple[int, str]]:
        """(index, item) of the non-empty strings of a list; the other items reported."""
        if nonempty and not value:
            self.add("empty_value", path, "must not be empty")
        out = []
        for i, item in enumerate(value):
            if isinstance(item, str) and item.strip():
                out.append((i, item))
            else:
                self.add("wrong_type" if not isinstance(item, str) else "empty_value", f"{path}[{i}]",
                         f"must be a non-empty string, got {item!r}")
        return out

    def env(self, value: Dict[str, Any], path: str) -> Dict[str, str]:
        out = {}
        for name, word in value.items():
            if not isinstance(word, str):
                self.add("wrong_type", f"{path}.{name}", f"must be a string, got {word!r}")
            elif self.name(name, f"{path}.{name}", IDENT_RE):
                out[name] = word
        return out


def is_zl_variable(name: str) -> bool:
    """A zl_bench (or FlagGems tuning) variable that conditions every measurement."""
    return (name.startswith("ZL_") or name in {s.env for s in SETTINGS}
            or name in ("BENCH_LEVEL", "USE_FLAGTUNE"))


def env_changes(ran_with: Any, now: Mapping[str, str]) -> str:
    """What a resumed campaign's inherited variables (`inherited.recorded`) changed."""
    return (f"the sealed tasks' variables are {ran_with}; this call has {dict(now)}" if not isinstance(ran_with, dict)
            else "; ".join(f"{k}: sealed tasks {ran_with.get(k, '<unset>')!r}, this call {now.get(k, '<unset>')!r}"
                           for k in sorted(set(ran_with) | set(now)) if ran_with.get(k) != now.get(k)))


def _relative_py(c: _Checker, value: str, path: str, test_prefix: bool) -> bool:
    parts = value.split("/")
    ok = (not value.startswith("/") and not {"..", ".", ""} & set(parts) and value.endswith(".py")
          and (not test_prefix or parts[-1].startswith("test_")))
    if not ok:
        want = "test_*.py" if test_prefix else "*.py"
        c.add("bad_path", path, f"{value!r} must be a relative {want} path inside the tree, without '..'")
    return ok


def validate(doc: Any) -> List[Problem]:
    """Every problem of `doc` (a parsed manifest); [] when it is a valid schema-1 manifest."""
    c = _Checker()
    if not isinstance(doc, dict):
        c.add("wrong_type", "$", "the manifest must be a JSON object")
        return c.problems
    if "schema_version" not in doc:
        c.add("missing_field", "$.schema_version", f"required (this zl_bench reads {SCHEMA_VERSION})")
        return c.problems
    if not _KINDS["integer"](doc["schema_version"]) or doc["schema_version"] != SCHEMA_VERSION:
        # The other fields mean what their version says: none of them is read.
        c.add("unknown_schema_version", "$.schema_version",
              f"{doc['schema_version']!r}; this zl_bench reads schema {SCHEMA_VERSION}")
        return c.problems
    top = c.fields(doc, "$", {"schema_version": "integer", "campaign_id": "string",
                              "permitted_claim": "string", "production_default": "object",
                              "source": "object", "device": "object", "protocol": "object",
                              "workloads": "array"})
    if "campaign_id" in top:
        c.name(top["campaign_id"], "$.campaign_id")
    if "permitted_claim" in top:
        c.text(top["permitted_claim"], "$.permitted_claim")
    if "source" in top:
        _source(c, top["source"])
    if "device" in top:
        _device(c, top["device"])
    proto = _protocol(c, top["protocol"]) if "protocol" in top else {}
    workloads = _workloads(c, top["workloads"], proto) if "workloads" in top else {}
    if "production_default" in top:
        _production_default(c, top["production_default"], proto)
    if proto.get("canary_order") is not None and "workloads" in top:
        _canary_order(c, proto["canary_order"], workloads)
    return c.problems


def _source(c: _Checker, obj: Dict[str, Any]) -> None:
    src = c.fields(obj, "$.source", {"triton": "string", "flaggems_commit": "string", "zl_bench_commit": "string"},
                   {"triton_commit": "string", "triton_package_sha256": "string"})
    if not re.match(r"^[0-9a-f]{64}$", src.get("triton_package_sha256", "0" * 64)):
        c.add("bad_value", "$.source.triton_package_sha256", "must be 64 lowercase hex digits (a sha256)")
    if not {"triton_commit", "triton_package_sha256"} & set(obj):
        c.add("missing_field", "$.source.triton_commit", "required (string), unless triton_package_sha256 names the build")
    if "triton" in src and src["triton"] not in TRITONS:
        c.add("bad_value", "$.source.triton", f"{src['triton']!r} is not one of {', '.join(TRITONS)}")
    for key in ("triton_commit", "flaggems_commit", "zl_bench_commit"):
        if key in src and not COMMIT_RE.match(src[key]):
            c.add("bad_commit", f"$.source.{key}", f"{src[key]!r} is not a full lowercase hex commit")


def _device(c: _Checker, obj: Dict[str, Any]) -> None:
    dev = c.fields(obj, "$.device", {"backend": "string", "model": "string",
                                     "visible_device_count": "integer"})
    if "backend" in dev:
        try:
            get_backend(dev["backend"])
        except UnknownBackendError as exc:
            c.add("unknown_backend", "$.device.backend", str(exc))
    if "model" in dev:
        c.text(dev["model"], "$.device.model")
    if dev.get("visible_device_count", 1) < 1:
        c.add("bad_value", "$.device.visible_device_count", "must be at least 1")


def _protocol(c: _Checker, obj: Dict[str, Any]) -> Dict[str, Any]:
    """The protocol's usable parts: cells by name, cost classes, dtypes, environment."""
    p = "$.protocol"
    f = c.fields(obj, p, {"cells": "array", "timing_cells": "array", "correctness_cells": "array",
                          "canary_order": "array", "dtypes": "object", "timeouts_s": "object",
                          "launch_floor": "integer", "classification": "object"},
                 {"environment": "object", "shape_file": "string|null", "correctness_args": "array"})
    common = _environment(c, f.get("environment", {}), f"{p}.environment")
    cells = _cells(c, f["cells"], common) if "cells" in f else {}
    candidates = [n for n, cell in cells.items() if cell["role"] == "candidate"]
    for key in ("timing_cells", "correctness_cells"):
        if key not in f:
            continue
        names: List[str] = []
        for i, name in c.strings(f[key], f"{p}.{key}"):
            if name not in cells:
                c.add("unknown_cell", f"{p}.{key}[{i}]", f"no cell is named {name!r}")
            elif name in names:
                c.add("duplicate_cell", f"{p}.{key}[{i}]", f"{name!r} is listed twice")
            names.append(name)
        roles = {cells[n]["role"] for n in names if n in cells}
        if key == "timing_cells" and cells and not ("baseline" in roles and "candidate" in roles):
            c.add("timing_cells_incomplete", f"{p}.{key}", "must hold the baseline and at least one candidate")
        if key == "correctness_cells" and set(candidates) - set(names):
            c.add("correctness_cells_incomplete", f"{p}.{key}",
                  f"lacks candidate(s) {', '.join(sorted(set(candidates) - set(names)))}: "
                  "a candidate's results are checked before any timing of it is believed")
    supported: List[str] = []
    default: List[str] = []
    if "dtypes" in f:
        d = c.fields(f["dtypes"], f"{p}.dtypes", {"default": "array", "supported": "array"})
        supported = [w for i, w in c.strings(d.get("supported", []), f"{p}.dtypes.supported")
                     if c.name(w, f"{p}.dtypes.supported[{i}]", DTYPE_RE)]
        pairs = c.strings(d.get("default", []), f"{p}.dtypes.default") if "default" in d else []
        _dtypes_in(c, pairs, supported, f"{p}.dtypes.default")
        default = [w for _, w in pairs]
    timeouts: Dict[str, int] = {}
    if "timeouts_s" in f:
        if not f["timeouts_s"]:
            c.add("empty_value", f"{p}.timeouts_s", "must name at least one cost class")
        for name, seconds in f["timeouts_s"].items():
            path = f"{p}.timeouts_s.{name}"
            if not _KINDS["integer"](seconds):
                c.add("wrong_type", path, f"must be integer, got {seconds!r}")
            elif seconds < 1:
                c.add("bad_value", path, f"{seconds} s: a timeout must be at least 1 s")
            elif c.name(name, path):
                timeouts[name] = seconds
    if f.get("launch_floor", 0) < 0:
        c.add("bad_value", f"{p}.launch_floor", "must be 0 or more")
    if "classification" in f:
        k = c.fields(f["classification"], f"{p}.classification", {"gain_pct": "number", "loss_pct": "number"},
                     {"response": "string"})
        if k.get("response", RESPONSES[0]) not in RESPONSES:
            c.add("bad_value", f"{p}.classification.response", f"{k['response']!r} is not one of {', '.join(RESPONSES)}")
        if k.get("gain_pct", 1) <= 0:
            c.add("bad_value", f"{p}.classification.gain_pct", "must be above 0 (a speedup in percent)")
        if k.get("loss_pct", -1) >= 0:
            c.add("bad_value", f"{p}.classification.loss_pct", "must be below 0 (a slowdown in percent)")
    if f.get("shape_file") is not None:
        c.text(f["shape_file"], f"{p}.shape_file")
    for i, word in c.strings(f.get("correctness_args", []), f"{p}.correctness_args", nonempty=False):
        if word.split("=", 1)[0] in NARROWING_ARGS or (word.startswith("-k") and word != "-k"):
            c.add("narrowing_without_reason", f"{p}.correctness_args[{i}]",
                  f"{word!r} narrows every workload's correctness; narrow one workload with "
                  "correctness.node_ids or select and its reason")
    return {"cells": cells, "timeouts": timeouts, "supported": supported, "default": default,
            "shape_file": f.get("shape_file"), "canary_order": f.get("canary_order"),
            "has_dtypes": "dtypes" in f, "has_timeouts": "timeouts_s" in f}


def _dtypes_in(c: _Checker, words: Sequence[Tuple[int, str]], supported: Sequence[str], path: str) -> None:
    for i, word in words:
        if c.name(word, f"{path}[{i}]", DTYPE_RE) and supported and word not in supported:
            c.add("unsupported_dtype", f"{path}[{i}]",
                  f"{word!r} is not in protocol.dtypes.supported ({', '.join(supported)})")


def _environment(c: _Checker, obj: Dict[str, Any], path: str) -> Dict[str, str]:
    """protocol.environment: zl_bench variables checked by zl_bench's own readers."""
    env = c.env(obj, path)
    for name, word in list(env.items()):
        where = f"{path}.{name}"
        if name in RUNNER_VARIABLES:
            c.add("reserved_variable", where, f"{name} is set per task by the runner")
            del env[name]
        elif name in ONOFF_VARIABLES:
            try:
                if not parse_switch(word, True, name=name) and name == "ZL_ENABLE_AUTOTUNE":
                    c.add("autotune_off", where, "the baseline records autotune configs the other cells replay")
            except SwitchError as exc:
                c.add("bad_value", where, str(exc))
        elif name in _CHECKED_BY_RUN_VARIABLES:
            try:
                run_variables({name: word})
            except ConfigError as exc:
                c.add("bad_value", where, str(exc))
    return env


def _cells(c: _Checker, items: List[Any], common: Dict[str, str]) -> Dict[str, Dict[str, Any]]:
    p = "$.protocol.cells"
    if not items:
        c.add("empty_value", p, "needs a baseline and at least one candidate")
    cells: Dict[str, Dict[str, Any]] = {}
    order: List[Dict[str, Any]] = []
    for i, item in enumerate(items):
        path = f"{p}[{i}]"
        if not isinstance(item, dict):
            c.add("wrong_type", path, f"must be object, got {item!r}")
            continue
        f = c.fields(item, path, {"name": "string", "role": "string", "env": "object"})
        if "role" in f and f["role"] not in ROLES:
            c.add("bad_value", f"{path}.role", f"{f['role']!r} is not one of {', '.join(ROLES)}")
            continue
        if "name" not in f or not c.name(f["name"], f"{path}.name") or "role" not in f:
            continue
        if f["name"] in cells:
            c.add("duplicate_cell", f"{path}.name", f"{f['name']!r} is already a cell")
            continue
        env = c.env(f.get("env", {}), f"{path}.env")
        for name in list(env):
            if name in RUNNER_VARIABLES:
                c.add("reserved_variable", f"{path}.env.{name}", f"{name} is set per task by the runner")
            elif is_zl_variable(name):
                c.add("zl_variable_in_cell", f"{path}.env.{name}",
                      f"{name} is a zl_bench measurement condition: set it in protocol.environment")
            elif name in common:
                c.add("variable_set_twice", f"{path}.env.{name}", f"{name} is also in protocol.environment")
            else:
                continue
            del env[name]
        cell = {"name": f["name"], "role": f["role"], "env": env, "path": path, "index": i}
        cells[f["name"]] = cell
        order.append(cell)
    ranks = [ROLES.index(cell["role"]) for cell in order]
    if order and (ranks[0] != 0 or ranks.count(0) != 1 or ranks != sorted(ranks)):
        c.add("cell_order", p, "must be one baseline first, then controls, then candidates; got "
              + ", ".join(f"{cell['name']}={cell['role']}" for cell in order))
    elif order and 2 not in ranks:
        c.add("no_candidate", p, "no cell has role candidate")
    base = order[0] if order and order[0]["role"] == "baseline" else None
    for cell in order[1:] if base else ():
        extra, lacking = set(cell["env"]) - set(base["env"]), set(base["env"]) - set(cell["env"])
        if extra or lacking:
            c.add("cell_variables_differ", f"{cell['path']}.env",
                  "every cell must set the same variables (else one inherits what another sets): "
                  + "; ".join(s for s in (extra and f"{cell['name']} alone sets {', '.join(sorted(extra))}",
                                          lacking and f"{cell['name']} leaves {', '.join(sorted(lacking))} unset")
                              if s))
        elif cell["role"] == "candidate" and cell["env"] == base["env"]:
            c.add("candidate_equals_baseline", f"{cell['path']}.env",
                  f"{cell['name']} sets what the baseline sets: it would measure nothing")
    return cells


def _production_default(c: _Checker, obj: Dict[str, Any], proto: Dict[str, Any]) -> None:
    p = "$.production_default"
    f = c.fields(obj, p, {"policy": "string", "environment": "object"})
    if "policy" in f and f["policy"] not in PRODUCTION_POLICIES:
        c.add("bad_value", f"{p}.policy", f"{f['policy']!r} is not one of {', '.join(PRODUCTION_POLICIES)}")
    known = {name for cell in proto.get("cells", {}).values() for name in cell["env"]}
    for name in c.env(f.get("environment", {}), f"{p}.environment"):
        if proto.get("cells") and name not in known:
            c.add("unknown_variable", f"{p}.environment.{name}", f"no cell sets {name}")


def _workloads(c: _Checker, items: List[Any], proto: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    if not items:
        c.add("empty_value", "$.workloads", "must list at least one workload")
    seen: Dict[str, Dict[str, Any]] = {}
    targets: Dict[tuple, str] = {}
    for i, item in enumerate(items):
        path = f"$.workloads[{i}]"
        if not isinstance(item, dict):
            c.add("wrong_type", path, f"must be object, got {item!r}")
            continue
        w = c.fields(item, path, {"id": "string", "target": "object", "shape_key": "string|null",
                                  "family": "string", "cost_class": "string", "canary": "boolean",
                                  "correctness": "object"},
                     {"dtypes": "array", "prior_evidence": "object", "inventory_missing_reason": "string"})
        if "id" in w and c.name(w["id"], f"{path}.id"):
            if w["id"] in seen:
                c.add("duplicate_workload_id", f"{path}.id",
                      f"{w['id']!r} is already {seen[w['id']]['path']}")
            else:
                seen[w["id"]] = {"path": path, "canary": w.get("canary")}
        target = c.fields(w.get("target", {}), f"{path}.target", {"test_file": "string", "op": "string"}) \
            if "target" in w else {}
        if "test_file" in target:
            _relative_py(c, target["test_file"], f"{path}.target.test_file", test_prefix=True)
        if "op" in target:
            c.name(target["op"], f"{path}.target.op", IDENT_RE)
        if w.get("shape_key") is not None and c.text(w["shape_key"], f"{path}.shape_key") \
                and "shape_file" in proto and proto["shape_file"] is None:
            c.add("shape_key_without_file", f"{path}.shape_key",
                  "protocol.shape_file is null (FlagGems' own shapes): say shape_key null")
        if "family" in w:
            c.text(w["family"], f"{path}.family")
        if "cost_class" in w and proto.get("has_timeouts") and w["cost_class"] not in proto["timeouts"]:
            c.add("unknown_cost_class", f"{path}.cost_class",
                  f"{w['cost_class']!r} has no timeout in protocol.timeouts_s ({', '.join(proto['timeouts'])})")
        dtypes = proto.get("default", [])
        if "dtypes" in w:
            pairs = c.strings(w["dtypes"], f"{path}.dtypes")
            _dtypes_in(c, pairs, proto.get("supported", []), f"{path}.dtypes")
            dtypes = [d for _, d in pairs]
        if "correctness" in w:
            _correctness(c, w["correctness"], f"{path}.correctness")
        for key, value in w.get("prior_evidence", {}).items():
            if isinstance(value, (dict, list)):
                c.add("wrong_type", f"{path}.prior_evidence.{key}", "must be a string, number, boolean or null")
        if "inventory_missing_reason" in w:
            c.text(w["inventory_missing_reason"], f"{path}.inventory_missing_reason")
        if len(target) == 2:
            key = (target["test_file"], target["op"], w.get("shape_key"), tuple(dtypes))
            if key in targets:
                c.add("duplicate_target", f"{path}.target",
                      f"{targets[key]} already measures {target['test_file']}::test_{target['op']} "
                      "with these shapes and dtypes")
            targets.setdefault(key, path)
    return seen


def _correctness(c: _Checker, obj: Dict[str, Any], path: str) -> None:
    f = c.fields(obj, path, {"file": "string"}, {"node_ids": "array", "select": "string", "reason": "string"})
    ok = "file" in f and _relative_py(c, f["file"], f"{path}.file", test_prefix=False)
    if "node_ids" in f:
        for i, node in c.strings(f["node_ids"], f"{path}.node_ids"):
            if ok and (not node.startswith(f"{f['file']}::") or len(node) == len(f["file"]) + 2):
                c.add("node_id_outside_file", f"{path}.node_ids[{i}]",
                      f"{node!r} is not a test of {f['file']} (<file>::<test>)")
    if "select" in f:
        c.text(f["select"], f"{path}.select")
    if "node_ids" in f and "select" in f:
        c.add("narrowing_conflict", path, "give node_ids or select, not both")
    narrowed = "node_ids" in f or "select" in f
    if narrowed and not ("reason" in f and f["reason"].strip()):
        c.add("narrowing_without_reason", f"{path}.reason",
              "a narrowed correctness run must say why the rest of the file does not judge this workload")
    if "reason" in f and not narrowed:
        c.add("bad_value", f"{path}.reason", "a reason without node_ids or select narrows nothing")


def _canary_order(c: _Checker, order: List[Any], workloads: Dict[str, Dict[str, Any]]) -> None:
    p = "$.protocol.canary_order"
    canaries = [wid for wid, w in workloads.items() if w["canary"] is True]
    if not canaries:
        c.add("no_canary", "$.workloads", "no workload has canary: true; --selection all needs a canary")
    names: List[str] = []
    for i, name in c.strings(order, p, nonempty=bool(canaries)):
        if name not in workloads or workloads[name]["canary"] is not True:
            c.add("canary_order_mismatch", f"{p}[{i}]", f"{name!r} is not a workload with canary: true")
        elif name in names:
            c.add("canary_order_mismatch", f"{p}[{i}]", f"{name!r} is listed twice")
        names.append(name)
    missing = [wid for wid in canaries if wid not in names]
    if missing:
        c.add("canary_order_mismatch", p, f"lacks canary workload(s) {', '.join(missing)}")


def check(doc: Any) -> Dict[str, Any]:
    """`doc` when valid, else CampaignError with every problem."""
    problems = validate(doc)
    if problems:
        raise CampaignError(problems)
    return doc
