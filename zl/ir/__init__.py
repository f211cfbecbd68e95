"""IR tooling shared by the IR plugin and every A/B driver.

- `zl.ir.fingerprint`: the one rule that says whether two runs generated the
  same code (and the convert_layout counting scoped to measured kernels).
  `_ir_fingerprint.sh` wraps its CLI so shell drivers use the same rule.
- `zl.ir.per_variant`: matches two runs' variants by identity (shape, kernel, warps,
  stages, constexprs, dtypes, specialization), for the VARIANTS_DIFFER verdict.
- `zl.ir.variants`: turns Triton compilation-listener payloads into plain,
  JSON-serialisable variant records.
- `zl.ir.naming`: readable, collision-free file names for the variants of one
  (shape, kernel) group, plus the abbreviation legend.
- `zl.ir.dump`: writes the `ttgir/` tree, `index.tsv` and `naming.md`.
- `zl.ir.collect`: what the IR plugin learns from Triton's callbacks (variants,
  launches per benchmark input, sweep vs measured) and its dump.
- `zl.ir.hooks`: attaches a collector to Triton and FlagGems' Benchmark and takes it
  off again (`IRSession`); used by `_ir_meta_plugin` and benchmarks/capture_ir_payloads.py.
"""

# Which launches count as the operator's (the IR collector's rules). 2: the autotuner's reset
# after its sweep counts as the sweep (zl.ir.hooks). IR collected under other rules differs on
# ops that tune with reset_to_zero, so batch.json (`ir_collection`) and every run's identity
# record it, and runs or batches collected under others are not compared. Here, not in
# zl.ir.collect, so the drivers that only record it do not load the collector.
RULES = 2
