"""Shapes a benchmark runs: the user's yaml laid over FlagGems' Benchmark classes
(`zl.shapes.inject`) and the record of what each benchmark really used
(`zl.shapes.record`, `$OUT_DIR/shapes.yaml`)."""
