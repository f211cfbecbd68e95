"""Replay recorded Triton listener/hook payloads into an IRCollector (no GPU needed).

On the CPU the interpreter compiles nothing, so IR tests drive the collector with
tests/fixtures/ir/payloads*.json (hand-built to the documented structure, or recorded
on a GPU by benchmarks/capture_ir_payloads.py).
"""
import json
from pathlib import Path

from zl.ir.variants import replay_kwargs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ir"
HANDBUILT = FIXTURES / "payloads_handbuilt.json"
ALL_FIXTURES = sorted(FIXTURES.glob("payloads*.json"))


class Launch:
    """Stands in for triton's LazyDict: the hook reads `.data`."""

    def __init__(self, data):
        self.data = data


def replay(collector, doc, tmp_path):
    """Feed recorded events to the collector the way Triton would call it."""
    ir_dir = Path(tmp_path) / "cache"
    ir_dir.mkdir(exist_ok=True)
    for ev in doc["events"]:
        kind = ev["kind"]
        if kind == "compile":
            payload = ev["payload"]
            group = dict(payload["metadata_group"])
            h = payload["metadata"]["hash"]
            for ext, text in (ev.get("ir") or {}).items():
                name = next(k for k in group if k.endswith("." + ext))
                path = ir_dir / f"{h}.{ext}"
                path.write_text(text)
                group[name] = str(path)
            collector.on_compile(**replay_kwargs(payload, group))
        elif kind == "load":
            collector.on_kernel_load(None, ev["function"], ev["name"], {}, ev["hash"])
        elif kind == "launch":
            collector.on_launch(Launch({"name": ev["name"], "function": ev["function"], "stream": 0}))
        elif kind == "begin_input":
            collector.begin_input()
        elif kind == "end_input":
            collector.end_input(ev["label"])
        elif kind == "sweep_begin":
            collector.sweep_depth += 1
        elif kind == "sweep_end":
            collector.sweep_depth -= 1
        else:
            raise AssertionError(f"unknown event {kind}")


def index_rows(dump_dir):
    lines = (Path(dump_dir) / "index.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    return header, [dict(zip(header, line.split("\t"))) for line in lines[1:]]


def first_compile_payload():
    doc = json.loads(HANDBUILT.read_text())
    return next(ev["payload"] for ev in doc["events"] if ev["kind"] == "compile")
