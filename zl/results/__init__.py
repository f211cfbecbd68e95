"""Operator outputs kept per shape and side, and their comparison.

`capture` turns one output into a compact comparable record and writes
`<run>/results/<op>.json`; `compare` pairs two runs' records (B vs A, each vs torch).
"""
