"""A user's shape yaml, checked before a run starts (run_pytest.sh's `check=shape_file`).

Upstream reads SHAPE_FILE leniently: an empty file, or one without the operator's key, makes
the benchmark measure its own class's shapes and exit 0, and `[0, 64]` is "measured". Each of
those is a run that looks valid and measured something else, so they fail here by name.
Also builds the built-in inline yaml laid over upstream's core_shapes.yaml.

The file is bounded before anything is built from it (README's SHAPE_FILE row):
    MAX_BYTES    bytes read (a 1.8 MB file of 100k shapes took 6 s to compose here)
    MAX_ALIASES  `*alias` uses
    MAX_NODES    yaml nodes, each alias counted as everything it stands for (a 10-level
                 alias bomb is ~11 kB of text and 10^10 nodes: walking it hung preflight)
    MAX_DEPTH    nesting levels (PyYAML composes recursively: deep nesting is a RecursionError)
A recursive alias (`&a [*a]`) and text that is not UTF-8 are named too. Every dimension
fits int64, a word that reads as a number (`1O24`, `1e6`) is refused, and a shape whose
largest tensor cannot fit in the device's memory is refused before pytest starts
(`memory_problem`).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

import yaml
from yaml.events import AliasEvent

from zl.backends.base import device_argv

MAX_BYTES = 512 * 1024
MAX_ALIASES = 1000
MAX_NODES = 100_000
MAX_DEPTH = 32
INT64_MAX = 2 ** 63 - 1
# Element sizes of the DTYPES words a run may request; a word not listed counts as 1 byte
# (the smallest any dtype has), as does an empty DTYPES (the benchmark's own dtypes).
DTYPE_BYTES = {"bool": 1, "int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
               "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "int16": 2, "float16": 2, "half": 2,
               "bfloat16": 2, "complex32": 4, "int32": 4, "float32": 4, "float": 4, "int64": 8,
               "long": 8, "float64": 8, "double": 8, "complex64": 8, "complex128": 16}
_NUMBER_LIKE = re.compile(r"^[-+.0-9]")
_NOT_DIMS = "is not a list of positive integers (words and true/false are allowed as parameters)"
_FLOAT_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$", re.I)


class ShapeFileError(ValueError):
    """The shape file cannot be used as given (one line, names the file and the problem)."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts while composing, before any Python object is built: aliases,
    nesting depth, and nodes with every alias expanded (memoised per node, so the count
    itself is linear in the text)."""

    def __init__(self, stream):
        super().__init__(stream)
        self.zl_aliases = 0
        self.zl_nodes = 0
        self.zl_depth = 0
        self.zl_size: Dict[int, int] = {}   # id(node) -> expanded node count, once complete

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            event = self.peek_event()
            self.zl_aliases += 1
            if self.zl_aliases > MAX_ALIASES:
                raise ShapeFileError(f"more than {MAX_ALIASES} aliases (line {event.start_mark.line + 1})")
            node = super().compose_node(parent, index)
            size = self.zl_size.get(id(node))
            if size is None:     # the anchor's node is still being composed: it contains itself
                raise ShapeFileError(f"alias *{event.anchor} at line {event.start_mark.line + 1} "
                                     "refers to a node that contains it (a recursive structure)")
            self._count(size, event)
            return node
        event = self.peek_event()
        if self.zl_depth >= MAX_DEPTH:
            raise ShapeFileError(f"nested deeper than {MAX_DEPTH} levels (line {event.start_mark.line + 1})")
        self.zl_depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self.zl_depth -= 1
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        self.zl_size[id(node)] = 1 + sum(self.zl_size[id(c)] for c in children)
        self._count(1, event)
        return node

    def _count(self, n: int, event) -> None:
        self.zl_nodes += n
        if self.zl_nodes > MAX_NODES:
            raise ShapeFileError(f"more than {MAX_NODES} yaml nodes with aliases expanded "
                                 f"(line {event.start_mark.line + 1})")


def load_bounded(path: str) -> Any:
    """The file's single yaml document within the bounds above; ShapeFileError names the
    file and what was wrong (never a RecursionError, UnicodeDecodeError or a hang)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ShapeFileError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise ShapeFileError(f"{path} is larger than {MAX_BYTES} bytes (the shape file limit)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ShapeFileError(f"{path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                             f"{exc.start})") from None
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        return None if node is None else loader.construct_document(node)
    except ShapeFileError as exc:
        raise ShapeFileError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "parse error"
        raise ShapeFileError(f"{path} is not valid yaml: {first}") from None
    except (ValueError, TypeError, OverflowError) as exc:   # e.g. a timestamp 2020-13-45
        raise ShapeFileError(f"{path}: a value cannot be read: {exc}") from None
    finally:
        loader.dispose()


def _number_like(word: str) -> bool:
    """A word that was meant as a number: starts with a digit, sign or point (`1O24`, `1e6`,
    which yaml 1.1 reads as text), or reads as one with O/o for 0 and l/I for 1 (`O24`)."""
    w = word.strip()
    if _NUMBER_LIKE.match(w):
        return True
    return bool(_FLOAT_RE.match(w.translate(str.maketrans("OolI", "0011"))))


def shape_problem(value: Any) -> Optional[str]:
    """Why a shape entry cannot be measured, or None.

    A list with at least one integer, of positive integers that fit int64 (`[0, 64]` once
    ran as a "measured" empty shape), nested lists, words and true/false. Words and booleans
    are parameters, not dimensions: the class-list entries the shape plugins accept carry
    conv padding modes ("valid") and flags (align_corners: true).
    """
    if not isinstance(value, (list, tuple)) or not value:
        return _NOT_DIMS
    found_int = False
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, bool):
            continue
        if isinstance(v, str):
            if not v.strip():
                return _NOT_DIMS
            if _number_like(v):
                return f"has {v!r}, a word that reads like a mistyped number"
            continue
        if isinstance(v, int):
            if v <= 0:
                return _NOT_DIMS
            if v > INT64_MAX:
                return f"has dimension {v}, which does not fit int64 (max {INT64_MAX})"
            found_int = True
            continue
        if isinstance(v, (list, tuple)) and v:
            stack.extend(v)
            continue
        return _NOT_DIMS
    return None if found_int else _NOT_DIMS


def _positive_dims(value) -> bool:
    """True when `shape_problem` finds nothing (positive int64 dimensions, words, flags)."""
    return shape_problem(value) is None


def largest_tensor_elements(shape: Sequence[Any]) -> int:
    """A lower bound on the elements of the largest tensor a benchmark builds from `shape`.

    Lists nested in the entry are tensor shapes (index: `[[268435456], [[65536]]]`): the
    largest product. A flat entry is either a tensor shape or a parameter list such as
    `B, M, N, K` (BlasBenchmark's `[16, 4096, 4096, 4096]` makes 16x4096x4096 matrices, while
    the product of all four would ask for 2.2 TB): the two largest dimensions, which every
    such list puts into one tensor (M x N, N x C x H x W, ...).
    """
    nested = [x for x in shape if isinstance(x, (list, tuple))]
    if nested:
        return max(_tensor_elements(x) for x in nested)
    dims = sorted((int(x) for x in shape if isinstance(x, int) and not isinstance(x, bool)), reverse=True)
    return math.prod(dims[:2])


def _tensor_elements(shape: Sequence[Any]) -> int:
    nested = [x for x in shape if isinstance(x, (list, tuple))]
    if nested:
        return max(_tensor_elements(x) for x in nested)
    return math.prod(int(x) for x in shape if isinstance(x, int) and not isinstance(x, bool))


def smallest_element(dtypes: Iterable[str]) -> Tuple[int, str]:
    """(bytes, dtype word) of the smallest element the run asks for; (1, 'any dtype') when
    DTYPES is empty or a word is not in DTYPE_BYTES."""
    sizes = [(DTYPE_BYTES.get(d.lower(), 1), d) for d in dtypes]
    if not sizes or any(d.lower() not in DTYPE_BYTES for d in dtypes):
        return 1, "any dtype"
    return min(sizes)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.4g} {unit}"
        n /= 1024
    return f"{n:.4g} PiB"


def memory_problem(shape: Sequence[Any], dtypes: Iterable[str], memory: Tuple[int, str]) -> Optional[str]:
    """Why a shape's largest tensor cannot fit in `memory` ((bytes, where)), or None."""
    elements = largest_tensor_elements(shape)
    size, dtype = smallest_element(dtypes)
    need = elements * size
    if need <= memory[0]:
        return None
    return (f"needs a tensor of at least {elements} elements x {size} B ({dtype}) = "
            f"{_fmt_bytes(need)}, more than {memory[1]} ({_fmt_bytes(memory[0])})")


def host_memory() -> Optional[int]:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def device_memory(backend: Any, env: Dict[str, str]) -> Optional[Tuple[int, str]]:
    """(bytes, where) the shapes must fit in: the run's device's total memory when the
    backend's query tool answers (`memory_query_argv`, MiB per line), else the host's memory
    (a generous bound: the CPU harness, or a tool that is missing). None: neither is known.

    The device is the first of the visibility variable, else ZL_DEVICE; with neither, the
    largest card the tool lists (never a refusal the run's card would not make)."""
    argv = tuple(getattr(backend, "memory_query_argv", ()) or ())
    if argv:
        visible = backend.inherited_devices(env) if hasattr(backend, "inherited_devices") else []
        device = (visible[0] if visible else env.get("ZL_DEVICE", "")).strip()
        cmd = device_argv(argv, device)
        try:
            # Bounded: vendor tools have been seen to hang.
            proc = subprocess.run(cmd, text=True, capture_output=True, timeout=20)
            mib = [int(x.strip()) for x in proc.stdout.splitlines() if x.strip().isdigit()]
        except (OSError, subprocess.SubprocessError, ValueError):
            proc, mib = None, []
        if proc is not None and proc.returncode == 0 and mib:
            where = f"device {device}'s memory" if device else "the largest device's memory"
            return (mib[0] if device else max(mib)) * 2 ** 20, where
    host = host_memory()
    return (host, "the host's memory") if host else None


def validate_shape_file(path: str, op: str, dtypes: Iterable[str] = (),
                        memory: Optional[Tuple[int, str]] = None) -> Optional[str]:
    """ShapeFileError for an unusable file; a note (str) when the op's key is absent but a
    Benchmark class key may match it (upstream looks up op_name, then the class chain).
    `memory` ((bytes, where), see device_memory): every shape's largest tensor, at the
    smallest element size among `dtypes`, must fit in it."""
    data = load_bounded(path)
    if not isinstance(data, dict) or not data:
        raise ShapeFileError(f"{path} holds no operator entries (empty or not a mapping); "
                             "SHAPE_FILE=upstream runs FlagGems' own shapes")
    keys = [op] if op in data else [k for k in data if isinstance(k, str) and k.endswith("Benchmark")]
    if not keys:
        raise ShapeFileError(f"{path} has no '{op}:' entry (keys: "
                             f"{', '.join(map(str, list(data)[:8]))}); the run would measure the "
                             "benchmark's own shapes instead. Add the key, or say SHAPE_FILE=upstream")
    dtypes = list(dtypes)
    for key in keys:
        entry = data[key]
        shapes = entry.get("shapes") if isinstance(entry, dict) else None
        if not isinstance(shapes, list) or not shapes:
            raise ShapeFileError(f"{path}: '{key}' has no 'shapes:' list")
        for shape in shapes:
            problem = shape_problem(shape)
            if problem:
                raise ShapeFileError(f"{path}: '{key}' shape {_short(shape)} {problem}")
            problem = memory and memory_problem(shape, dtypes, memory)
            if problem:
                raise ShapeFileError(f"{path}: '{key}' shape {_short(shape)} {problem}")
    if keys != [op]:
        return (f"{path} has no '{op}:' key; FlagGems' class-chain lookup decides among "
                f"{', '.join(keys)}")
    return None


def _short(shape: Any, limit: int = 120) -> str:
    text = repr(shape)
    return text if len(text) <= limit else text[:limit] + "...]"


def inline_yaml(core: Path, inline_text: str, tmpdir: str, owner_pid: int) -> str:
    """The built-in inline entries laid over upstream's core_shapes.yaml.

    Upstream's --shape_file replaces core_shapes.yaml instead of merging, so an op the
    inline yaml does not list would fall to DEFAULT_SHAPES (mm got 1-D shapes on the H200
    and died with "expected 4, got 1").
    """
    base = {}
    if core.is_file():
        base = yaml.safe_load(core.read_text(encoding="utf-8")) or {}
    try:
        base.update(yaml.safe_load(inline_text) or {})
    except yaml.YAMLError as exc:
        raise ShapeFileError(f"the built-in inline shape yaml does not parse: {exc}") from None
    fd, path = tempfile.mkstemp(prefix=f"zl_inline_shapes.{owner_pid}.", suffix=".yaml", dir=tmpdir)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        yaml.safe_dump(base, handle, default_flow_style=None, sort_keys=False)
    return path


