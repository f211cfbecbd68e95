"""Helper, not a tool (report_attacks.py): the registry of attacks, the honest runs they start
from, and the checks that decide HELD or BROKEN.

An attack is a function `(ctx, d) -> Judge` registered with `@attack(name, needs, summary)`:
it builds one adversarial situation in its own directory `d` (copies of the shared runs
named in `needs`, edited as an adversary would), runs zl_bench's real command on it and
records, through the Judge, what it tried, what zl_bench did and every expectation that
failed. No failed expectation = HELD.

The shared runs are real run_pytest.sh runs of the bundled fake FlagGems tree in Triton's
interpreter on the CPU (tests/fake_flaggems, the CPU timing driver of tests/harness), made
once per invocation and copied per attack: A records mm (float16, private tuner store), B
replays A, C replays A with a switch set, R is A's directory recorded again, E replays an
edited copy of A's record, F replays A for another dtype. Building them costs most of the
script's time; attacks that need none start nothing shared.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from harness.runner import FAKE_FLAGGEMS_DIR, base_env  # noqa: E402

PY = sys.executable
RUN_TIMEOUT_S = 300
TOOL_TIMEOUT_S = 180
# The operator of the shared runs: the fake tree's autotuned kernel (3 configs, key M,N,K),
# so a record holds real keys to replay, edit or miss.
OP = "mm"
CAMPAIGN = "report-attacks"
RUN_ENV = dict(OP=OP, OP_FILE=OP, DTYPES="float16", ZL_ISOLATE_TUNER_CACHE="1",
               ZL_CAMPAIGN_ID=CAMPAIGN)


@dataclass
class Proc:
    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


@dataclass
class Judge:
    """What an attack tried, what zl_bench did, and each expectation it missed."""
    tried: str
    did: str = ""
    problems: List[str] = field(default_factory=list)
    skipped: str = ""

    @property
    def held(self) -> bool:
        return not self.problems and not self.skipped

    def want(self, ok: bool, problem: str) -> bool:
        if not ok:
            self.problems.append(problem)
        return ok

    def rc(self, proc: Proc, *codes: int) -> bool:
        return self.want(proc.rc in codes, f"exit {proc.rc}, expected {' or '.join(map(str, codes))}")

    def has(self, text: str, needle: str, where: str) -> bool:
        return self.want(needle in text, f"{where} lacks {needle!r}")

    def lacks(self, text: str, needle: str, where: str) -> bool:
        return self.want(needle not in text, f"{where} says {needle!r}")

    def no_traceback(self, proc: Proc) -> bool:
        return self.lacks(proc.text, "Traceback", "the console")

    def saw(self, proc: Proc, *needles: str) -> None:
        """`did`: the exit status and the first console line holding a needle (else the
        first `!!!` line)."""
        self.did = f"exit {proc.rc}" + (f": {quote_line(proc.text, *needles)}" if proc.text else "")


@dataclass
class Attack:
    name: str
    func: Callable[["Ctx", Path], Judge]
    needs: Sequence[str]
    summary: str


ATTACKS: Dict[str, Attack] = {}


def attack(name: str, needs: Sequence[str] = (), summary: str = ""):
    """Register an attack; names are unique and say what is attempted."""
    def register(func):
        if name in ATTACKS:
            raise ValueError(f"attack {name!r} registered twice")
        ATTACKS[name] = Attack(name, func, tuple(needs), summary or (func.__doc__ or "").split("\n")[0])
        return func
    return register


def quote_line(text: str, *needles: str, width: int = 220) -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    pick = next((x for n in needles for x in lines if n in x), None)
    pick = pick or next((x for x in lines if x.startswith("!!!")), None) or (lines[-1] if lines else "")
    return pick if len(pick) <= width else pick[:width - 3] + "..."


def huge_numbers(text: str, limit: float = 1e30) -> List[str]:
    """Number tokens in `text` of magnitude >= limit (a ratio against ~0 reads 8.97e+304)."""
    found = []
    # A number stands alone: not part of a word, a hex colour (#8e44ad) or a digest.
    for tok in re.findall(r"(?<![\w#.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])", text):
        try:
            if abs(float(tok)) >= limit:
                found.append(tok)
        except ValueError:
            continue
    return found


def tree(root: Path, skip: Iterable[str] = (".zl.lock", ".batch.lock")) -> Dict[str, Optional[bytes]]:
    """Every path under root -> its bytes (None for a directory), lock files left out."""
    skip = set(skip)
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(Path(root).rglob("*")) if p.name not in skip}


class Ctx:
    """One invocation's work directory, shared runs and command helpers."""

    def __init__(self, work: Path, root: Path = REPO, log=None):
        self.work = Path(work)
        # The zl_bench checkout under attack (its commands, its zl/ on PYTHONPATH, its fake
        # tree where it has one); the attacks' own helpers always come from this checkout.
        self.root = Path(root).resolve()
        fake = self.root / "tests" / "fake_flaggems"
        self.fake = fake if (fake / "src").is_dir() else FAKE_FLAGGEMS_DIR
        self.home = self.work / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.shared = self.work / "shared"
        self._built: Dict[str, Path] = {}
        self._failed: Dict[str, str] = {}
        self._lock = threading.Lock()
        self._live: List[subprocess.Popen] = []
        self.log = log or (lambda msg: None)

    # ------------------------------------------------------------------ commands
    def env(self, home: Optional[Path] = None, **over) -> dict:
        """The harness's clean environment (HOME private, fake tree, interpreter) for root."""
        return base_env(home or self.home, **{"FLAGGEMS_DIR": self.fake,
                                              "PYTHONPATH": f"{self.root}{os.pathsep}{self.fake / 'src'}", **over})

    def run(self, argv: Sequence, cwd: Path, env: dict, timeout: float = TOOL_TIMEOUT_S) -> Proc:
        """Run a command in its own session; past `timeout` the whole session is killed (a
        hung preflight's python outlives its shell otherwise) and the result is exit 124."""
        proc = self._track(subprocess.Popen([str(a) for a in argv], cwd=str(cwd), env=env, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, errors="replace",
                                            start_new_session=True))
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_session(proc.pid)          # before the leader is reaped: its pid is still ours
            out, err = proc.communicate()
            return Proc(124, out, err + f"\n[report_attacks] killed after {timeout:.0f} s")
        return Proc(proc.returncode, out, err)

    def _track(self, proc: subprocess.Popen) -> subprocess.Popen:
        with self._lock:
            self._live = [p for p in self._live if p.returncode is None] + [proc]
        return proc

    def close(self) -> None:
        """Stop every command this context started that still runs (each in its own
        session, so a Ctrl-C at the terminal does not reach them)."""
        with self._lock:
            live, self._live = self._live, []
        for proc in live:
            if proc.poll() is None:
                stop(proc)

    def run_pytest(self, out_dir: Optional[Path], cwd: Path, limit_kib: Optional[int] = None,
                   home: Optional[Path] = None, timeout: float = RUN_TIMEOUT_S, **env) -> Proc:
        """bash run_pytest.sh with the shared runs' variables (RUN_ENV) under `env`;
        `limit_kib` runs it under `ulimit -f` (every file write past it fails: a full disk)."""
        e = self.env(home, **{**RUN_ENV, **({"OUT_DIR": out_dir} if out_dir else {}), **env})
        script = str(self.root / "run_pytest.sh")
        argv = (["bash", "-c", f'ulimit -f {int(limit_kib)} && exec bash "$0"', script]
                if limit_kib is not None else ["bash", script])
        return self.run(argv, cwd, e, timeout=timeout)

    def bs(self, cwd: Path, *args) -> Proc:
        """batch_summary.py with these arguments."""
        return self.run([PY, self.root / "batch_summary.py", *args], cwd, self.env())

    def start(self, argv: Sequence, cwd: Path, env: dict, log: Path) -> subprocess.Popen:
        """Start a command in its own session, output to `log`; stop() or close() ends it."""
        with open(log, "w") as fh:
            return self._track(subprocess.Popen([str(a) for a in argv], cwd=str(cwd), env=env, stdout=fh,
                                                stderr=subprocess.STDOUT, start_new_session=True))

    # ------------------------------------------------------------------ shared runs
    def copy(self, name: str, dest: Path, skip_prev: bool = False) -> Path:
        """A private copy of shared run `name` (identity and record link kept)."""
        src = self.fixture(name)
        ignore = shutil.ignore_patterns("prev-*", ".zl.lock") if skip_prev else shutil.ignore_patterns(".zl.lock")
        shutil.copytree(src, dest, symlinks=True, ignore=ignore)
        return dest

    def fixture(self, name: str) -> Path:
        with self._lock:
            if name in self._built:
                return self._built[name]
            if name in self._failed:
                raise FixtureError(self._failed[name])
        builder = FIXTURES[name]
        for dep in builder.deps:
            self.fixture(dep)
        t0 = time.monotonic()
        try:
            path = builder.build(self, self.shared / name)
        except Exception as exc:
            why = str(exc) if isinstance(exc, FixtureError) else f"{name}: {type(exc).__name__}: {exc}"
            with self._lock:
                self._failed[name] = why
            raise FixtureError(why) from None
        self.log(f"[report_attacks] shared run {name} ({builder.what}) ready in {time.monotonic() - t0:.0f} s")
        with self._lock:
            self._built[name] = path
        return path

    def prepare(self, names: Iterable[str], jobs: int = 2) -> None:
        """Build the shared runs in `names` (dependencies first, then `jobs` at a time).
        A run that cannot be built is remembered: the attacks needing it report why."""
        wanted = set()
        for n in names:
            wanted |= {n, *FIXTURES[n].deps}
        first = [n for n in wanted if not FIXTURES[n].deps]
        rest = sorted(wanted - set(first))
        for group in (sorted(first), rest):
            pool = ThreadPoolExecutor(max_workers=max(1, jobs))
            try:
                for fut in [pool.submit(self._try_build, n) for n in group]:
                    fut.result()
            finally:
                # On an interrupt the caller's close() stops the running commands; the
                # threads then return instead of holding the exit up.
                pool.shutdown(wait=False, cancel_futures=True)

    def _try_build(self, name: str) -> None:
        try:
            self.fixture(name)
        except FixtureError:
            pass


class FixtureError(RuntimeError):
    """A shared run could not be built: no attack on it can be judged."""


@dataclass
class Fixture:
    what: str
    deps: Sequence[str]
    build: Callable[[Ctx, Path], Path]


def _checked_run(ctx: Ctx, out: Path, what: str, **env) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    r = ctx.run_pytest(out, out.parent, **env)
    if r.rc != 0:
        raise FixtureError(f"{what}: run_pytest.sh exited {r.rc}: {quote_line(r.text, '!!!', 'Error')}")
    return out


def _record(ctx: Ctx, out: Path) -> Path:
    return _checked_run(ctx, out, "record run A")


def _replay(honest: bool = True, **env):
    """A replay of A; `honest`: `--ab A <it>` must be a clean, complete report (exit 0, no
    caliber problem, paired rows), so every refusal an attack on copies of these runs sees is
    the attack's doing, not the runs'."""
    def build(ctx: Ctx, out: Path) -> Path:
        what = f"replay of A ({' '.join(f'{k}={v}' for k, v in env.items()) or 'plain'})"
        run = _checked_run(ctx, out, what, REPLAY_FROM=ctx.fixture("A"), **env)
        if honest:
            js = out.parent / f"{out.name}.control.json"
            r = ctx.bs(out.parent, "--ab", ctx.fixture("A"), run, "--json", js)
            d = strict_json(js) if js.is_file() else {}
            summary = d.get("summary") or {}
            if r.rc != 0 or d.get("caliber_problems") or not summary.get("paired") or not summary.get("complete"):
                raise FixtureError(f"the honest pair A / {what} is not a clean report (exit {r.rc}: "
                                   f"{quote_line(r.text, '!!!')}): no refusal on its copies can be credited")
        return run
    return build


def _rerecord(ctx: Ctx, out: Path) -> Path:
    """A's directory recorded again (run_pytest.sh moves A's files to prev-*/)."""
    shutil.copytree(ctx.fixture("A"), out, symlinks=True)
    return _checked_run(ctx, out, "A recorded again")


# A config the fake mm's autotuner does not list (its candidates have BLOCK_M 16 or 32).
FOREIGN_KWARGS = {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32}


def _edited_replay(ctx: Ctx, out: Path) -> Path:
    """A replay of a copy of A whose record was edited after A wrote it: one key set to a
    config outside the tuner's candidates."""
    import json
    src = out.parent / "A_edited"
    shutil.copytree(ctx.fixture("A"), src, symlinks=True)
    rec = src / "autotune_records" / f"{OP}.json"
    doc = json.loads(rec.read_text())
    kernel = next(iter(doc))
    key = sorted(doc[kernel])[0]
    doc[kernel][key]["kwargs"] = dict(FOREIGN_KWARGS)
    rec.write_text(json.dumps(doc, indent=2))
    return _checked_run(ctx, out, "replay of an edited record", REPLAY_FROM=src)


FIXTURES: Dict[str, Fixture] = {
    "A": Fixture("record run of mm, float16", (), _record),
    "B": Fixture("replay of A", ("A",), _replay()),
    "C": Fixture("replay of A with ZL_TEST_SWITCH=1", ("A",), _replay(ZL_TEST_SWITCH="1")),
    "R": Fixture("A's directory recorded again", ("A",), _rerecord),
    "E": Fixture("replay of an edited copy of A's record", ("A",), _edited_replay),
    "F": Fixture("replay of A for float32 (no key in A's record)", ("A",),
                 _replay(honest=False, DTYPES="float32")),
}


# ------------------------------------------------------------------ process helpers
HOLD_PLUGIN = '''"""Written by benchmarks/report_attacks.py: holds pytest in pytest_configure (the run
directory prepared, locked and logging) until the attack creates ZL_ATTACK_GO."""
import os
import time


def pytest_configure(config):
    with open(os.environ["ZL_ATTACK_READY"], "w") as fh:
        fh.write(str(os.getpid()))
    deadline = time.monotonic() + 300
    while not os.path.exists(os.environ["ZL_ATTACK_GO"]) and time.monotonic() < deadline:
        time.sleep(0.05)
'''


def hold_env(ctx: "Ctx", d: Path) -> dict:
    """Variables that make a run_pytest.sh run (or every case of a batch) wait inside pytest
    until `d/go` exists; `d/ready` appears once it waits. A second writer then meets a first
    one that is certainly running, however fast the machine."""
    plug = d / "plug"
    plug.mkdir(exist_ok=True)
    (plug / "_zl_attack_hold.py").write_text(HOLD_PLUGIN)
    return dict(ZL_EXTRA_PLUGINS="_zl_attack_hold", ZL_ATTACK_READY=d / "ready", ZL_ATTACK_GO=d / "go",
                PYTHONPATH=os.pathsep.join(map(str, (ctx.root, ctx.fake / "src", plug))))
def wait_for(cond: Callable[[], bool], proc: Optional[subprocess.Popen], timeout: float) -> bool:
    """Poll cond every 50 ms until it holds, proc ends, or timeout; the last reading."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        if proc is not None and proc.poll() is not None:
            return cond()
        time.sleep(0.05)
    return cond()


def stop(proc: subprocess.Popen, sig: int = signal.SIGKILL, timeout: float = 60) -> None:
    """Signal a still running process started in its own session (start) and its group, and
    reap it; one already reaped is left alone (its pid may belong to another process now)."""
    if proc.returncode is not None:
        return
    _kill_session(proc.pid, sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_session(proc.pid)
        proc.wait(timeout=timeout)


def _kill_session(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal the process group `pid` leads (its session's processes that kept the group);
    nothing when it is gone."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def read_text(path: Path) -> str:
    """A file's text, '' when it cannot be read (a log a failed step never wrote)."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def strict_json(path: Path):
    """json.load that refuses Infinity/NaN (not JSON; other readers reject them)."""
    import json

    def bad(token):
        raise ValueError(f"{path} holds {token}: not standard JSON")
    return json.loads(Path(path).read_text(), parse_constant=bad)
