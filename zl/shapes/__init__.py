"""Shapes a benchmark runs: the user's yaml laid over FlagGems' Benchmark classes
(`zl.shapes.inject`, and for classes that fix their own shapes `iter_inject` / `bespoke`,
found by `mechanism`), the record of what each benchmark really used (`zl.shapes.record`,
`$OUT_DIR/shapes.yaml`, provenance in `sources`), and the suite survey (`coverage`)."""
