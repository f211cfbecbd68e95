"""Small run directories built from committed real H200 logs, for the report pages.

The logs are real H200 run logs (tests/fixtures/runlogs/h200: a 4-round softmax A/B of
DISABLE_LLVM_OPT with its status.tsv and telemetry.tsv, relu's first A/A round, an A/A
screen.tsv); those runs kept no run_identity.json, so each run gets the caliber their
screen.tsv recorded (cuda, device 0, cuda_graph, core, upstream, isolated tuner cache,
direct_repeat 1).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict

from zl.runlog.parse import read_run_log

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNLOGS_H200 = REPO_ROOT / "tests" / "fixtures" / "runlogs" / "h200"
SOFTMAX_ROUNDS = RUNLOGS_H200 / "softmax_rounds"
RELU_ROUNDS = RUNLOGS_H200 / "relu_rounds"
H200_IDENTITY = {"backend": "cuda", "device": "0", "timer": "cuda_graph", "bench_level": "core",
                 "shape_mode": "upstream", "tuner_cache": "isolated", "direct_repeat": 1,
                 "device_name": "NVIDIA H200", "device_arch": "9.0"}
BATCH_COLUMNS = ("repo,op,op_file,run_name,backend,device,gpu,timer,status,return_code,elapsed_ms,"
                 "rows_total,rows_success,notes,out_dir")


def run_dir(d: Path, log: Path, mode: str, op: str, **identity) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(log, d / "run.log")
    (d / "run_identity.json").write_text(
        json.dumps({**H200_IDENTITY, "autotune_mode": mode, "op": op, **identity}), encoding="utf-8")
    return d


def ab_pair(root: Path, **after_identity) -> Dict[str, Path]:
    """The softmax A/B's round 1: side A (record) and side B (replay)."""
    return {"before": run_dir(root / "before", SOFTMAX_ROUNDS / "r1_A.run.log", "record", "softmax"),
            "after": run_dir(root / "after", SOFTMAX_ROUNDS / "r1_B.run.log", "replay", "softmax",
                             **after_identity)}


def rounds_root(campaign: Path, telemetry: bool = True) -> Path:
    """The softmax A/B laid out as ab_repeat.sh does: <campaign>/softmax/r<k>_<A|B>/ (4 rounds
    x 2 sides), <campaign>/status.tsv and the campaign's telemetry.tsv. Returns the
    operator's --ab-rounds root."""
    root = campaign / "softmax"
    for log in sorted(SOFTMAX_ROUNDS.glob("r*_*.run.log")):
        cell = log.name.split(".")[0]
        run_dir(root / cell, log, "record" if cell.endswith("_A") else "replay", "softmax")
    shutil.copy(SOFTMAX_ROUNDS / "status.tsv", campaign / "status.tsv")
    if telemetry:
        shutil.copy(SOFTMAX_ROUNDS / "telemetry.tsv", campaign / "telemetry.tsv")
    return root


def screen_root(root: Path) -> Path:
    """A real A/A screen.tsv; softmax and relu cells from real round logs, abs without
    run directories (its row stays, with a note)."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(RUNLOGS_H200 / "screen.tsv", root / "screen.tsv")
    run_dir(root / "softmax@float16_before", SOFTMAX_ROUNDS / "r1_A.run.log", "record", "softmax")
    run_dir(root / "softmax@float16_after", SOFTMAX_ROUNDS / "r2_A.run.log", "replay", "softmax")
    run_dir(root / "relu@float16_before", RELU_ROUNDS / "r1_A.run.log", "record", "relu")
    run_dir(root / "relu@float16_after", RELU_ROUNDS / "r1_B.run.log", "replay", "relu")
    return root


def batch_dir(root: Path) -> Path:
    """A run_batch.py-shaped batch over the committed H200 run logs; gelu_backward's
    graph-capture failure is the failed operator."""
    rows = [BATCH_COLUMNS]
    for name, status, rc in (("zl_softmax_folded", "success", 0), ("zl_layer_norm_node", "success", 0),
                             ("upstream_mm_kernel", "success", 0),
                             ("upstream_gelu_backward_cudagraph", "failed", 1)):
        op = name.split("_", 1)[1]
        d = run_dir(root / "FlagGems" / op, RUNLOGS_H200 / f"{name}.log", "record", op)
        parsed = read_run_log(d)
        rows.append(f"FlagGems,{op},{op},{op},cuda,0,0,cuda_graph,{status},{rc},30000,"
                    f"{len(parsed.rows)},{len(parsed.success_rows())},,{d}")
    (root / "ops_status.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root
