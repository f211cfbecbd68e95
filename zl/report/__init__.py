"""Reports people look at: HTML pages and charts over batch_summary.py result dicts."""
