"""Shape mechanisms of FlagGems benchmark classes and the zl_bench code that makes a shape yaml reach them."""
