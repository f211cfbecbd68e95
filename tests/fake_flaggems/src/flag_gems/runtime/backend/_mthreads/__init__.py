"""MThreads vendor package (fake). Importing it is what FOREIGN_VENDOR_MODULE looks for."""
from types import SimpleNamespace

vendor_info = SimpleNamespace(
    vendor_name="mthreads", device_name="musa", device_query_cmd="mthreads-gmi"
)
