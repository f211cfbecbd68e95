"""NVIDIA vendor package (fake). Importing it is what FOREIGN_VENDOR_MODULE looks for."""
from types import SimpleNamespace

vendor_info = SimpleNamespace(
    vendor_name="nvidia", device_name="cuda", device_query_cmd="nvidia-smi"
)
