"""`$OUT_DIR/shapes.yaml`: the shapes each benchmark really used, valid as a SHAPE_FILE
for a rerun. The yaml the run was started with (written there by run_pytest.sh) is kept
as `shapes.source.yaml` the first time the record replaces it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional

import yaml

from zl import atomic

RECORD_NAME = "shapes.yaml"
SOURCE_NAME = "shapes.source.yaml"
HEADER = "# shapes each benchmark really used (written by _shape_inject_plugin)\n"


class ShapeRecord:
    """op name -> {shapes, shape_desc, source, key, class}; rewritten atomically on each add."""

    def __init__(self, out_dir: Optional[str]):
        self.out_dir = (out_dir or "").strip()
        self.effective: Dict[str, Dict[str, Any]] = {}

    def add(self, bench: Any, source: str, key: Optional[str]) -> None:
        op = str(getattr(bench, "op_name", "") or type(bench).__name__)
        shapes = [list(s) if isinstance(s, tuple) else s for s in (getattr(bench, "shapes", None) or [])]
        self.effective[op] = {"shapes": shapes, "shape_desc": getattr(bench, "shape_desc", ""),
                              "source": source, "key": key or "", "class": type(bench).__name__}
        self.write()

    def write(self) -> None:
        if not self.out_dir or not os.path.isdir(self.out_dir):
            return
        target = Path(self.out_dir) / RECORD_NAME
        source_copy = Path(self.out_dir) / SOURCE_NAME
        if target.exists() and not source_copy.exists():
            os.replace(target, source_copy)
        atomic.write_text(target, HEADER + yaml.safe_dump(self.effective, default_flow_style=None,
                                                          sort_keys=True))
