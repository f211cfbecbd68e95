#!/usr/bin/env python3
"""Which cubin sections differ between two compilations of the same FlagGems kernel whose
only difference is where FlagGems and Triton keep their caches (the A/A of a screen).

    python3 benchmarks/binary_sections_probe.py WORK_DIR [OP]

Compiles torch.<OP> or torch.nn.functional.<OP> (default abs) on a 4096x4096 float16 tensor
through flag_gems in two fresh processes, each with its own HOME, FLAGGEMS_CACHE_DIR and
TRITON_CACHE_DIR under WORK_DIR, then prints every section of each pair of same-named cubins
with its size, its sha256 prefix, and whether zl.ir.binary leaves it out of the code digest.
Inputs: one CUDA GPU, flag_gems importable. Outputs: the table on stdout; the two caches stay
under WORK_DIR.
Exit status: 0 done, 1 a compiling process failed, 2 bad arguments.
"""
import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zl.ir import binary  # noqa: E402

ap = argparse.ArgumentParser(prog="binary_sections_probe.py", description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("work", help="folder for the two compilations' caches")
ap.add_argument("op", nargs="?", default="abs", help="torch or torch.nn.functional function (default abs)")
args = ap.parse_args()
work, op = Path(args.work), args.op
code = ("import torch, flag_gems\n"
        "x = torch.randn(4096, 4096, device='cuda', dtype=torch.float16)\n"
        # gelu lives in torch.nn.functional only
        f"fn = getattr(torch, {op!r}, None) or getattr(torch.nn.functional, {op!r})\n"
        f"with flag_gems.use_gems():\n    fn(x)\n"
        "torch.cuda.synchronize()\n")
cubins = {}
for side in ("a", "b"):
    root = work / f"side_{side}_{os.urandom(3).hex()}"
    env = dict(os.environ, HOME=str(root / "home"), FLAGGEMS_CACHE_DIR=str(root / "fg"),
               TRITON_CACHE_DIR=str(root / "triton"))
    if subprocess.run([sys.executable, "-c", code], env=env).returncode != 0:
        print(f"!!! compiling {op} failed (side {side})", file=sys.stderr)
        sys.exit(1)
    cubins[side] = {p.name: p.read_bytes() for p in (root / "triton").rglob("*.cubin")}
common = sorted(set(cubins["a"]) & set(cubins["b"]))
print(f"op={op} cubins: a={len(cubins['a'])} b={len(cubins['b'])} same name={len(common)}")
for name in common:
    a, b = cubins["a"][name], cubins["b"][name]
    print(f"== {name}: raw equal={a == b} code_digest equal={binary.code_digest(a) == binary.code_digest(b)}")
    sa = {n: d for n, _, d in binary._sections(a)}
    sb = {n: d for n, _, d in binary._sections(b)}
    for sec in sorted(set(sa) | set(sb)):
        da, db = sa.get(sec), sb.get(sec)
        same = "same" if da == db else "DIFF"
        ha = hashlib.sha256(da).hexdigest()[:10] if da is not None else "-"
        hb = hashlib.sha256(db).hexdigest()[:10] if db is not None else "-"
        print(f"  {sec:<32} {same:<4} skipped={binary.skipped(sec)!s:<5} "
              f"size {len(da or b'')}/{len(db or b'')} {ha} {hb}")
