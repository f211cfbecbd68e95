"""Which mechanism fixes a Benchmark class's shapes, read from its source with `ast`.

One reading for the static survey (`zl.shapes.coverage`, no import of FlagGems) and for the
plugins at run time (`inspect.getsource` of the live method), so the table in
docs/shape-coverage.md and what a run does cannot disagree.

`get_input_iter` decides what is measured:
- `self_shapes`   it reads `self.shapes`: the shapes come from `set_shapes` (see below).
- `class_list`    it loops over a class-level list other than `shapes`, e.g.
                  `for shape in self.DEFAULT_SHAPES` (conv2d_padding).
- `local_list`    it loops over a list literal written inside the method (max_pool2d).
- `bespoke`       anything else: inputs built from constants or special structures.

For `self_shapes`, `set_shapes` decides where `self.shapes` comes from:
- `yaml`      upstream's lookup (base class, or an override that calls super() first).
- `override`  an override that assigns its own shapes (literals) and never reads the yaml.
- `noop`      an override that does nothing (or re-assigns DEFAULT_SHAPES).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Set, Tuple

SELF_SHAPES = "self_shapes"
CLASS_LIST = "class_list"
LOCAL_LIST = "local_list"
BESPOKE = "bespoke"
UNKNOWN = "unknown"

YAML = "yaml"
OVERRIDE = "override"
NOOP = "noop"


@dataclass(frozen=True)
class IterKind:
    kind: str                 # SELF_SHAPES / CLASS_LIST / LOCAL_LIST / BESPOKE / UNKNOWN
    attr: str = ""            # CLASS_LIST: the attribute; LOCAL_LIST: the local name
    literal: Optional[Tuple[Any, ...]] = None  # LOCAL_LIST: the list, when it is a literal


def _self_attr(node: ast.AST, cls_names: Iterable[str]) -> Optional[str]:
    """`self.X`, `type(self).X`, `self.__class__.X` or `<ClassName>.X` -> X."""
    if not isinstance(node, ast.Attribute):
        return None
    base = node.value
    if isinstance(base, ast.Name) and (base.id == "self" or base.id in cls_names):
        return node.attr
    if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "type" \
            and len(base.args) == 1 and isinstance(base.args[0], ast.Name) and base.args[0].id == "self":
        return node.attr
    if isinstance(base, ast.Attribute) and base.attr == "__class__" \
            and isinstance(base.value, ast.Name) and base.value.id == "self":
        return node.attr
    return None


def _loop_iters(func: ast.AST) -> List[ast.AST]:
    iters: List[ast.AST] = []
    for node in ast.walk(func):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            iters.append(node.iter)
        elif isinstance(node, ast.comprehension):
            iters.append(node.iter)
    return iters


def _reads_self_shapes(func: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "shapes" and isinstance(n.value, ast.Name)
               and n.value.id == "self" and isinstance(n.ctx, ast.Load) for n in ast.walk(func))


def _local_lists(func: ast.AST) -> dict:
    found = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, (ast.List, ast.Tuple)):
            try:
                found[node.targets[0].id] = tuple(ast.literal_eval(node.value))
            except ValueError:
                found[node.targets[0].id] = None
    return found


def classify_iter(func: ast.AST, class_attrs: Set[str], cls_names: Iterable[str] = ()) -> IterKind:
    """Classify one `get_input_iter` function node; class_attrs = class-level names along the MRO."""
    if _reads_self_shapes(func):
        return IterKind(SELF_SHAPES)
    locals_ = _local_lists(func)
    for it in _loop_iters(func):
        attr = _self_attr(it, tuple(cls_names))
        if attr and attr != "shapes" and attr in class_attrs:
            return IterKind(CLASS_LIST, attr)
        if isinstance(it, ast.Name) and it.id in locals_:
            return IterKind(LOCAL_LIST, it.id, locals_[it.id])
    return IterKind(BESPOKE)


def _body_without_docstring(func: ast.FunctionDef) -> list:
    body = list(func.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body


def classify_set_shapes(func: Optional[ast.FunctionDef]) -> str:
    """YAML / OVERRIDE / NOOP for the effective set_shapes (None = upstream's base method)."""
    if func is None:
        return YAML
    body = _body_without_docstring(func)
    for node in ast.walk(func):
        # super().set_shapes(...) or Base.set_shapes(self, ...): upstream's lookup runs first.
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "set_shapes":
            return YAML
    if not body or all(isinstance(n, ast.Pass) or (isinstance(n, ast.Return) and n.value is None) for n in body):
        return NOOP
    if len(body) == 1 and isinstance(body[0], ast.Assign) and isinstance(body[0].value, ast.Attribute) \
            and body[0].value.attr == "DEFAULT_SHAPES":
        return NOOP
    return OVERRIDE


def function_node(func: Any) -> Optional[ast.FunctionDef]:
    """The ast node of a live function (wrappers unwrapped); None when its source is unavailable."""
    while hasattr(func, "__wrapped__"):
        func = func.__wrapped__
    try:
        source = textwrap.dedent(inspect.getsource(func))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node
    return None


def defining_class(cls: type, method: str) -> Optional[type]:
    for klass in cls.__mro__:
        if method in klass.__dict__:
            return klass
    return None


def live_iter_kind(cls: type) -> IterKind:
    """classify_iter for a live Benchmark class (its effective get_input_iter)."""
    owner = defining_class(cls, "get_input_iter")
    node = function_node(owner.__dict__["get_input_iter"]) if owner is not None else None
    if node is None:
        return IterKind(UNKNOWN)
    attrs = {name for klass in cls.__mro__ for name in vars(klass) if not name.startswith("__")}
    return classify_iter(node, attrs, [k.__name__ for k in cls.__mro__])
