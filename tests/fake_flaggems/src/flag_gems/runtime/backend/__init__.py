"""Vendor backends. `vendor_module` is the active vendor's package, imported like upstream."""
import importlib
import importlib.util

from .device_finder import KNOWN_VENDORS, detect_vendor

vendor_name = detect_vendor()
device_name = KNOWN_VENDORS[vendor_name]

_module_name = f"{__name__}._{vendor_name}"
# Only some vendors have a package in the fake tree (nvidia, mthreads); the
# others run with no vendor module, which upstream never does but nothing here reads.
vendor_module = (
    importlib.import_module(_module_name)
    if importlib.util.find_spec(_module_name) is not None
    else None
)
