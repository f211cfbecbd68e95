"""run.log parsing, pairing and caliber checks for zl_bench reports."""
