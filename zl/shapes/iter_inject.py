"""The shape yaml for classes whose `get_input_iter` loops over a class-level list, and the
provenance of every measured benchmark (the state of `_shape_iter_inject_plugin`).

Upstream reads the yaml only in `set_shapes`; a class such as conv2d_padding's
`Conv2DPaddingBenchmark` loops `for shape in self.DEFAULT_SHAPES`, so a yaml entry for it is
read, assigned to `self.shapes` and never used: the run measures the class's list and exits 0.
Here the yaml entry (upstream's lookup: op_name, then class names along the MRO) replaces the
list on the instance when every entry has the list's own tuple arity; otherwise one line
names the class and the list is measured, never a mix of the two.

Every other class only has its provenance recorded (`zl.shapes.sources`); the lines about
set_shapes classes are `_shape_inject_plugin`'s, those about bespoke classes
`_bespoke_shape_plugin`'s.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional

from zl.shapes import bespoke, mechanism as mech
from zl.shapes.bespoke import BESPOKE_OWNER
from zl.shapes.sources import (HARDCODED, UPSTREAM, YAML, Recorder, ShapeYamlError, arities, as_tuple,
                               load_table, lookup, op_of, requested_file)

TAG = "[shape-iter-inject-plugin]"
DECISION = "_zl_iter_decision"


class IterInjector:
    def __init__(self, log: Callable[[str], None]):
        self.log = log
        self.recorder = Recorder("_shape_iter_inject_plugin")
        self._kinds: Dict[type, mech.IterKind] = {}
        self.statements: List[str] = []

    def say(self, message: str) -> None:
        self.statements.append(message)
        self.log(message)

    def kind(self, cls: type) -> mech.IterKind:
        if cls not in self._kinds:
            self._kinds[cls] = mech.live_iter_kind(cls)
        return self._kinds[cls]

    def get_input_iter(self, bench: Any, original: Callable, dtype: Any) -> Iterator:
        if getattr(original, BESPOKE_OWNER, False) or getattr(bench, BESPOKE_OWNER, False):
            return original(bench, dtype)
        # Decided once per benchmark (run() asks once per dtype), kept on the instance.
        decision = bench.__dict__.get(DECISION)
        if decision is None:
            decision = bench.__dict__[DECISION] = self.decide(bench)
        if decision.get("attr"):
            # An instance attribute shadows the class list for this benchmark only.
            bench.__dict__[decision["attr"]] = list(decision["shapes"])
        return original(bench, dtype)

    def decide(self, bench: Any) -> Dict[str, Any]:
        cls = type(bench)
        kind = self.kind(cls)
        path = requested_file()
        if kind.kind == mech.SELF_SHAPES:
            return self._record_self_shapes(bench, path)
        if kind.kind == mech.CLASS_LIST:
            own = [as_tuple(s) for s in (getattr(cls, kind.attr, None) or [])]
            return self._class_list(bench, kind.attr, own, path)
        own_literal = list(kind.literal) if kind.literal is not None else None
        if path is not None:
            entry = bespoke.REGISTRY.get(cls.__name__)
            hint = (" (_bespoke_shape_plugin has an entry for it but is not loaded)" if entry else "")
            what = {mech.LOCAL_LIST: f"loops over the list {kind.attr} written inside get_input_iter",
                    mech.BESPOKE: "builds its inputs without a shape list",
                    mech.UNKNOWN: "has no readable get_input_iter"}[kind.kind]
            self.say(f"no mechanism for {cls.__name__} (op={op_of(bench)}): it {what}; the yaml cannot "
                     f"reach it, upstream's shapes are measured{hint}")
        source = UPSTREAM if path is None else HARDCODED
        shapes = own_literal
        self.recorder.record(bench, kind.kind, shapes, [source] * (len(shapes) if shapes else 1))
        return {}

    def _class_list(self, bench: Any, attr: str, own: list, path: Optional[str]) -> Dict[str, Any]:
        cls_name, op = type(bench).__name__, op_of(bench)
        if path is None:
            self.recorder.record(bench, f"{mech.CLASS_LIST}:{attr}", own, [UPSTREAM] * len(own))
            return {}
        try:
            key, shapes, tried = lookup(load_table(path), op, type(bench))
        except ShapeYamlError as exc:
            self.say(f"{exc}; {cls_name} (op={op}) keeps its {len(own)} shape(s) from {attr}")
            shapes, key, tried = None, None, []
        if shapes is None:
            if tried:
                self.say(f"no yaml key for {cls_name} (op={op}; tried: {', '.join(tried)}); "
                         f"measuring its own {len(own)} shape(s) from {attr}")
            self.recorder.record(bench, f"{mech.CLASS_LIST}:{attr}", own, [HARDCODED] * len(own))
            return {}
        want, have = arities(shapes), arities(own)
        if not shapes or not own or want != have:
            self.say(f"yaml key '{key}' has shape arity {want} but {cls_name}.{attr} holds arity {have}; "
                     f"measuring its own {len(own)} shape(s), none from the yaml")
            self.recorder.record(bench, f"{mech.CLASS_LIST}:{attr}", own, [HARDCODED] * len(own), key)
            return {}
        self.say(f"{cls_name} (op={op}): {len(shapes)} shape(s) from yaml key '{key}' replace its "
                 f"{len(own)} in {attr}")
        self.recorder.record(bench, f"{mech.CLASS_LIST}:{attr}", shapes, [YAML] * len(shapes), key)
        return {"attr": attr, "shapes": shapes}

    def _record_self_shapes(self, bench: Any, path: Optional[str]) -> Dict[str, Any]:
        shapes = [as_tuple(s) for s in (getattr(bench, "shapes", None) or [])]
        if path is None:
            self.recorder.record(bench, mech.SELF_SHAPES, shapes, [UPSTREAM] * len(shapes))
            return {}
        key, wanted = None, None
        try:
            key, wanted, _ = lookup(load_table(path), op_of(bench), type(bench))
        except ShapeYamlError:
            pass  # _shape_inject_plugin names the unreadable yaml; every shape is the class's own
        from_yaml = list(wanted or [])
        self.recorder.record(bench, mech.SELF_SHAPES, shapes,
                             [YAML if s in from_yaml else HARDCODED for s in shapes], key)
        return {}
