"""What a batch measures under, fixed at its start: a --resume must match it.

A resumed batch reuses its PASS/SKIP cases untouched and runs the rest, and every table
then reads as one batch. That is only true when the reused and the new cases ran under
the same conditions, so batch.json stores them at the start (`conditions`) and a --resume
recomputes them and refuses (exit 2) naming every field that differs:

- the options that change what a case measures: backend, --dtypes, --shape-file (its path
  and a sha256 of its content), --replay-root, --switch, --use-flagtune, --retune (recorded
  only when given: a batch without side C reads as every batch before it did), --rounds
  (recorded only when > 1, for the same reason), --dtype-fallback (recorded only when
  `first`: a batch.json without it reads as `all`, the only policy before it existed);
- the environment variables of README's table that change what a case measures
  (MEASURED_ENV), as the cases will see them;
- the compiler's knobs the cases inherit (`compiler_env`: TRITON_*, FLAGTREE_*, MLIR_*,
  LLVM_*, DISABLE_LLVM_OPT, less TRITON_CACHE_DIR and TRITON_HOME, COMPILER_ENV): a resume
  or a baseline under another compiler setting would mix two compilers' cases in one table;
- the toolchain in the cases' interpreter (`toolchain`): Python's version, torch's version, and
  Triton's version and package directory with a stat digest of its files (a FlagTree rebuilt
  or reinstalled under the same version string changes the digest; no import, milliseconds);
- each FlagGems tree (FLAGGEMS_DIR, FLAGGEMS_VLLM_DIR): its resolved path and
  * in a git checkout (the directory is the repository's top): HEAD's commit and a sha256 of
    `git status --porcelain` plus `git diff HEAD` (uncommitted edits and new files count),
    with the paths they name (`changed`, sorted, the first CHANGED_CAP, and `changed_total`):
    the digest is what is compared, the paths only say what differs (`differences` names the
    paths only one record changes; a record without them still compares by its digest);
  * otherwise a sha256 over every file's relative path, size and mtime (caches skipped:
    TREE_SKIP_DIRS, *.pyc). Stat-only, so it costs milliseconds on a 3,000-file tree; an
    edit changes it, and so does re-copying the tree to the same path (refused: a resume
    cannot tell a copy from a change, and refusing is the safe side).
  Either way the files FlagGems' own benchmark runs write into the tree (RUN_BYPRODUCTS) do
  not count: a batch's own cases must not turn its tree into another one.
- `ir_collection`: the IR collector's rules for which launches are the operator's
  (zl.ir.RULES; a record without it was written under rules 1, and its side A
  fingerprints may hold the autotuner's post-sweep reset, which a replay never runs);
- the GPU model of the devices the cases run on (`device`: {"models": the distinct names,
  sorted, or null where no query names one: no GPU, a runtime without a name query}): the
  backend's name query (nvidia-smi) on the batch's devices, or --executor ray's node check.
  It is recorded once the devices are placed and checked on its own (check_device): a
  --resume whose devices name other models (or none, or some where the batch named none)
  exits 2 naming both.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from zl.childenv import batch_case_base
from zl.flaggems import UPSTREAM_SHAPE_WORDS, VENDOR_ENV_KEYS, checkout_commit
from zl.ir import RULES as IR_RULES
# run_batch.py --dtype-fallback's default, the policy of every batch before the option (never recorded)
from zl.shapes.dtype_fallback import DEFAULT as DTYPE_FALLBACK_DEFAULT
from zl.switches import SwitchError, env_switch

# Inherited by every case and read by run_pytest.sh or a plugin to decide what is measured
# (README's variables table). Values are compared as the cases get them, unset included.
MEASURED_ENV = (
    "BENCH_LEVEL", "USE_FLAGTUNE", "ZL_ISOLATE_TUNER_CACHE", "ZL_ENABLE_AUTOTUNE", "ZL_ENABLE_IR",
    "ZL_ENABLE_MM_CLUSTER", "ZL_ENABLE_CUDAGRAPH", "ZL_DIRECT_REPEAT", "ZL_EXTRA_PLUGINS",
    "ZL_SEED", "ZL_ENABLE_RESULTS", "ZL_GRAPH_WARMUP_MS", "ZL_L2", "ZL_COLD_CLOCK", "ZL_IR_LEVELS",
    "ZL_TIME_TORCH", "ZL_JUDGE_ONLY", "ZL_IR_STRIP_ATTRS",
    "ZL_MUSA_COMPAT", "ZL_PYTHON", *VENDOR_ENV_KEYS,
)
# The compiler's own knobs (Triton's, FlagTree's, MLIR's and LLVM's variables and
# DISABLE_LLVM_OPT) change what is compiled: a TRITON_DEBUG=1 screen read IR_CHANGED@ttgir on 36
# of 40 nodes on an H200 (docs/validation/batch.md). Recorded as the cases inherit them (`compiler_env`),
# less the locations each case gets its own of (TRITON_CACHE_DIR: zl.childenv) or that hold
# no setting (TRITON_HOME).
COMPILER_ENV = re.compile(r"^(TRITON_|FLAGTREE_|MLIR_|LLVM_)|^DISABLE_LLVM_OPT$")
COMPILER_ENV_LOCATIONS = ("TRITON_CACHE_DIR", "TRITON_HOME")
TREE_SKIP_DIRS = (".git", "__pycache__", ".pytest_cache", ".mypy_cache")
UNSET = "<unset>"
# Files that FlagGems' own benchmark runs write into the FlagGems tree (paths relative to its
# top). The contract: such a file is the output of running the benchmarks, never a source, and
# nothing in FlagGems reads it back to decide what runs; tree_identity leaves it out (a git
# pathspec exclude, or skipped by stat_digest), so a batch's cases cannot change the identity
# of the tree they ran in. Measured: benchmark/test_blas_perf_parallel.py (FlagGems ed2508bc,
# `_get_error_shape_output_path` / `_record_failed_shape`) writes
# os.path.abspath("FlagTune/error_shape.yaml") under the lock file FlagTune/.error_output.lock,
# relative to the cwd (a case's is the FlagGems root), whenever a shape errors. A 200-node
# run_batch.py --judge baseline on an H100 left both untracked, and its own
# --judge-first --baseline screen was refused for another flaggems.main.worktree.
# Any other untracked file still counts: a new source file is another tree.
RUN_BYPRODUCTS = ("FlagTune/error_shape.yaml", "FlagTune/.error_output.lock")
# a git tree identity's `changed` holds at most this many paths (`changed_total`: all of them)
CHANGED_CAP = 50
# the keys of a tree identity that explain a working-state difference: never compared (the
# digest says whether two trees differ; records from before them hold none)
EXPLAINING = ("changed", "changed_total")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _git(root: str, *args: str) -> bytes:
    try:
        return subprocess.run(["git", "-C", root, *args], capture_output=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return b""


def stat_digest(root: Path, skip: Sequence[str] = ()) -> str:
    """sha256 over (relative path, size, mtime_ns) of every file under `root`, sorted; the
    relative paths in `skip` left out."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in TREE_SKIP_DIRS and not d.endswith(".egg-info"))
        for name in filenames:
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if rel in skip:
                continue
            try:
                st = path.stat()
            except OSError:     # a dangling link or a file removed while walking
                continue
            entries.append(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}")
    return _sha256("\n".join(sorted(entries)).encode("utf-8", errors="surrogateescape"))


def porcelain_paths(status: bytes) -> List[str]:
    """The paths `git status --porcelain=v1 -z` names (a rename: both), sorted, once each."""
    fields = status.decode("utf-8", errors="replace").split("\0")
    out, i = set(), 0
    while i < len(fields):
        item = fields[i]
        if len(item) > 3:
            out.add(item[3:])
            if item[0] in "RC" and i + 1 < len(fields):   # a rename's next field is its old path
                i += 1
                out.add(fields[i])
        i += 1
    return sorted(p for p in out if p)


def tree_identity(root: str) -> Dict[str, Any]:
    """The identity of one FlagGems tree (see the module docstring)."""
    path = str(Path(root).resolve())
    commit = checkout_commit(path)
    if commit:
        # the whole tree (":/") but RUN_BYPRODUCTS; a tree without them hashes as before
        spec = ("--", ":/", *(f":(top,exclude,literal){p}" for p in RUN_BYPRODUCTS))
        status = _git(path, "status", "--porcelain=v1", "-z", "--untracked-files=all", *spec)
        worktree = _sha256(status + b"\0\0" + _git(path, "diff", "HEAD", "--binary", *spec))
        changed = porcelain_paths(status)
        return {"path": path, "commit": commit, "worktree": f"git-sha256:{worktree}",
                "changed": changed[:CHANGED_CAP], "changed_total": len(changed)}
    return {"path": path, "commit": "",
            "worktree": f"stat-sha256:{stat_digest(Path(path), RUN_BYPRODUCTS)}"}


class ShapeFileError(ValueError):
    """--shape-file names a file that cannot be read."""


def shape_file_identity(value: str, cwd: Optional[Path] = None) -> Dict[str, str]:
    """{"shape_file": what the cases get, "shape_file_sha256": its content's digest or ""}.
    A path is made absolute (cases run in their batch directory, not the caller's)."""
    value = (value or "").strip()
    if not value or value.lower() in UPSTREAM_SHAPE_WORDS:
        return {"shape_file": value, "shape_file_sha256": ""}
    path = Path(cwd or Path.cwd(), value).resolve()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ShapeFileError(f"--shape-file {value}: cannot read {path}: {exc.strerror or exc}") from None
    return {"shape_file": str(path), "shape_file_sha256": _sha256(data)}


# Run in the cases' interpreter: where triton and torch would be imported from and the
# versions their distributions declare, without importing either (torch alone costs seconds).
_TOOLCHAIN_PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, sys
owners = md.packages_distributions()
out = {"python": sys.version.split()[0]}
for mod in ("triton", "torch"):
    spec = iu.find_spec(mod)
    if spec is None or not spec.submodule_search_locations:
        out[mod] = {"path": "", "version": ""}
        continue
    version = ""
    for dist in owners.get(mod, []):
        try:
            version = md.version(dist)
            break
        except md.PackageNotFoundError:
            pass
    out[mod] = {"path": list(spec.submodule_search_locations)[0], "version": version}
print(json.dumps(out))
"""


def toolchain_identity(python: str, env: Mapping[str, str]) -> Dict[str, Any]:
    """{"python", "torch": {path, version}, "triton": {path, version, files}} as the cases'
    interpreter sees them; `files` is triton's package stat digest. A probe that fails is
    recorded as such (`probe_error`): the interpreter check that follows names the problem."""
    try:
        proc = subprocess.run([python, "-c", _TOOLCHAIN_PROBE], env=dict(env), capture_output=True,
                              text=True, timeout=120)
        found = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        found = None
    if not isinstance(found, dict):
        return {"probe_error": f"{python} could not report its triton and torch"}
    triton = found.get("triton") or {}
    if triton.get("path"):
        triton["files"] = f"stat-sha256:{stat_digest(Path(triton['path']))}"
    return found


def measured_env(environ: Mapping[str, str]) -> Dict[str, str]:
    return {k: environ[k].strip() for k in MEASURED_ENV if k in environ}


def compiler_env(environ: Mapping[str, str]) -> Dict[str, str]:
    """The compiler knobs among these variables (COMPILER_ENV), as the cases get them."""
    return {k: environ[k] for k in sorted(environ)
            if COMPILER_ENV.match(k) and k not in COMPILER_ENV_LOCATIONS}


def collect(*, backend: str, dtypes: str, shape: Dict[str, str], replay_root: str, switch: str,
            use_flagtune: bool, case_env: Mapping[str, str], roots: Mapping[str, str],
            toolchain: Mapping[str, Any], retune: bool = False, rounds: int = 1,
            dtype_fallback: str = DTYPE_FALLBACK_DEFAULT) -> Dict[str, Any]:
    """The conditions record of batch.json; `case_env` is the environment cases inherit."""
    return {
        "backend": backend, "dtypes": dtypes, **shape, "replay_root": replay_root,
        "switch": switch, "use_flagtune": bool(use_flagtune),
        **({"retune": True} if retune else {}),
        **({"rounds": rounds} if rounds > 1 else {}),
        **({"dtype_fallback": dtype_fallback} if dtype_fallback != DTYPE_FALLBACK_DEFAULT else {}),
        "environment": measured_env(case_env),
        "compiler_env": compiler_env(case_env),
        "toolchain": dict(toolchain),
        "flaggems": {repo: tree_identity(root) for repo, root in sorted(roots.items())},
        "ir_collection": IR_RULES,
    }


class DtypeFallbackError(ValueError):
    """--dtype-fallback first without --dtypes, or a --resume that changes the policy (exit 2)."""


def settle_dtype_fallback(args, started: Mapping[str, Any]) -> None:
    """`args.dtype_fallback` settled: left out, the batch's (a batch.json without the field:
    `all`; a fresh batch: `all`). Refused (DtypeFallbackError): `first` without --dtypes (it
    acts only where upstream refuses the dtypes asked: with none asked it would change
    nothing but the caliber); a --resume that changes it: the reused cases of an int-only op
    measured one dtype set, the rerun ones another, in one table."""
    before = started.get("conditions", {}).get("dtype_fallback", DTYPE_FALLBACK_DEFAULT)
    if args.dtype_fallback is None:
        args.dtype_fallback = before
    if args.dtype_fallback != DTYPE_FALLBACK_DEFAULT and not (args.dtypes or "").replace(",", " ").split():
        raise DtypeFallbackError(f"--dtype-fallback {args.dtype_fallback} picks the dtype measured where "
                                 "upstream refuses --dtypes; give --dtypes (e.g. --dtypes float16), or drop it")
    if args.resume and args.dtype_fallback != before:
        raise DtypeFallbackError(f"--resume: the batch was started with --dtype-fallback {before}, this call "
                                 f"gives --dtype-fallback {args.dtype_fallback}; an op that refuses --dtypes "
                                 "measures other dtypes under each: resume with the batch's, or start a "
                                 "new --batch-dir")


class RetuneError(ValueError):
    """--retune without a --switch screen, or a --resume that adds or drops it (exit 2)."""


def settle_retune(args, started: Mapping[str, Any]) -> None:
    """`args.retune` settled: left out, the batch's (a fresh batch: off). Refused (RetuneError):
    --retune without --switch (side C is the switch on, tuned live, beside a screen's A and B);
    --retune with ZL_ISOLATE_TUNER_CACHE off (a shared FlagGems tuner store hands one run's
    winners to the next: side C would replay A's picks, not tune); a --resume that adds or
    drops it: side C runs for every case of a batch or for none, or the report would give
    A vs C for part of its nodes only."""
    before = bool(started.get("conditions", {}).get("retune", False))
    if args.retune is None:
        args.retune = before
    if args.retune and not args.switch:
        raise RetuneError("--retune adds side C to a --switch screen (the switch on, tuned live); "
                          "give --switch NAME, or drop --retune")
    if args.retune:   # a shared FlagGems tuner store hands side A's winners to side C
        try:
            isolated = env_switch("ZL_ISOLATE_TUNER_CACHE", True, batch_case_base())
        except SwitchError as exc:
            raise RetuneError(str(exc)) from None
        if not isolated:
            raise RetuneError("--retune with ZL_ISOLATE_TUNER_CACHE off: side C would read side A's "
                              "winners from the shared FlagGems tuner store instead of tuning; unset "
                              "it (a batch's default is 1)")
    if args.resume and args.retune != before:
        raise RetuneError("--resume: the batch was started " + ("with" if before else "without")
                          + " --retune, this call " + ("drops it (--no-retune)" if before else "adds it")
                          + "; side C runs for every case of a batch or for none: resume as it "
                          "started, or start a new --batch-dir")


class RoundsError(ValueError):
    """--rounds not an integer >= 1, R > 1 outside a timed --switch screen, or a --resume that
    changes R (exit 2)."""


def parse_rounds(text) -> int:
    """--rounds as given on the command line: an integer >= 1, else RoundsError."""
    try:
        value = int(str(text).strip())
    except ValueError:
        raise RoundsError(f"--rounds must be an integer >= 1 (got {text!r})") from None
    if value < 1:
        raise RoundsError(f"--rounds must be an integer >= 1 (got {text!r}); 1 = the pair alone")
    return value


def refuse_rounds(rounds: Optional[int], switch: Optional[str], judge: Optional[bool],
                  share_device: Optional[int]) -> None:
    """RoundsError where R > 1 cannot measure (a value still None is not checked): rounds are
    timed repeats of a --switch pair, so they need --switch, and a --judge batch (nothing
    timed) or --share-device N > 1 (timings refused by every comparison) would spend R - 1
    more runs per case on numbers no report may read."""
    if rounds is None or rounds == 1:
        return
    if switch is not None and not switch:
        raise RoundsError(f"--rounds {rounds} repeats a --switch pair; give --switch NAME, or drop --rounds")
    if judge:
        raise RoundsError(f"--rounds {rounds} with --judge: nothing is timed, so later rounds measure "
                          "nothing; drop one of them (with --judge-first, rounds apply to the timed stage)")
    if share_device is not None and share_device > 1:
        raise RoundsError(f"--rounds {rounds} with --share-device {share_device}: shared-device timings "
                          "are refused by every comparison; drop one of them")


def settle_rounds(args, started: Mapping[str, Any]) -> None:
    """`args.rounds` settled: left out, the batch's (a fresh batch: 1), then refuse_rounds on
    the settled options. A --resume that changes R is refused (RoundsError): every case of a
    batch has the same rounds, or its report would mix R-round and shorter nodes."""
    before = int(started.get("conditions", {}).get("rounds", 1))
    if args.rounds is None:
        args.rounds = before
    refuse_rounds(args.rounds, args.switch or "", bool(args.judge), args.share_device)
    if args.resume and args.rounds != before:
        raise RoundsError(f"--resume: the batch was started with --rounds {before}, this call gives "
                          f"--rounds {args.rounds}; every case of a batch has the same rounds: resume "
                          "with its own, or start a new --batch-dir")


def _flat(obj: Any, prefix: str = "") -> Dict[str, Any]:
    if isinstance(obj, dict):
        out: Dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


# sections a conditions record has held since some release: a record without one was written
# before it (its difference lines then read `batch '<unset>'` for every field of it)
LATER_SECTIONS = ("toolchain", "device", "ir_collection", "compiler_env")
DEVICE = "device"


class DeviceModelError(ValueError):
    """A --resume whose devices are another GPU model than the batch's start, or whose
    batch.json predates the device section (exit 2)."""


def device_section(models: Optional[Sequence[str]]) -> Dict[str, Any]:
    """conditions' `device`: the distinct model names, sorted; None when none is named."""
    names = sorted({str(m).strip() for m in models or () if str(m).strip()})
    return {"models": names or None}


def models_text(models: Optional[Sequence[str]]) -> str:
    return " + ".join(models) if models else "no GPU model (no device query named one)"


def check_device(stored: Mapping[str, Any], now: Mapping[str, Any], where: str,
                 older_ray: Optional[str] = None) -> None:
    """DeviceModelError unless `now` (device_section of this call's devices, found as `where`
    says) names the models `stored` (the batch's conditions) recorded. A record without the
    section proves no model, unless `older_ray` (the device an --executor ray call of the batch
    recorded in its node check) names it: then that one is the batch's."""
    if DEVICE in stored:
        before = (stored[DEVICE] or {}).get("models")
    elif older_ray:
        before = [older_ray]
    else:
        raise DeviceModelError(f"--resume: batch.json records no GPU model (the record predates the "
                               f"device section): nothing shows that its cases ran on this call's "
                               f"{models_text(now.get('models'))} ({where}); nothing was run. Start a "
                               "new --batch-dir")
    if before != now.get("models"):
        raise DeviceModelError(f"--resume: the batch was started on {models_text(before)} (batch.json "
                               f"conditions.device), this call's devices are {models_text(now.get('models'))} "
                               f"({where}); nothing was run. Its timings compare only within one GPU "
                               "model: resume on the batch's model, or start a new --batch-dir")


def older_record_note(stored: Mapping[str, Any]) -> str:
    """A line saying that `stored` predates a recorded section, or ""."""
    missing = [k for k in LATER_SECTIONS if k not in stored]
    return (f"\n(the record predates the {', '.join(missing)} section{'s' if len(missing) > 1 else ''}: "
            "nothing shows that its cases ran under this call's)" if missing else "")


def _shown(paths: Sequence[str], limit: int = 10) -> str:
    return ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _only(mine: Sequence[str], theirs: Sequence[str], theirs_total: int) -> List[str]:
    """Paths of `mine` that `theirs` lacks; where `theirs` is capped, only those it would list."""
    capped = theirs_total > len(theirs) and theirs
    return [p for p in mine if p not in set(theirs) and not (capped and p > theirs[-1])]


def changed_note(a: Mapping[str, Any], b: Mapping[str, Any], a_label: str, b_label: str) -> str:
    """What two tree identities' `changed` lists say about their working states: the paths
    only one of them changes; "" when neither has a list (a stat digest, older records)."""
    la, lb = a.get("changed"), b.get("changed")
    if la is None and lb is None:
        return ""
    if la is None or lb is None:
        older, newer, paths = (a_label, b_label, lb) if la is None else (b_label, a_label, la)
        return (f"{older}'s record predates the list of changed paths; {newer} changes "
                + (_shown(paths) if paths else "no path"))
    ta, tb = int(a.get("changed_total", len(la))), int(b.get("changed_total", len(lb)))
    only_a, only_b = _only(la, lb, tb), _only(lb, la, ta)
    parts = [f"only in {label}: {_shown(paths)}" for label, paths in ((b_label, only_b), (a_label, only_a))
             if paths]
    if not parts:
        parts.append(f"both change {_shown(la)}, in other content" if la else "neither changes a path")
    if ta > len(la) or tb > len(lb):
        parts.append(f"lists capped at {CHANGED_CAP}: {a_label} changes {ta} path(s), {b_label} {tb}")
    return "; ".join(parts)


def _explains(key: str) -> bool:
    """Whether a flattened key is a tree identity's EXPLAINING key (never compared)."""
    parts = key.split(".")
    return len(parts) == 3 and parts[0] == "flaggems" and parts[2] in EXPLAINING


def differences(stored: Mapping[str, Any], now: Mapping[str, Any], stored_label: str = "batch",
                now_label: str = "this call") -> List[str]:
    """One line per field that differs, `field: <stored_label> <stored>, <now_label> <now>`;
    a FlagGems tree's working state adds the paths that differ (changed_note)."""
    a, b = _flat(dict(stored)), _flat(dict(now))
    out = []
    for key in sorted(set(a) | set(b)):
        if _explains(key) or a.get(key, UNSET) == b.get(key, UNSET):
            continue
        line = f"{key}: {stored_label} {a.get(key, UNSET)!r}, {now_label} {b.get(key, UNSET)!r}"
        if key.startswith("flaggems.") and key.endswith(".worktree"):
            tree = key[: -len("worktree")]
            note = changed_note({k: a[tree + k] for k in EXPLAINING if tree + k in a},
                                {k: b[tree + k] for k in EXPLAINING if tree + k in b}, stored_label, now_label)
            line += f" ({note})" if note else ""
        out.append(line)
    return out
