"""Run a frozen validation campaign serially on one device, with receipts per task, per
workload and for the campaign; or (--reaccount) reclassify a sealed one under a changed rule.

Refused before any task (exit 2, each problem named) unless the frozen files hash as bound;
zl_bench, the FlagGems tree and Triton are the manifest's sources without tracked edits (zl_bench
may be a later commit that changed only campaigns/; Triton is identified by its checkout, pip's
record of its commit, or source.triton_package_sha256); flag_gems imports from the frozen tree; and
through --device exactly the declared devices of device.model are visible and idle (nvidia-smi's
compute-apps query, before every task too). A run with --skip-device-checks REASON or
--benchmark-script SCRIPT says so in every receipt, and its canary never authorises --selection all.

Each task is a fresh run_pytest.sh under zl.supervise, tied to the runner: the baseline records
autotune configs, controls and candidates replay them (a fallback fails the task). A control that
does not compile to the baseline's code at every fingerprint level, binary included, stops the
campaign: its control plane is broken (exit 4). Candidates run their FlagGems tests (the baseline's
too where theirs fail); the reverse order runs only where a candidate acted; workloads are
classified (zl.frozen.CLASSES). A rerun resumes: a task with a receipt is never run again, and only
on the physical device and under the inherited compiler and import variables (MATTERS) that ran the
sealed ones.

Examples:
  python -m zl.frozen.run runs/frozen_canary --device 0
  python -m zl.frozen.run runs/frozen_all --device 0 --budget-s 420     # rerun to resume
  python -m zl.frozen.run runs/frozen_all --reaccount runs/reaccount_floor2 --launch-floor 2

Outputs:
  In the frozen directory: tasks/<workload>/<cell>/ holding run/, benchmark.log, correctness/
  and task-receipt.json (argv, variables set, identity fields, rows, fingerprints, convert
  counts, code and results against the baseline, correctness, status, timings);
  tasks/<workload>/workload-receipt.json (each candidate's class, why, evidence);
  campaign-receipt.json and campaign-summary.md (sources, device, rule, counts per class,
  links); a canary's canary-receipt.json. --reaccount OUT: OUT/reaccount.json and .md only.

Exit codes:
  0  every task sealed (a canary: its gate passed), or the reaccount written
  1  a canary ran to the end and its gate failed (canary-receipt.json says failed)
  2  usage, or refused before a task, or the device turned busy (`!!! <code> at <where>: <what>`)
  3  stopped at --budget-s with tasks left: rerun the same command to resume
  4  control plane broken: a control did not reproduce the baseline's code; the campaign stopped
  128+N  stopped by signal N: rerun the same command to resume
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from zl import atomic, cli_help, locks, preflight, screen_verdict
from zl.backends import ALL_VISIBILITY_KEYS, get_backend
from zl.childenv import inherited, tuner_store
from zl.flaggems import VENDOR_ENV_KEYS
from zl.frozen import (CAMPAIGN_RECEIPT, CANARY_RECEIPT, CLASSES, GATE_CLASSES, RUN_LOCK, SUMMARY,
                       WORKLOAD_RECEIPT, CampaignError, Problem, canary_receipt, classify_workload,
                       flaggems_source, load_frozen, read_json, responded, rule_of, sha256, triton_source,
                       zl_bench_source)
from zl.frozen.freeze import PYTHON
from zl.frozen.manifest import RESPONSES, RUNNER_VARIABLES, env_changes, is_zl_variable
from zl.ir import fingerprint as fp
from zl.results import compare as results
from zl.runlog import caliber
from zl.runlog.parse import RunLogError, parse_log_bytes

REPO_ROOT = Path(__file__).resolve().parents[2]
TASK_KIND, WORKLOAD_KIND, CAMPAIGN_KIND = ("zl_bench.frozen_task_receipt", "zl_bench.frozen_workload_receipt",
                                           "zl_bench.frozen_campaign_receipt")
# Inherited variables that can change what is compiled or imported: recorded, never dropped.
MATTERS = re.compile(r"^(TRITON_|FLAGTREE_|FLAGGEMS_|MLIR_|LLVM_|DISABLE_LLVM_OPT$|PYTHONPATH$|LD_)")
IDENTITY_FIELDS = ("run_id", "autotune_mode", "autotune_record_digest", "replay_source_dir", "replay_source_run_id",
                   "replay_record_digest", "replay_fallback_scope", "device", "device_name", "device_arch", "timer",
                   "triton_version", "torch_version", "flag_gems_version", "finished")
COUNT_RE = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)\b")


def _workloads(matrix: Mapping[str, Any]) -> Dict[str, List[Dict[str, Any]]]:
    """Each workload's tasks, in matrix order."""
    order = dict.fromkeys(t["workload"] for t in matrix["tasks"])
    return {w: [t for t in matrix["tasks"] if t["workload"] == w] for w in order}


class Stopped(Exception):
    """A signal asked the runner to stop: its child is stopped, exit 128+N."""


def _last_words(log: str) -> str:
    """The line of a log that says why it ended: its last `!!!` line, else its last line."""
    try:
        lines = [ln.strip() for ln in Path(log).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return next((ln for ln in reversed(lines) if ln.startswith("!!!")), lines[-1] if lines else "empty log")


class Campaign:
    """One frozen directory being run: its files, the options, the environment and receipts."""

    def __init__(self, frozen: Path, args: Any):
        self.dir, self.args = frozen.resolve(), args
        self.doc, self.matrix, raw = load_frozen(self.dir)
        self.matrix_sha, self.rule = sha256(raw), rule_of(self.doc)
        self.backend = get_backend(self.doc["device"]["backend"])
        self.tree, self.baseline = self.matrix["resolved"]["flaggems_dir"], self.matrix["cells"][0]["name"]
        self.unverified = [f"device checks skipped: {args.skip_device_checks}"] * bool(args.skip_device_checks) + \
            [f"benchmark replaced by {args.benchmark_script} (--benchmark-script)"] * bool(args.benchmark_script)
        dropped = [k for k in inherited() if k in RUNNER_VARIABLES or is_zl_variable(k) or k in ALL_VISIBILITY_KEYS]
        # The manifest states every measurement condition: an inherited zl_bench variable it
        # does not set would change the campaign without a trace in it.
        self.base_env = {k: v for k, v in inherited().items() if k not in dropped}
        self.inherited = {"dropped": sorted(dropped),
                          "recorded": {k: v for k, v in sorted(self.base_env.items()) if MATTERS.match(k)}}
        self.receipts: Dict[str, Dict[str, Any]] = {}   # task id -> its receipt, once sealed
        self.child: Optional[subprocess.Popen] = None

    def env(self, values: Mapping[str, str], scratch: Optional[str] = None) -> Dict[str, str]:
        env = self.backend.apply_visibility(dict(self.base_env), self.args.device)
        env.update(values, ZL_PYTHON=self.args.python, ZL_DEVICE=self.args.device, PYTHONUNBUFFERED="1")
        if scratch:   # a correctness run or the probe: no zl_bench plugin sets these for it
            env.update({VENDOR_ENV_KEYS[0]: self.backend.flaggems_vendor, "TRITON_CACHE_DIR": f"{scratch}/triton",
                        **tuner_store(f"{scratch}/tuner", "zl_frozen.db")})
        return env

    def set_by_runner(self, env: Mapping[str, str]) -> Dict[str, str]:
        """The variables of a child's environment that are not the inherited ones: the receipt's."""
        return {k: v for k, v in sorted(env.items()) if self.base_env.get(k) != v}

    def preflight(self) -> Dict[str, Any]:
        problems: List[Problem] = []
        for t in self.matrix["tasks"]:
            path = Path(t["receipt"])
            if self.dir not in path.parents or (not self.args.benchmark_script
                                                and t["benchmark"]["argv"][1] != str(REPO_ROOT / "run_pytest.sh")):
                problems.append(Problem("matrix_paths_moved", t["id"], f"frozen for {path.parent} and "
                                        f"{t['benchmark']['argv'][1]}, run from {self.dir} and {REPO_ROOT}"))
                break
            if path.exists():
                data, _ = read_json(path, "receipt_unbound", "task receipt")
                if not isinstance(data, dict) or data.get("task_matrix_sha256") != self.matrix_sha:
                    problems.append(Problem("receipt_unbound", str(path), "not a receipt of this task matrix"))
                else:
                    self.receipts[t["id"]] = data
        src = self.doc["source"]
        zl_seen, found = zl_bench_source(REPO_ROOT, src["zl_bench_commit"])
        fg_seen, more = flaggems_source(self.tree, src["flaggems_commit"])
        problems += found + more
        seen: Dict[str, Any] = {"zl_bench": zl_seen, "flaggems": fg_seen, "python": self.args.python}
        scratch = tempfile.mkdtemp(prefix="zl_frozen_probe.")
        try:
            probe = preflight.probe_interpreter(self.args.python, self.tree, self.backend.name,
                                                self.env(self.doc["protocol"].get("environment", {}), scratch))
        except preflight.PreflightFailed as exc:
            raise CampaignError(problems + [Problem("import_failed", "--python", exc.detail)]) from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        seen["probe"] = probe
        seen["triton"], found = triton_source(src, probe)
        problems += found
        if not Path(probe["flag_gems_file"]).resolve().is_relative_to(Path(self.tree).resolve()):
            problems.append(Problem("import_path_mismatch", "$.source.flaggems_commit",
                                    f"flag_gems imports from {probe['flag_gems_file']}, outside {self.tree}"))
        dev, last = self.doc["device"], self.dir / CAMPAIGN_RECEIPT
        problems += self.busy(probe, dev["visible_device_count"], dev["model"])
        prev = read_json(last, "receipt_unbound", "campaign receipt")[0] if last.exists() else {}
        ran_on = prev.get("observed", {}).get("probe", {}).get("device_uuid", "<not recorded>")
        if self.receipts and not self.args.skip_device_checks and ran_on != probe.get("device_uuid"):
            problems.append(Problem("device_changed", "--device", f"the sealed tasks ran on {ran_on}, this is "
                                    f"{probe.get('device_uuid')}: one campaign runs on one physical device"))
        ran_with = prev.get("inherited", {}).get("recorded", "<not recorded>")
        if self.receipts and ran_with != self.inherited["recorded"]:   # MATTERS: what is compiled or imported
            problems.append(Problem("environment_changed", "environment", env_changes(ran_with, self.inherited["recorded"])))
        seen["devices"] = {"skipped": self.args.skip_device_checks} if self.args.skip_device_checks else \
            {"device_count": probe["device_count"], "device_name": probe.get("device_name"), "device": self.args.device}
        if problems:
            raise CampaignError(problems)
        return seen

    def busy(self, probe: Optional[Mapping[str, Any]] = None, want: int = 1, model: str = "") -> List[Problem]:
        if self.args.skip_device_checks:
            return []
        at = {"devices_visible_mismatch": "$.device.visible_device_count", "device_model_mismatch": "$.device.model"}
        return [Problem(code, at.get(code, "--device"), what + ("; --skip-device-checks REASON runs anyway, recorded"
                                                                * (code == "device_check_unavailable")))
                for code, what in preflight.device_problems(self.backend, self.args.device, probe, want, model)]

    def execute(self, argv: List[str], cwd: str, env: Dict[str, str], log: Path, timeout: int) -> Dict[str, Any]:
        log.parent.mkdir(parents=True, exist_ok=True)
        start = time.time()
        with open(log, "wb") as fh:
            self.child = subprocess.Popen([sys.executable, "-m", "zl.supervise", "--parent", str(os.getpid()),
                                           "--cwd", cwd, "--", *argv], env=env, stdout=fh, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL)
            try:
                rc, timed_out = self.child.wait(timeout=timeout), False
            except subprocess.TimeoutExpired:
                self.stop_child()
                rc, timed_out = 124, True
            self.child = None
        return {"argv": argv, "cwd": cwd, "rc": rc, "timed_out": timed_out, "timeout_s": timeout, "log": str(log),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(start)), "seconds": round(time.time() - start, 3)}

    def stop_child(self) -> None:
        child, self.child = self.child, None
        if child is None or child.poll() is not None:
            return
        child.send_signal(signal.SIGTERM)   # zl.supervise forwards it, then kills the group
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()

    def measure(self, t: Mapping[str, Any], ex: Mapping[str, Any]) -> Dict[str, Any]:
        run = Path(t["benchmark"]["env"]["OUT_DIR"])
        ident = caliber.read_identity(run) or {}
        try:
            parsed, why = parse_log_bytes(run / "run.log", (run / "run.log").read_bytes()), ""
        except (OSError, RunLogError) as exc:
            parsed, why = None, f"run.log unreadable: {exc}"
        rows = {f"{r.dtype}|{r.size_detail}": r.gems_lat for r in (parsed.success_rows() if parsed else [])
                if r.gems_lat and r.gems_lat > 0}
        try:
            found = fp.convert_count(run, self.rule["launch_floor"])
            convert: Optional[Dict[str, Any]] = {"index_found": found["index_found"], "files": found["files"]}
        except (fp.NoIRError, fp.RunDirError, OSError):
            convert = None
        levels = fp.run_levels(run, fp.load_record(run)) if run.is_dir() else {}
        facts = {"run": str(run), "identity": {k: ident.get(k) for k in IDENTITY_FIELDS if k in ident},
                 "rows": rows, "convert": convert, "fingerprints": levels}
        rc, base = ex["rc"], Path(self.receipts.get(t["replay_of"] or "", {}).get("run", "."))
        if ex["timed_out"] or rc >= 128 or parsed is None:
            status = ("TIMEOUT", f"killed at {ex['timeout_s']} s") if ex["timed_out"] else \
                ("KILLED", f"signal {rc - 128}") if rc >= 128 else ("FAIL", f"exit {rc}: {why}; {_last_words(ex['log'])}")
        elif not rows:
            status = ("NO_ROWS", parsed.failure_text() or "no row measured (skipped or unsupported)")
        elif rc or parsed.n_failed or parsed.unfinished:
            status = ("FAIL", f"exit {rc}: {parsed.failure_text() or parsed.unfinished}")
        else:
            status = ("PASS", "")
            problems = [] if t["replay_of"] else [f"the baseline did not record (autotune_mode="
                                                  f"{ident.get('autotune_mode')})"] * (ident.get("autotune_mode") != "record")
            if t["replay_of"]:
                problems = caliber.complaints_of([("baseline", caliber.read_identity(base)), (t["id"], ident)])
                if ident.get("autotune_mode") == "replay_fallback" or parsed.replay_fallbacks:
                    problems.append(f"{len(parsed.replay_fallbacks) or 'all'} key(s) fell back to live tuning "
                                    "(AUTOTUNE_REPLAY_FALLBACK): a replay fallback fails the task")
            if problems:
                status = ("REPLAY_VIOLATION", "; ".join(problems))
        facts["status"], facts["reason"] = status
        if t["replay_of"] and base.is_dir():
            code = screen_verdict.code_verdict(base, run)
            same, why_same = screen_verdict.identical_everywhere(code)
            facts["code"] = {k: code.get(k) for k in ("verdict", "compared", "one_sided", "variants_only", "error")}
            facts["code"]["identical_everywhere"], facts["code"]["why"] = same, why_same
            try:
                facts["results"] = " ".join(str(results.compare_runs(base, run)["value"]).split())
            except (results.ResultsError, OSError) as exc:
                facts["results"] = f"n/a (results unreadable: {exc})"
        return facts

    def correctness(self, spec: Mapping[str, Any], values: Mapping[str, str], where: Path) -> Dict[str, Any]:
        argv = [self.args.python if a == PYTHON else a for a in spec["argv"]]
        scratch = tempfile.mkdtemp(prefix="zl_frozen_tests.")
        env = self.env(values, scratch)   # private caches: a shared one would hand another cell's kernels in
        try:
            ex = self.execute(argv, spec["cwd"], env, where / "correctness.log", spec["timeout_s"])
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        text = Path(ex["log"]).read_text(errors="replace")
        final = next((ln.strip("= ") for ln in reversed(text.splitlines()) if COUNT_RE.search(ln)), "")
        counts = {w.rstrip("s") if w.startswith("error") else w: int(n) for n, w in COUNT_RE.findall(final)}
        rc = ex["rc"]
        status = ("TIMEOUT" if ex["timed_out"] else "KILLED" if rc >= 128 else "NO_TESTS" if rc == 5 else
                  "FAIL" if rc == 1 and counts.get("failed") else "PASS" if rc == 0 and counts.get("passed") else
                  "SKIP" if rc == 0 else "ERROR")
        return {**ex, "env": self.set_by_runner(env), "status": status, "counts": counts,
                "summary": final or f"exit {rc}", "narrowing": spec.get("narrowing")}

    def run_task(self, t: Mapping[str, Any]) -> Dict[str, Any]:
        base_id = f"{t['workload']}/{self.baseline}"
        rec: Dict[str, Any] = {"schema_version": 1, "kind": TASK_KIND, "campaign_id": self.doc["campaign_id"],
                               "manifest_sha256": self.matrix["manifest_sha256"], "task_matrix_sha256": self.matrix_sha,
                               "unverified": self.unverified, **{k: t[k] for k in ("id", "workload", "cell", "role", "order")}}
        base = self.receipts.get(base_id)
        if t["id"] != base_id and (base or {}).get("status") != "PASS":
            return {**rec, "status": "SKIPPED", "reason": f"the baseline {base_id} is {(base or {}).get('status')}: "
                    "nothing to replay or compare"}
        if t["run_if_responded"]:
            said = [(c, responded(self.rule, base, self.receipts[c])) for c in t["run_if_responded"]
                    if self.receipts.get(c, {}).get("status") == "PASS"]
            if not any(acted for _, (acted, _) in said):
                return {**rec, "status": "NOT_NEEDED", "reason": "no candidate acted: " + (
                    "; ".join(f"{c}: {why}" for c, (_, why) in said) or "none passed")}
        here = Path(t["receipt"]).parent
        argv = ["bash", self.args.benchmark_script] if self.args.benchmark_script else list(t["benchmark"]["argv"])
        env = self.env(t["benchmark"]["env"])
        ex = self.execute(argv, t["benchmark"]["cwd"], env, here / "benchmark.log", t["benchmark"]["timeout_s"])
        rec.update(self.measure(t, ex), benchmark={**ex, "env": self.set_by_runner(env)})
        if t["code_must_equal"]:
            same = rec["status"] == "PASS" and rec.get("code", {}).get("identical_everywhere")
            rec["control"] = {"reproduces_baseline": bool(same), "why": (rec.get("code") or {}).get("why")
                              if rec["status"] == "PASS" else f"the control is {rec['status']}: {rec['reason']}"}
        if t["correctness"]:
            rec["correctness"] = self.correctness(t["correctness"], t["correctness"]["env"], here / "correctness")
            iso = t["correctness"]["isolation"]
            if iso and rec["correctness"]["status"] == "FAIL":
                rec["correctness"]["isolation"] = self.correctness(t["correctness"], iso["env"], here / "isolation")
        return rec

    def seal_workload(self, wid: str, tasks: List[Dict[str, Any]]) -> Dict[str, Any]:
        meta = next(w for w in self.doc["workloads"] if w["id"] == wid)
        doc = {"schema_version": 1, "kind": WORKLOAD_KIND, "campaign_id": self.doc["campaign_id"],
               "task_matrix_sha256": self.matrix_sha, "workload": wid, "family": meta["family"],
               "canary": meta["canary"], "prior_evidence": meta.get("prior_evidence", {}), "rule": self.rule,
               "classes": classify_workload(self.rule, tasks, self.receipts),
               "tasks": {t["id"]: {"status": self.receipts[t["id"]]["status"],
                                   "receipt": os.path.relpath(t["receipt"], self.dir)} for t in tasks}}
        atomic.write_json(self.dir / "tasks" / wid / WORKLOAD_RECEIPT, doc)
        for cell, k in doc["classes"].items():
            print(f"[frozen] {wid}/{cell}: {k['class']} ({k['reason']})", flush=True)
        return doc

    def campaign_receipt(self, status: str, seen: Mapping[str, Any], sealed: Mapping[str, Dict[str, Any]],
                         started: float, **extra: Any) -> Dict[str, Any]:
        counts, rows = {k: 0 for k in CLASSES}, []
        for wid, w in sealed.items():
            for cell, k in w["classes"].items():
                counts[k["class"]] += 1
                rows.append({"workload": wid, "candidate": cell, "canary": w["canary"], "class": k["class"],
                             "reason": k["reason"], "receipt": f"tasks/{wid}/{WORKLOAD_RECEIPT}",
                             "tasks": {i: v["receipt"] for i, v in w["tasks"].items()}})
        doc = {"schema_version": 1, "kind": CAMPAIGN_KIND, "campaign_id": self.doc["campaign_id"], "status": status,
               "selection": self.matrix["selection"], "manifest_sha256": self.matrix["manifest_sha256"],
               "task_matrix_sha256": self.matrix_sha, "permitted_claim": self.doc["permitted_claim"],
               "production_default": self.doc["production_default"], "argv": sys.argv, "observed": dict(seen),
               "inherited": self.inherited, "unverified": self.unverified, "rule": self.rule, "counts": counts,
               "tasks": {t["id"]: self.receipts[t["id"]]["status"] for t in self.matrix["tasks"] if t["id"] in self.receipts},
               "workloads": rows, "seconds": round(time.monotonic() - started, 3), **extra}
        atomic.write_json(self.dir / CAMPAIGN_RECEIPT, doc)
        lines = [f"# {self.doc['campaign_id']} ({self.matrix['selection']}): {status}", "",
                 f"Claim permitted: {self.doc['permitted_claim']}", "",
                 "counts: " + ", ".join(f"{k} {n}" for k, n in counts.items()), "",
                 "| workload | candidate | class | why | evidence |", "|---|---|---|---|---|"]
        lines += [f"| {r['workload']} | {r['candidate']} | {r['class']} | {r['reason']} | [{r['receipt']}]({r['receipt']}) |"
                  for r in rows]
        atomic.write_text(self.dir / SUMMARY, "\n".join(lines + [f"\nunverified: {'; '.join(self.unverified)}"] *
                                                                  bool(self.unverified)) + "\n")
        return doc

    def run(self) -> int:
        started = time.monotonic()
        seen, sealed, groups, n = self.preflight(), {}, _workloads(self.matrix), len(self.matrix["tasks"])
        self.campaign_receipt("running", seen, sealed, started)   # a killed runner leaves this
        if self.receipts:
            print(f"[frozen] resuming: {len(self.receipts)} of {n} task(s) sealed, not run again", flush=True)
        for t in self.matrix["tasks"]:
            rec = self.receipts.get(t["id"])
            if rec is None:
                if self.args.budget_s is not None and time.monotonic() - started >= self.args.budget_s:
                    self.campaign_receipt("stopped_at_budget", seen, sealed, started)
                    print(f"!!! stopped at --budget-s {self.args.budget_s}: {n - len(self.receipts)} task(s) left; rerun to resume")
                    return 3
                if busy := self.busy():
                    raise CampaignError(busy)
                rec = self.run_task(t)
                atomic.write_json(t["receipt"], rec)
                self.receipts[t["id"]] = rec
                print(f"[frozen] {t['ordinal']}/{n} {t['id']}: {rec['status']}"
                      + (f" ({rec['reason']})" if rec.get("reason") else ""), flush=True)
            if not rec.get("control", {}).get("reproduces_baseline", True):
                why = f"{t['id']} did not reproduce the baseline's code: {rec['control']['why']}"
                print(f"!!! control_plane_broken at {t['id']}: {why}; the campaign stops", flush=True)
                self.campaign_receipt("control_plane_broken", seen, sealed, started, stopped_by=why)
                self.write_canary(False, [why])
                return 4
            tasks = groups[t["workload"]]
            if t is tasks[-1]:
                path = self.dir / "tasks" / t["workload"] / WORKLOAD_RECEIPT
                sealed[t["workload"]] = read_json(path, "receipt_unbound", "workload receipt")[0] \
                    if path.exists() else self.seal_workload(t["workload"], tasks)
        failed = [f"{w}/{c}: {k['class']}" for w, doc in sealed.items() if doc["canary"]
                  for c, k in doc["classes"].items() if k["class"] not in GATE_CLASSES]
        doc = self.campaign_receipt("complete", seen, sealed, started)
        print("[frozen] complete: " + ", ".join(f"{k} {n}" for k, n in doc["counts"].items())
              + f"; receipts in {self.dir}")
        if self.matrix["selection"] != "canary":
            return 0
        self.write_canary(not failed, failed)
        print(f"[frozen] canary {'passed' if not failed else 'FAILED: ' + '; '.join(failed)}")
        return 0 if not failed else 1

    def write_canary(self, passed: bool, why: List[str]) -> None:
        if self.matrix["selection"] == "canary":
            doc = canary_receipt(self.dir, "passed" if passed else "failed",
                                 {i: r["status"] for i, r in self.receipts.items()}, self.unverified)
            atomic.write_json(self.dir / CANARY_RECEIPT, {**doc, "gate": why})


def reaccount(frozen: Path, out: Path, overrides: Dict[str, Any]) -> int:
    """Reclassify a complete campaign from its receipts under `overrides`; write only `out`."""
    frozen, out = frozen.resolve(), out.resolve()
    doc, matrix, raw = load_frozen(frozen)
    camp, _ = read_json(frozen / CAMPAIGN_RECEIPT, "campaign_not_sealed", "campaign receipt")
    camp = camp if isinstance(camp, dict) else {}
    if camp.get("status") != "complete" or camp.get("task_matrix_sha256") != sha256(raw):
        raise CampaignError([Problem("campaign_not_sealed", str(frozen / CAMPAIGN_RECEIPT),
                                     f"status {camp.get('status')!r}: only a complete campaign of this matrix is sealed")])
    if out == frozen or frozen in out.parents:
        raise CampaignError([Problem("reaccount_inside_sealed", str(out), f"inside the sealed campaign {frozen}")])
    rule = rule_of(doc, **overrides)
    receipts = {t["id"]: read_json(Path(t["receipt"]), "campaign_not_sealed", "task receipt")[0] for t in matrix["tasks"]}
    rows, counts = [], {"sealed": {k: 0 for k in CLASSES}, "reaccounted": {k: 0 for k in CLASSES}}
    for wid, tasks in _workloads(matrix).items():
        old = read_json(frozen / "tasks" / wid / WORKLOAD_RECEIPT, "campaign_not_sealed", "workload receipt")[0]["classes"]
        for cell, k in classify_workload(rule, tasks, receipts).items():
            counts["sealed"][old[cell]["class"]] += 1
            counts["reaccounted"][k["class"]] += 1
            rows.append({"workload": wid, "candidate": cell, "sealed": old[cell]["class"], "reaccounted": k["class"],
                         "changed": old[cell]["class"] != k["class"], "sealed_reason": old[cell]["reason"],
                         "reason": k["reason"], "evidence": k["evidence"]})
    result = {"schema_version": 1, "kind": "zl_bench.frozen_reaccount", "campaign_id": doc["campaign_id"],
              "sealed": str(frozen), "task_matrix_sha256": sha256(raw), "sealed_rule": camp["rule"], "rule": rule,
              "counts": counts, "changed": [f"{r['workload']}/{r['candidate']}" for r in rows if r["changed"]],
              "note": "derived from the sealed receipts: no device ran, nothing in the campaign was written",
              "workloads": rows}
    atomic.write_json(out / "reaccount.json", result)
    lines = [f"# reaccount of {doc['campaign_id']}", "", f"sealed rule: {camp['rule']}", f"this rule: {rule}", "",
             "| workload | candidate | sealed | now | why now | why sealed |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['workload']} | {r['candidate']} | {r['sealed']} | {r['reaccounted']} | {r['reason']} | "
              f"{r['sealed_reason']} |" for r in rows if r["changed"]]
    atomic.write_text(out / "reaccount.md", "\n".join(lines) + "\n")
    for r in rows:
        if r["changed"]:
            print(f"[reaccount] {r['workload']}/{r['candidate']}: {r['sealed']} -> {r['reaccounted']}: {r['reason']}")
    print(f"[reaccount] {len(result['changed'])} of {len(rows)} changed class; {out / 'reaccount.json'}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = cli_help.parser(__doc__, "python -m zl.frozen.run")
    p.add_argument("frozen", type=Path, help="the directory python -m zl.frozen.freeze --out froze")
    p.add_argument("--device", help="the device every task runs on (its id for the backend's visibility variable)")
    p.add_argument("--python", default=sys.executable, help="the campaign's interpreter (default: this one)")
    p.add_argument("--budget-s", type=float, help="start no task after this many seconds (exit 3; rerun resumes)")
    p.add_argument("--skip-device-checks", metavar="REASON", help="no device count, model or idle check (recorded)")
    p.add_argument("--benchmark-script", metavar="SCRIPT", help="run SCRIPT instead of run_pytest.sh (tests; recorded)")
    p.add_argument("--reaccount", type=Path, metavar="OUT", help="reclassify a complete campaign into OUT; run nothing")
    p.add_argument("--launch-floor", type=int, help="with --reaccount: launches at or below it are not measured kernels")
    p.add_argument("--gain-pct", type=float, help="with --reaccount: the speedup G needs in both orders")
    p.add_argument("--loss-pct", type=float, help="with --reaccount: the slowdown R needs (negative)")
    p.add_argument("--response", choices=RESPONSES, help="with --reaccount: what counts as the switch acting")
    args = p.parse_args(argv)
    overrides = {"launch_floor": args.launch_floor, "gain_pct": args.gain_pct, "loss_pct": args.loss_pct,
                 "response": args.response}
    if args.reaccount is None and any(v is not None for v in overrides.values()):
        p.error("--launch-floor, --gain-pct, --loss-pct and --response change the rule of --reaccount only")
    for name, value, ok in (("--launch-floor", args.launch_floor, lambda v: v >= 0), ("--gain-pct", args.gain_pct,
                            lambda v: v > 0), ("--loss-pct", args.loss_pct, lambda v: v < 0),
                            ("--budget-s", args.budget_s, lambda v: v >= 0)):
        if value is not None and not ok(value):
            p.error(f"{name}: out of range (a launch floor >= 0, a gain > 0, a loss < 0, a budget >= 0)")
    if args.reaccount is None and not args.device:
        p.error("--device is required: every task runs on that one device")
    try:
        if args.reaccount is not None:
            return reaccount(args.frozen, args.reaccount, overrides)
        campaign = Campaign(args.frozen, args)
        lock = locks.acquire(campaign.dir / RUN_LOCK)
    except locks.LockHeld as exc:
        print(f"!!! run_dir_busy at {args.frozen}: {exc}", file=sys.stderr)
        return 2
    except CampaignError as exc:
        for problem in exc.problems:
            print(f"!!! {problem}", file=sys.stderr)
        return 2

    def on_signal(signum: int, _frame: Any) -> None:
        raise Stopped(signum)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    with lock:
        try:
            return campaign.run()
        except CampaignError as exc:
            for problem in exc.problems:
                print(f"!!! {problem}", file=sys.stderr)
            return 2
        except Stopped as exc:
            campaign.stop_child()
            print(f"!!! stopped by signal {exc.args[0]}: rerun the same command to resume", file=sys.stderr)
            return 128 + exc.args[0]


if __name__ == "__main__":
    sys.exit(main())
