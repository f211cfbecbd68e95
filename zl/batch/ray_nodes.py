"""The node check of run_batch.py --executor ray: what each GPU node would run the batch's
cases with, and the driver's judgement of those facts.

Before the first case, one check task per alive GPU node (`node_check_task`) reports what
that node would run with: its FlagGems trees (each host states its own paths through the
environment it ran `ray start` in, FLAGGEMS_DIR / FLAGGEMS_VLLM_DIR, else the driver's
paths) with their identity (zl.batch.conditions.tree_identity), whether the cases'
interpreter passes zl/sh/kit.sh and imports triton and flag_gems (zl.preflight, on the GPU
Ray gave the task), the zl_bench checkout's identity, the device name/arch and the torch and
triton versions. The driver (`choose_nodes`, from zl.batch.ray_executor's
Cluster.check_nodes) refuses a node whose tree is not the driver's commit and working state
(exit 2) or that fails the preflight (exit 4), unless --ray-exclude-failing-nodes leaves
such nodes out; for timing batches it keeps only the nodes of the batch's device (the
device of most GPUs, --ray-device-name, or the one a --resume's batch recorded) unless
--allow-mixed-hardware, which marks the batch MIXED HARDWARE. batch.json records every
node, its facts, and why it was left out.

`python -m zl.batch.ray_nodes --probe BACKEND` is the node check's probe, run in the cases'
interpreter: it needs no Ray (only node_check_task, run as a Ray task, imports it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from zl.batch.inventory import REPO_ENV

# A node check imports torch, triton and flag_gems once (seconds; a cold NFS install, a
# minute); a node that has not answered by then (its GPUs held by another job) is failing.
NODE_CHECK_TIMEOUT_S = 600.0
PROBE_TAG = "ZL_NODE_PROBE "
# tree_identity's working-state digest of a git checkout without uncommitted changes
CLEAN_WORKTREE = "git-sha256:" + hashlib.sha256(b"\0\0").hexdigest()
EXCLUDE_OPTION = "--ray-exclude-failing-nodes"
MIXED_OPTION = "--allow-mixed-hardware"


class RayError(ValueError):
    """--executor ray cannot run: Ray missing, the cluster unreachable or without GPUs, a
    node holding another FlagGems tree, no node of the batch's device (exit 2)."""


class NodePreflightError(RuntimeError):
    """A GPU node failed its check (interpreter, zl_bench checkout, device) and no option
    leaves it out (exit 4, as the local interpreter check)."""


def stated_roots(environ: Mapping[str, str], driver_roots: Mapping[str, str]) -> Dict[str, Tuple[str, bool]]:
    """repo -> (this node's tree, whether the node stated it): the FLAGGEMS_DIR /
    FLAGGEMS_VLLM_DIR of the environment its `ray start` ran in (inherited by its Ray
    workers), else the driver's path. An empty value states nothing."""
    out = {}
    for repo, root in driver_roots.items():
        stated = environ.get(REPO_ENV[repo], "").strip()
        out[repo] = (os.path.realpath(stated or root), bool(stated))
    return out


def case_interpreter(env: Mapping[str, str]) -> str:
    """The interpreter run_pytest.sh picks (zl/sh/entry.sh): ZL_PYTHON, else python on PATH."""
    path = env.get("PATH")
    return (env.get("ZL_PYTHON") or shutil.which("python", path=path)
            or shutil.which("python3", path=path) or sys.executable)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][4:] if lines and lines[-1].startswith("!!! ") else (lines[-1] if lines else "")


def node_check_task(base_env: Dict[str, str], backend_name: str, driver_roots: Dict[str, str],
                    checkout: str) -> Dict:
    """What this node would run the batch's cases with, as facts for the driver to judge:
    its trees and their identity, the zl_bench checkout the cases run (`checkout`, the
    driver's path) and its identity, kit.sh's verdict on the cases' interpreter, and the
    probe's import check, device and versions on the GPU Ray gave this task."""
    import ray

    import zl
    from zl.backends import get_backend
    from zl.batch.conditions import tree_identity
    from zl.childenv import batch_case_environ, inherited

    node_id = ray.get_runtime_context().get_node_id()
    gpus = ray.get_gpu_ids()
    gpu = str(gpus[0]) if gpus else "0"
    facts: Dict = {"host": socket.gethostname(), "node_id": node_id, "gpu": gpu, "roots": {},
                   "stated": {}, "trees": {}, "missing": [], "problems": [], "zl_bench": None}
    # the worker's environment is its `ray start` environment: where this host keeps its trees
    for repo, (root, stated) in stated_roots(inherited(), driver_roots).items():
        facts["roots"][repo], facts["stated"][repo] = root, stated
        if os.path.isdir(root):
            facts["trees"][repo] = tree_identity(root)
        else:
            facts["missing"].append(f"{REPO_ENV[repo]}={root} "
                                    f"({'its ray start environment' if stated else 'the driver path'}) "
                                    "is not a directory on this host")
    worker_zl = str(Path(zl.__file__).resolve().parents[1])
    if worker_zl != str(Path(checkout).resolve()):
        facts["problems"].append(f"its Ray workers import zl_bench from {worker_zl}, not from {checkout}")
    kit = Path(checkout, "zl", "sh", "kit.sh")
    if not kit.is_file():
        facts["problems"].append(f"no zl_bench checkout at {checkout} on this host (the cases run it)")
        return facts
    facts["zl_bench"] = tree_identity(checkout)
    env = batch_case_environ(get_backend(backend_name), gpu, base_env,
                             {"ZL_BACKEND": backend_name, "FLAGGEMS_DIR": facts["roots"].get("main", "")})
    py = case_interpreter(env)
    facts["python"] = py
    try:
        kit_run = subprocess.run(["bash", "-c", 'PY="$1"; source "$2"', "zl-kit", py, str(kit)], env=env,
                                 cwd="/", capture_output=True, text=True, timeout=NODE_CHECK_TIMEOUT_S)
        if kit_run.returncode != 0:
            facts["problems"].append(_last_line(kit_run.stderr) or f"kit.sh exited {kit_run.returncode}")
            return facts
        # kit.sh passed: the interpreter imports this checkout's zl as installed
        probe = subprocess.run(
            [py, "-m", "zl.batch.ray_nodes", "--probe", backend_name], env=env, cwd="/",
            capture_output=True, text=True, timeout=NODE_CHECK_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        facts["problems"].append(f"cannot run the cases' interpreter {py}: {exc}")
        return facts
    found = [ln[len(PROBE_TAG):] for ln in probe.stdout.splitlines() if ln.startswith(PROBE_TAG)]
    if probe.returncode != 0 or not found:
        facts["problems"].append(f"{py} -m zl.batch.ray_nodes --probe exited {probe.returncode}: "
                                 + (_last_line(probe.stderr) or "no output"))
        return facts
    seen = json.loads(found[-1])
    if seen.get("error"):
        facts["problems"].append(seen["error"])
    else:
        facts.update({k: seen.get(k, "") for k in ("device_name", "device_arch", "torch", "triton")})
        if not facts["device_name"]:
            keys = get_backend(backend_name).visibility_env_keys
            facts["problems"].append(f"{py} sees no {backend_name} device "
                                     f"({keys[0] if keys else 'device'}={gpu}, as Ray gave the check)")
    return facts


def probe_main(argv: List[str]) -> int:
    """`--probe BACKEND` in the cases' interpreter: triton and flag_gems imported for real
    (zl.preflight.prepare_campaign, as the local batch's preflight), then the device name/arch
    as a run records them (zl.device) and the torch/triton versions, as one tagged JSON line."""
    from zl.backends import UnknownBackendError, get_backend
    from zl.childenv import inherited
    from zl.config import ConfigError
    from zl.preflight import PreflightFailed, prepare_campaign

    out: Dict[str, str] = {}
    try:
        backend = get_backend(argv[0] if argv else None)
        prepare_campaign(inherited(), "run_batch")
    except PreflightFailed as exc:
        out["error"] = exc.detail
    except (ConfigError, UnknownBackendError) as exc:
        out["error"] = str(exc)
    else:
        import torch
        import triton

        from zl.device import INTERPRETER_ARCH, triton_interpreted

        ident = backend.device_identity(torch)
        name, arch = ident.get("device_name", ""), ident.get("device_arch", "")
        if triton_interpreted():   # as DeviceSetup.probe records it
            name, arch = name or "cpu", INTERPRETER_ARCH
        out.update(device_name=name, device_arch=arch, torch=str(getattr(torch, "__version__", "")),
                   triton=str(getattr(triton, "__version__", "")))
    print(PROBE_TAG + json.dumps(out), flush=True)
    return 0


# ------------------------------------------------------------------ the driver's judgement

def tree_difference(var: str, node_tree: Mapping[str, str], driver_tree: Mapping[str, str]) -> str:
    """Why a node's tree is not the driver's ("" when it is): commit, then working state."""
    if node_tree.get("commit", "") != driver_tree.get("commit", ""):
        return (f"{var} {node_tree['path']} is at commit {node_tree.get('commit') or '(not a git checkout)'}, "
                f"the driver's {driver_tree['path']} at {driver_tree.get('commit') or '(not a git checkout)'}")
    if node_tree.get("worktree") == driver_tree.get("worktree"):
        return ""
    if not node_tree.get("commit"):
        return (f"{var} {node_tree['path']} differs from the driver's {driver_tree['path']} in its files' "
                "sizes or mtimes (not a git checkout: copy it with rsync -a / cp -p, or use git)")
    node_dirty = node_tree.get("worktree") != CLEAN_WORKTREE
    driver_dirty = driver_tree.get("worktree") != CLEAN_WORKTREE
    how = ("has uncommitted changes (a dirty tree); the driver's has none" if node_dirty and not driver_dirty
           else "has no uncommitted changes; the driver's has some" if driver_dirty and not node_dirty
           else "has other uncommitted changes than the driver's")
    from zl.batch.conditions import changed_note   # the paths each side changes, where recorded
    note = changed_note(node_tree, driver_tree, "the node", "the driver")
    return f"{var} {node_tree['path']} at the same commit {how} ({driver_tree['path']}" + (
        f"; {note})" if note else ")")


def judge_node(facts: Dict, driver_trees: Mapping[str, Mapping[str, str]],
               driver_zl: List[Mapping[str, str]]) -> Tuple[List[str], List[str]]:
    """(tree problems: exit 2, preflight problems: exit 4) of one node's facts. The FlagGems
    trees must equal batch.json's conditions; the zl_bench checkout, the driver's as it was
    before or after the check (`driver_zl`: one checkout edited while the nodes looked at it
    is still one checkout)."""
    trees = list(facts.get("missing", []))
    for repo, drv in sorted(driver_trees.items()):
        mine = facts.get("trees", {}).get(repo)
        if mine is not None:
            diff = tree_difference(REPO_ENV[repo], mine, drv)
            if diff:
                trees.append(diff + (" (stated by its ray start environment)" if facts["stated"].get(repo) else ""))
    problems = list(facts.get("problems", []))
    mine = facts.get("zl_bench")
    if mine is not None:
        diffs = [tree_difference("zl_bench", mine, drv) for drv in driver_zl]
        diff = diffs[-1] if all(diffs) else ""
        if diff:
            problems.append(diff.replace("zl_bench ", "the zl_bench checkout ", 1))
    return trees, problems


def label(facts: Dict) -> str:
    return f"{facts.get('host', '?')} (node {facts.get('node_id', '?')[:8]})"


def device_of(facts: Dict) -> Tuple[str, str]:
    return facts.get("device_name", ""), facts.get("device_arch", "")


def shown(device: Tuple[str, str]) -> str:
    return f"{device[0] or '?'} (arch {device[1] or '?'})"


def batch_device(nodes: List[Dict], wanted: Optional[str], recorded: Optional[Dict]) -> Tuple[str, str]:
    """The device a timing batch runs on: the one its start recorded (a --resume), else
    --ray-device-name (its arch: that of most GPUs of that name), else the device of most
    GPUs among the checked nodes, ties by name. Ray's node order is not stable, so "the
    first node" would pick a different device from one call to the next."""
    if recorded:
        return recorded.get("name", ""), recorded.get("arch", "")
    weight = Counter()
    for f in nodes:
        if wanted is None or f.get("device_name") == wanted:
            weight[device_of(f)] += f.get("gpus", 1)
    if not weight:
        return wanted or "", ""
    return sorted(weight.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def recorded_device(started: Mapping) -> Optional[Dict]:
    """The device batch.json's first Ray call chose, or None."""
    for call in started.get("calls") or []:
        dev = (call.get("ray") or {}).get("device")
        if dev:
            return dev
    return None


def choose_nodes(facts: List[Dict], driver_trees: Mapping[str, Mapping[str, str]],
                 driver_zl: List[Mapping[str, str]], wanted: Optional[str], recorded: Optional[Dict], *,
                 timing: bool, exclude: bool, allow_mixed: bool) -> Tuple[Tuple[str, str], List[Dict]]:
    """(the batch's device, the nodes the cases may use) from every GPU node's facts; sets each
    node's "status" (used/excluded) and "reason". Refuses (RayError, exit 2: a node holds
    another FlagGems tree, no node of the batch's device; NodePreflightError, exit 4: a node
    failed its check) what `exclude` (--ray-exclude-failing-nodes) and `allow_mixed`
    (--allow-mixed-hardware) do not leave out or let in."""
    tree_bad, pre_bad, good = [], [], []
    for f in facts:
        trees, problems = judge_node(f, driver_trees, driver_zl)
        f["reason"] = "; ".join(trees + problems)
        (tree_bad if trees else pre_bad if problems else good).append(f)
    refused = tree_bad + pre_bad
    if refused and not exclude:
        lines = "\n  ".join(f"{label(f)}: {f['reason']}" for f in refused)
        what = "holds another FlagGems tree" if tree_bad else "failed its check"
        msg = (f"--executor ray: {len(refused)} of {len(facts)} GPU node(s) refused before any case "
               f"(a node {what}); nothing was run:\n  {lines}\nFix those nodes, or leave them out "
               f"with {EXCLUDE_OPTION}")
        raise (RayError if tree_bad else NodePreflightError)(msg)
    for f in refused:
        f["status"] = "excluded"
    if not good:
        raise NodePreflightError(f"--executor ray: no GPU node passed its check ({len(facts)} refused, "
                                 "each named above); nothing was run")
    device = batch_device(good, wanted, recorded)
    other = [f for f in good if device_of(f) != device]
    used = [f for f in good if device_of(f) == device]
    if timing and not allow_mixed:
        for f in other:
            f["status"], f["reason"] = "excluded", (f"its device {shown(device_of(f))} is not the batch's "
                                                    f"{shown(device)} (timings compare only on one device; "
                                                    f"{MIXED_OPTION} runs on it and marks the batch)")
        if not used:
            raise RayError(f"--executor ray: no checked GPU node has the batch's device {shown(device)} "
                           + ("(batch.json)" if recorded else "(--ray-device-name)")
                           + "; the nodes have: " + ", ".join(sorted({shown(device_of(f)) for f in good}))
                           + f"; give {MIXED_OPTION} to run on them (the batch is then MIXED HARDWARE)")
    else:
        used = good
    for f in used:
        f["status"] = "used"
    return device, used


if __name__ == "__main__":
    if sys.argv[1:2] != ["--probe"]:
        print("usage: python -m zl.batch.ray_nodes --probe BACKEND (run_batch.py's node check)",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(probe_main(sys.argv[2:]))
