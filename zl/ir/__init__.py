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
