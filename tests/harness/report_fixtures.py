"""Small run directories built from committed real H200 logs, for the report pages.

The logs are real H200 run logs (tests/fixtures/runlogs/h200: an A/A screen.tsv, and in
rounds.tar.xz a 4-round softmax A/B of DISABLE_LLVM_OPT with its status.tsv and
telemetry.tsv, and relu's first A/A round); those runs kept no run_identity.json, so each run
gets the caliber their screen.tsv recorded (cuda, device 0, cuda_graph, core, upstream,
isolated tuner cache, direct_repeat 1) and the record link of one record run
(harness.identity_links). The archive's members are written straight into the run
directories a test builds under its tmp_path (`rounds_file`); nothing is unpacked beside it.
The synthetic parser logs (tests/fixtures/runlogs/make_synthetic.py) are one archive too,
SYNTHETIC_ARCHIVE, read the same way (`synthetic_log`).
"""
from __future__ import annotations

import fnmatch
import functools
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Dict, Iterable, List, Union

from zl.runlog.parse import read_run_log

from .identity_links import link_fields

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNLOGS_H200 = REPO_ROOT / "tests" / "fixtures" / "runlogs" / "h200"
ROUNDS_ARCHIVE = RUNLOGS_H200 / "rounds.tar.xz"
# Folders in ROUNDS_ARCHIVE: softmax_rounds/ r<k>_<A|B>.run.log (k = 1..4), status.tsv,
# telemetry.tsv; relu_rounds/ r1_A.run.log, r1_B.run.log.
SOFTMAX_ROUNDS = "softmax_rounds"
RELU_ROUNDS = "relu_rounds"
H200_IDENTITY = {"backend": "cuda", "device": "0", "timer": "cuda_graph", "bench_level": "core",
                 "shape_mode": "upstream", "tuner_cache": "isolated", "direct_repeat": 1,
                 "device_name": "NVIDIA H200", "device_arch": "9.0"}
# make_synthetic.py's run.logs, by member name: softmax_gbps_two_dtypes.log,
# mm_tflops_duplicates.log, gelu_backward_cudagraph_failed.log, relu_colour_markers.log,
# fused_moe_folded.log, fused_moe_plain.log.
SYNTHETIC_ARCHIVE = REPO_ROOT / "tests" / "fixtures" / "runlogs" / "synthetic.tar.xz"
BATCH_COLUMNS = ("repo,op,op_file,run_name,backend,device,gpu,timer,status,return_code,elapsed_ms,"
                 "rows_total,rows_success,notes,out_dir")


def pack_members(members: Dict[str, bytes], archive: Path) -> None:
    """A fixture archive from {member name: bytes}: tar.xz with sorted names, mtime 0,
    uid/gid 0 and mode 0644, so the same members give the same bytes; written atomically."""
    from zl import atomic
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            data = members[name]
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode, info.uid, info.gid = len(data), 0, 0o644, 0, 0
            tar.addfile(info, io.BytesIO(data))
    atomic.write_bytes(Path(archive), buf.getvalue())


def pack_rounds(src: Path, archive: Path, folders: Iterable[str] = (SOFTMAX_ROUNDS, RELU_ROUNDS)) -> None:
    """How ROUNDS_ARCHIVE is made from loose folders under src (pack_members)."""
    names = sorted(p.relative_to(src).as_posix() for f in folders for p in (src / f).rglob("*")
                   if p.is_file())
    pack_members({name: (src / name).read_bytes() for name in names}, archive)


@functools.lru_cache(maxsize=None)
def archive_members(archive: Path) -> Dict[str, bytes]:
    """A fixture archive's members by name, read once per process (a few kB each)."""
    with tarfile.open(archive, "r:xz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _rounds() -> Dict[str, bytes]:
    """ROUNDS_ARCHIVE's members by name."""
    return archive_members(ROUNDS_ARCHIVE)


def synthetic_log(name: str, dest: Path) -> Path:
    """SYNTHETIC_ARCHIVE's member `name` ("mm_tflops_duplicates.log") written to the file
    dest (parents made); a name the archive lacks is a KeyError naming it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(archive_members(SYNTHETIC_ARCHIVE)[name])
    return dest


def rounds_names(folder: str) -> List[str]:
    """The member names under `folder` (SOFTMAX_ROUNDS, RELU_ROUNDS), sorted."""
    return sorted(n for n in _rounds() if n.startswith(f"{folder}/"))


def rounds_file(name: str, dest: Path) -> Path:
    """ROUNDS_ARCHIVE's member `name` ("softmax_rounds/r1_A.run.log") written to the file
    dest; a name the archive lacks is a KeyError naming it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(_rounds()[name])
    return dest


def run_dir(d: Path, log: Union[Path, str], mode: str, op: str, **identity) -> Path:
    """A run directory: `log` (a committed log's path, or a ROUNDS_ARCHIVE member name) as
    its run.log and the H200 caliber as its identity."""
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(log, str):
        rounds_file(log, d / "run.log")
    else:
        shutil.copy(log, d / "run.log")
    (d / "run_identity.json").write_text(json.dumps(
        {**H200_IDENTITY, "autotune_mode": mode, "op": op, **link_fields(mode), **identity}),
        encoding="utf-8")
    return d


# One hash per level, as the IR plugin records them (ttgir/ir_fingerprints.json).
SAME_CODE = {"ttgir": "7a" * 32, "llir": "1c" * 32, "ptx": "9e" * 32, "binary": "b1" * 32}


def write_fingerprints(run: Path, levels: Dict[str, str]) -> Path:
    """`<run>/ttgir/ir_fingerprints.json` recording each level's hash (schema 1: aggregate)."""
    d = Path(run) / "ttgir"
    d.mkdir(parents=True, exist_ok=True)
    (d / "ir_fingerprints.json").write_text(json.dumps(
        {"schema_version": 1, "levels": {lv: {"hash": h, "complete": True} for lv, h in levels.items()}}))
    return run


def write_results(run: Path, op: str, gems_scale: float = 1.0) -> Path:
    """`<run>/results/<op>.json` as _results_plugin writes it: one float32 shape, torch's
    output and FlagGems' (torch's times gems_scale: 1.0 matches, 1.5 is a MISMATCH)."""
    import torch
    from zl.results import capture

    doc = capture.ResultsFile(run, op)
    x = torch.linspace(1.0, 2.0, 64)
    for side, scale in (("torch", 1.0), ("gems", gems_scale)):
        doc.add(doc.key(side, "torch.float32", "[torch.Size([64])]"), side, [x * scale])
    return run


def ab_pair(root: Path, **after_identity) -> Dict[str, Path]:
    """The softmax A/B's round 1: side A (record) and side B (replay)."""
    return {"before": run_dir(root / "before", f"{SOFTMAX_ROUNDS}/r1_A.run.log", "record", "softmax"),
            "after": run_dir(root / "after", f"{SOFTMAX_ROUNDS}/r1_B.run.log", "replay", "softmax",
                             **after_identity)}


def rounds_root(campaign: Path, telemetry: bool = True) -> Path:
    """The softmax A/B laid out as ab_repeat.sh does: <campaign>/softmax/r<k>_<A|B>/ (4 rounds
    x 2 sides), <campaign>/status.tsv and the campaign's telemetry.tsv. Returns the
    operator's --ab-rounds root."""
    root = campaign / "softmax"
    for log in fnmatch.filter(rounds_names(SOFTMAX_ROUNDS), f"{SOFTMAX_ROUNDS}/r*_*.run.log"):
        cell = log.split("/")[-1].split(".")[0]
        run_dir(root / cell, log, "record" if cell.endswith("_A") else "replay", "softmax")
    rounds_file(f"{SOFTMAX_ROUNDS}/status.tsv", campaign / "status.tsv")
    if telemetry:
        rounds_file(f"{SOFTMAX_ROUNDS}/telemetry.tsv", campaign / "telemetry.tsv")
    return root


def screen_root(root: Path) -> Path:
    """A real A/A screen.tsv; softmax and relu cells from real round logs, abs without
    run directories (its row stays, with a note). Those rounds kept no IR, so each cell gets
    a fingerprint record matching its row: softmax (NO_IR_DIFF) identical at every level,
    binary included; relu (IR_CHANGED) the same TTGIR and a different LLVM IR onwards."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(RUNLOGS_H200 / "screen.tsv", root / "screen.tsv")
    for side, log in (("before", "r1_A"), ("after", "r2_A")):
        write_fingerprints(run_dir(root / f"softmax@float16_{side}", f"{SOFTMAX_ROUNDS}/{log}.run.log",
                                   "record" if side == "before" else "replay", "softmax"), SAME_CODE)
    write_fingerprints(run_dir(root / "relu@float16_before", f"{RELU_ROUNDS}/r1_A.run.log", "record",
                               "relu"), SAME_CODE)
    write_fingerprints(run_dir(root / "relu@float16_after", f"{RELU_ROUNDS}/r1_B.run.log", "replay",
                               "relu"), {**SAME_CODE, "llir": "2d" * 32, "ptx": "8f" * 32,
                                         "binary": "c2" * 32})
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
