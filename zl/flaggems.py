"""FlagGems-specific resolution kept out of the generic layers.

Turns the user's OP / OP_FILE / TEST_NODE / FLAGGEMS_DIR / SHAPE_FILE / SHAPE_MODE
into one resolved set (`emit_run_env`, which zl.prepare builds the run configuration from;
`--emit-shell` prints it for a reader), and
owns the GEMS_VENDOR mapping. GEMS_VENDOR values are FlagGems' vendor names, not
zl_bench backend names (cuda -> nvidia): FlagGems' device_finder otherwise probes
every vendor's CLI with no timeout at import, and one hanging tool blocks
`import flag_gems`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from zl.childenv import inherited, set_in_process
from zl.config import environ
from zl.patching import PatchStack


# Where FlagGems checkouts usually live on the lab machines. Tried in order when the
# configured root lacks the requested test file; ZL_FLAGGEMS_FALLBACK_ROOTS
# (colon-separated) replaces the list.
DEFAULT_FALLBACK_ROOTS = ("/workspace/dev/FlagGems", "/workspace/FlagGems")

# FlagGems' importable packages (upstream and the vllm fork); both keep vendor code under
# <package>.runtime.backend._<vendor>. Every module that names them imports this.
PACKAGES = ("flag_gems", "flaggems_vllm")

VENDOR_ENV_KEYS = ("GEMS_VENDOR", "FLAGGEMS_VENDOR", "GEMS_BACKEND", "FLAGGEMS_BACKEND")

UPSTREAM_SHAPE_WORDS = ("-", "upstream", "none")
# Upstream's `Benchmark.set_dtypes` refusal ("Given dtype(s) '...'can't be supported by this op
# '<op>'"): read by run_batch.py's dtype fallback and by zl.shapes.dtype_fallback.
UNSUPPORTED_DTYPE = "can't be supported by this op"
SHAPE_MODES = ("inline", "file", "upstream")


class NodeError(ValueError):
    """A TEST_NODE that is not `<path>/test_<file>.py::test_<fn>`."""


def fallback_roots() -> List[str]:
    raw = environ().get("ZL_FLAGGEMS_FALLBACK_ROOTS")
    if raw is not None:
        return [p for p in raw.split(":") if p]
    return list(DEFAULT_FALLBACK_ROOTS)


def configured_vendor() -> Optional[str]:
    """The vendor the user chose explicitly, if any (FlagGems reads these in order)."""
    env = inherited()
    for key in VENDOR_ENV_KEYS:
        value = env.get(key, "").strip()
        if value:
            return value
    return None


def apply_vendor_env(backend, patches: Optional[PatchStack] = None) -> Optional[str]:
    """Set GEMS_VENDOR from the backend unless the user already chose one; return the value.

    With `patches`, the previous value is recorded there so the caller can restore it.
    """
    chosen = configured_vendor()
    if chosen:
        return chosen
    vendor = getattr(backend, "flaggems_vendor", "") or ""
    if vendor:
        if patches is not None:
            patches.setenv("GEMS_VENDOR", vendor)
        else:
            set_in_process("GEMS_VENDOR", vendor)
    return vendor or None


# FlagGems keeps its Benchmark base class in benchmark/base.py (performance_utils.py in
# older checkouts); plugins find it among the imported modules rather than importing it.
BENCHMARK_MODULES = ("base", "performance_utils")


def find_benchmark_bases(*required: str) -> List[type]:
    """`Benchmark` classes of the imported FlagGems benchmark modules that have every
    method named in `required` (each plugin names the methods it wraps)."""
    found: List[type] = []
    for name, mod in list(sys.modules.items()):
        if mod is None or name.rsplit(".", 1)[-1] not in BENCHMARK_MODULES:
            continue
        cls = getattr(mod, "Benchmark", None)
        if isinstance(cls, type) and cls not in found \
                and all(callable(getattr(cls, attr, None)) for attr in required):
            found.append(cls)
    return found


def timed_side(bench: object, op: object, in_gems: bool) -> str:
    """'gems' or 'torch': the side of a FlagGems benchmark one get_latency call measures. The
    gems side is the benchmark's gems_op, or any op inside use_gems() (a benchmark without a
    gems_op times torch_op there, dispatched to FlagGems)."""
    return "gems" if (op is not None and op is getattr(bench, "gems_op", None)) or in_gems else "torch"


class UseGemsDepth:
    """How deep the running code is inside flag_gems.use_gems(), counted by a wrapper that
    `install` puts on the imported flag_gems module (undone with its PatchStack). `enter`
    (use_gems, args, kwargs) runs as the outermost use_gems() starts, `leave` once it has
    ended (FlagGems off again)."""

    def __init__(self, enter: Optional[Callable] = None, leave: Optional[Callable[[], None]] = None) -> None:
        self.depth = 0
        self.enter = enter
        self.leave = leave

    def install(self, patches: PatchStack) -> bool:
        """False when flag_gems is not imported or has no use_gems; a second install while
        this counter's wrapper is in the chain does nothing."""
        use = getattr(sys.modules.get("flag_gems"), "use_gems", None)
        if use is None:
            return False
        inner = use
        while inner is not None:
            if getattr(inner, "_zl_counter", None) is self:
                return True
            inner = getattr(inner, "__wrapped__", None)
        counter = self

        # FlagGems' use_gems is a class (the fake tree's a generator function): wrap either
        # as a context manager; `updated=()` keeps a class's __dict__ off the wrapper.
        @contextlib.contextmanager
        def counted(*args, **kwargs):
            outermost = counter.depth == 0
            if outermost and counter.enter is not None:
                counter.enter(use, args, kwargs)
            try:
                with use(*args, **kwargs):
                    counter.depth += 1
                    try:
                        yield
                    finally:
                        counter.depth -= 1
            finally:
                if outermost and counter.leave is not None:
                    counter.leave()
        functools.update_wrapper(counted, use, updated=())
        counted._zl_counter = counter
        patches.setattr(sys.modules["flag_gems"], "use_gems", counted)
        return True


class BenchmarkMethodPatch:
    """Wrap one method on every class of the FlagGems `Benchmark` hierarchy that defines it
    itself (overrides included), once per class, and put the originals back on `restore`.

    `make_wrapper(original)` returns the replacement; `required` names methods the base
    class must also have. The shape-inject and graph-timing plugins share this so their
    wrap/undo bookkeeping cannot drift apart; the undo itself is a `PatchStack`.
    """

    def __init__(self, method: str, make_wrapper: Callable[[Callable], Callable], *required: str):
        self.method = method
        self.make_wrapper = make_wrapper
        self.required = required
        self.patched: List[Tuple[type, Callable]] = []
        self._patches = PatchStack()

    def apply(self) -> int:
        """Wrap the classes not wrapped yet; returns how many were wrapped now."""
        done = {cls for cls, _ in self.patched}
        count = 0
        for base in find_benchmark_bases(self.method, *self.required):
            todo = [base]
            while todo:
                cls = todo.pop()
                todo.extend(cls.__subclasses__())
                if cls in done or self.method not in cls.__dict__:
                    continue
                original = cls.__dict__[self.method]
                wrapper = self.make_wrapper(original)
                wrapper.__wrapped__ = original
                self._patches.setattr(cls, self.method, wrapper)
                self.patched.append((cls, original))
                done.add(cls)
                count += 1
        return count

    def restore(self) -> None:
        self.patched.clear()
        self._patches.undo_all()


def make_test_node(flaggems_dir: str, op_file: str, op: str) -> str:
    root = flaggems_dir.rstrip("/")
    return f"{root}/benchmark/test_{op_file}.py::test_{op}"


def parse_test_node(node: str) -> Dict[str, Optional[str]]:
    """Split `/x/FlagGems/benchmark/test_sort.py::test_perf_sort` into its parts."""
    raw = (node or "").strip()
    if "::" not in raw:
        raise NodeError(f"TEST_NODE must look like <dir>/benchmark/test_<file>.py::test_<op>, got {node!r}")
    file_part, func = raw.split("::", 1)
    if "::" in func or "[" in func:
        # Parametrized ids and class nodes are passed to pytest untouched; op is the function.
        func = func.split("::")[-1].split("[")[0]
    if not func.startswith("test_"):
        raise NodeError(f"test function must start with 'test_': {func!r}")
    path = Path(file_part)
    if path.suffix != ".py" or not path.stem.startswith("test_"):
        raise NodeError(f"benchmark file must be test_<name>.py: {file_part!r}")
    flaggems_dir = None
    if path.parent.name == "benchmark":
        flaggems_dir = str(path.parent.parent)
    return {
        "test_file": raw,
        "file": file_part,
        "op": func[len("test_"):],
        "op_file": path.stem[len("test_"):],
        "flaggems_dir": flaggems_dir,
    }


def _test_py(root: str, op_file: str) -> Path:
    return Path(root) / "benchmark" / f"test_{op_file}.py"


def resolve_flaggems_dir(configured: str, op_file: str) -> str:
    """First of (configured, fallback roots) holding benchmark/test_<op_file>.py; else configured."""
    seen: List[str] = []
    for root in (configured, *fallback_roots()):
        if root and root not in seen:
            seen.append(root)
            if _test_py(root, op_file).is_file():
                return root
    return configured


def resolve_shape_mode(shape_file: str, shape_mode: str, from_node: bool) -> Dict[str, str]:
    shape_file = (shape_file or "").strip()
    mode = (shape_mode or "").strip().lower()
    if mode and mode not in SHAPE_MODES:
        raise ValueError(f"SHAPE_MODE must be one of {', '.join(SHAPE_MODES)}, got {shape_mode!r}")
    if shape_file.lower() in UPSTREAM_SHAPE_WORDS:
        return {"SHAPE_FILE": "", "SHAPE_MODE": "upstream"}
    if shape_file:
        if mode == "upstream":
            raise ValueError("SHAPE_MODE=upstream contradicts SHAPE_FILE; unset one of them")
        return {"SHAPE_FILE": shape_file, "SHAPE_MODE": "file"}
    if mode == "file":
        raise ValueError("SHAPE_MODE=file needs SHAPE_FILE")
    if not mode:
        # A full upstream node means "run what upstream runs": its own shape set.
        mode = "upstream" if from_node else "inline"
    return {"SHAPE_FILE": "", "SHAPE_MODE": mode}


def emit_run_env(test_node: str = "", op: str = "", op_file: str = "", flaggems_dir: str = "",
                 shape_file: str = "", shape_mode: str = "") -> Dict[str, str]:
    """Resolve what run_pytest.sh needs: OP, OP_FILE, FLAGGEMS_DIR, TEST_FILE, SHAPE_*."""
    from_node = bool((test_node or "").strip())
    if from_node:
        parsed = parse_test_node(test_node)
        op, op_file = parsed["op"] or op, parsed["op_file"] or op_file
        file_part = parsed["file"] or ""
        if parsed["flaggems_dir"]:
            flaggems_dir = parsed["flaggems_dir"]
        test_file = parsed["test_file"] or ""
        if not Path(file_part).is_file():
            root = resolve_flaggems_dir(flaggems_dir, op_file)
            if root != flaggems_dir:
                flaggems_dir = root
                test_file = f"{_test_py(root, op_file)}::{test_node.split('::', 1)[1]}"
    else:
        flaggems_dir = resolve_flaggems_dir(flaggems_dir, op_file)
        test_file = make_test_node(flaggems_dir, op_file, op)
    env = {"OP": op, "OP_FILE": op_file, "FLAGGEMS_DIR": flaggems_dir, "TEST_FILE": test_file}
    env.update(resolve_shape_mode(shape_file, shape_mode, from_node))
    return env


def checkout_commit(flaggems_dir: str, short: bool = False) -> str:
    """HEAD of `flaggems_dir` when it is itself the top of a git checkout, else "".

    An exported tree (`git archive`) inside another repository would otherwise report
    that repository's commit: H200 evidence once named zl_bench's own commit as
    FlagGems'.
    """
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", flaggems_dir, *args], capture_output=True,
                                  text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    top = git("rev-parse", "--show-toplevel")
    # (git -C on a missing directory fails, so top is empty there too)
    if not top or os.path.realpath(top) != os.path.realpath(flaggems_dir):
        return ""
    return git("rev-parse", *(["--short"] if short else []), "--verify", "-q", "HEAD")


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description="resolve a FlagGems benchmark node for run_pytest.sh")
    p.add_argument("--commit-of", metavar="DIR",
                   help="print DIR's HEAD if DIR is a git checkout's top, else nothing")
    p.add_argument("--short", action="store_true", help="with --commit-of: abbreviated")
    p.add_argument("--emit-shell", action="store_true",
                   help="print the resolved KEY=value lines (values shell-quoted)")
    p.add_argument("--parse-node", default="")
    p.add_argument("--op", default="")
    p.add_argument("--op-file", default="")
    p.add_argument("--flaggems-dir", default="")
    p.add_argument("--shape-file", default="")
    p.add_argument("--shape-mode", default="")
    args = p.parse_args(argv)
    if args.commit_of is not None:
        print(checkout_commit(args.commit_of, short=args.short))
        return 0
    try:
        env = emit_run_env(args.parse_node, args.op, args.op_file, args.flaggems_dir,
                           args.shape_file, args.shape_mode)
    except ValueError as exc:
        print(f"!!! {exc}", file=sys.stderr)
        return 2
    for key, value in env.items():
        print(f"{key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
