"""Registered FlagGems benchmark classes that build special inputs, and how a yaml shape maps
onto each one's inputs (the state of `_bespoke_shape_plugin`).

These classes never read `self.shapes`: max_pool2d loops over a list written inside
`get_input_iter`, upsample_bilinear2d_aa_backward over `self._cfgs` set in `__init__`,
flash_mla_with_kvcache over `TestParam` records. Nothing generic can reach them, so each is
registered by class name with the field order of its yaml shapes and a builder that feeds
those fields to the class's own input code (its `input_fn`, `make_input`, or its own
iterator with one record swapped in); no input construction is re-implemented here.

An entry checks that the attributes it drives still exist; when upstream changed the class,
or the yaml has no key or another arity, one line names the class and upstream's shapes are
measured, never a mix.

Not registered (see docs/shape-coverage.md): MoE classes of FlagGems ed2508bcb all assign
literal shapes in `set_shapes` and read `self.shapes`, which `_shape_inject_plugin` reaches.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

# Marks a Benchmark instance (and the replacement function) the bespoke plugin handles, so the
# iter-inject plugin's wrapper passes the call through instead of deciding a second time.
BESPOKE_OWNER = "_zl_bespoke_owner"
DECISION = "_zl_bespoke_decision"


def _via_input_fn(bench: Any, shapes: Sequence[tuple], dtype: Any, original: Callable) -> Iterator:
    for shape in shapes:
        yield from bench.input_fn(tuple(shape), dtype, bench.device)


def _via_cfgs(bench: Any, shapes: Sequence[tuple], dtype: Any, original: Callable) -> Iterator:
    # The class's own iterator builds the inputs; it sees one record at a time. The label
    # column it unpacks (and ignores) is filled with "yaml".
    for shape in shapes:
        bench.__dict__["_cfgs"] = [tuple(shape) + ("yaml",)]
        yield from original(bench, dtype)


_MLA_FIELDS = ("batch", "topk", "h_q", "d_qk", "is_fp8", "have_attn_sink")


def _via_test_param(bench: Any, shapes: Sequence[tuple], dtype: Any, original: Callable) -> Iterator:
    test_param = getattr(sys.modules.get(type(bench).__module__), "TestParam")
    for shape in shapes:
        values = dict(zip(_MLA_FIELDS, shape))
        for flag in ("is_fp8", "have_attn_sink"):
            values[flag] = bool(values[flag])
        yield from bench.make_input(test_param(**values))


@dataclass(frozen=True)
class Entry:
    cls: str
    op: str
    fields: str                      # the yaml shape's field order
    mapping: str                     # how the fields become the class's inputs
    arity: int
    requires: Tuple[str, ...]        # attributes the builder drives (module-level names as "module:X")
    iterate: Callable[[Any, Sequence[tuple], Any, Callable], Iterator]
    own: Optional[Callable[[Any], Optional[List[tuple]]]] = None  # upstream's shapes, for the record

    def missing(self, bench: Any) -> List[str]:
        gone = []
        for name in self.requires:
            if name.startswith("module:"):
                if not hasattr(sys.modules.get(type(bench).__module__), name[len("module:"):]):
                    gone.append(name)
            elif not hasattr(bench, name):
                gone.append(name)
        return gone


_POOL_MAPPING = ("the yaml shape is the input tensor's shape; kernel_size/stride/padding stay "
                 "those of the class's input_fn")
ENTRIES = (
    Entry("MaxPool2dBenchmark", "max_pool2d_with_indices", "N, C, H, W", _POOL_MAPPING, 4,
          ("input_fn",), _via_input_fn),
    Entry("AvgPool2dBenchmark", "avg_pool2d", "N, C, H, W", _POOL_MAPPING, 4, ("input_fn",), _via_input_fn),
    Entry("CudnnConv2dBenchmark", "cudnn_convolution",
          "N, C_in, H, W, C_out, K_h, K_w, stride, padding, groups",
          "input (N, C_in, H, W), weight (C_out, C_in/groups, K_h, K_w), stride, padding and groups "
          "passed to the class's input_fn as one tuple, exactly like its own list", 10,
          ("input_fn",), _via_input_fn),
    Entry("UpsampleBilinear2dAaBackwardBenchmark", "upsample_bilinear2d_aa_backward",
          "N, C, H_in, W_in, H_out, W_out, align_corners",
          "grad_output (N, C, H_out, W_out), output_size [H_out, W_out], input_size [N, C, H_in, W_in], "
          "align_corners (0/1); built by the class's own get_input_iter from a one-record _cfgs", 7,
          ("_cfgs",), _via_cfgs, own=lambda b: [tuple(c[:7]) for c in getattr(b, "_cfgs", [])]),
    Entry("FlashMLAWithKVCacheBenchmark", "flash_mla_with_kvcache", ", ".join(_MLA_FIELDS),
          "TestParam(batch, topk, h_q, d_qk, is_fp8, have_attn_sink), other TestParam fields at their "
          "defaults (h_kv=1, d_v=512, page_block_size=64); inputs from the class's make_input", 6,
          ("make_input", "module:TestParam"), _via_test_param),
)
REGISTRY: Dict[str, Entry] = {e.cls: e for e in ENTRIES}


class BespokeInjector:
    """Replaces `get_input_iter` of registered classes; decides once per benchmark instance."""

    def __init__(self, log: Callable[[str], None]):
        from zl.shapes.sources import Recorder

        self.log = log
        self.recorder = Recorder("_bespoke_shape_plugin")
        self.statements: List[str] = []

    def say(self, message: str) -> None:
        self.statements.append(message)
        self.log(message)

    def replacement(self, entry: Entry, previous: Callable) -> Callable:
        def get_input_iter(bench, dtype):
            bench.__dict__[BESPOKE_OWNER] = True
            decision = bench.__dict__.get(DECISION)
            if decision is None:
                decision = bench.__dict__[DECISION] = self.decide(entry, bench)
            if decision:
                return entry.iterate(bench, decision, dtype, previous)
            return previous(bench, dtype)

        get_input_iter.__wrapped__ = previous
        setattr(get_input_iter, BESPOKE_OWNER, True)
        return get_input_iter

    def _own(self, entry: Entry, bench: Any) -> Optional[List[tuple]]:
        if entry.own is not None:
            return entry.own(bench)
        from zl.shapes import mechanism as mech

        kind = mech.live_iter_kind(type(bench))
        return list(kind.literal) if kind.literal is not None else None

    def decide(self, entry: Entry, bench: Any) -> List[tuple]:
        """The yaml shapes to measure, or [] to measure upstream's (after saying why)."""
        from zl.shapes import mechanism as mech
        from zl.shapes.sources import (HARDCODED, UPSTREAM, YAML, ShapeYamlError, arities, load_table,
                                       lookup, op_of, requested_file)

        op, own = op_of(bench), self._own(entry, bench)
        mechanism = f"bespoke:{entry.cls}"
        keep = [HARDCODED] * (len(own) if own else 1)
        path = requested_file()
        if path is None:
            self.recorder.record(bench, mechanism, own, [UPSTREAM] * (len(own) if own else 1))
            return []
        gone = entry.missing(bench)
        if gone:
            self.say(f"{entry.cls} (op={op}) no longer has {', '.join(gone)}: the registered mapping "
                     f"does not fit this FlagGems; upstream's shapes are measured")
            self.recorder.record(bench, mechanism, own, keep)
            return []
        try:
            key, shapes, tried = lookup(load_table(path), op, type(bench))
        except ShapeYamlError as exc:
            self.say(f"{exc}; {entry.cls} (op={op}) measures upstream's shapes")
            self.recorder.record(bench, mechanism, own, keep)
            return []
        if shapes is None:
            self.say(f"no yaml key for {entry.cls} (op={op}; tried: {', '.join(tried)}); "
                     f"upstream's shapes are measured")
            self.recorder.record(bench, mechanism, own, keep)
            return []
        if not shapes or arities(shapes) != [entry.arity]:
            self.say(f"yaml key '{key}' has shape arity {arities(shapes)} but {entry.cls} takes "
                     f"{entry.arity} fields ({entry.fields}); upstream's shapes are measured, none from the yaml")
            self.recorder.record(bench, mechanism, own, keep, key)
            return []
        self.say(f"{entry.cls} (op={op}): {len(shapes)} shape(s) from yaml key '{key}' as ({entry.fields})")
        self.recorder.record(bench, mechanism, shapes, [YAML] * len(shapes), key)
        return list(shapes)
