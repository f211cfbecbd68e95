"""Vendor detection, shaped like upstream's device_finder: environment first.

Upstream then probes torch and finally runs every vendor's query tool with no
timeout; the fake stops at the environment and a fixed default, because the
point of the fake is to show *what the plugins set before import*.
"""
import os

# Same precedence as upstream `_get_vendor_from_env`.
VENDOR_ENV_KEYS = ("GEMS_VENDOR", "FLAGGEMS_VENDOR", "GEMS_BACKEND", "FLAGGEMS_BACKEND")

# vendor name -> torch device name, for the vendors zl_bench has backends for.
KNOWN_VENDORS = {
    "nvidia": "cuda",
    "mthreads": "musa",
    "amd": "cuda",
    "hygon": "cuda",
    "ascend": "npu",
}
DEFAULT_VENDOR = "nvidia"


class UnknownVendorError(RuntimeError):
    pass


def vendor_from_env(environ=None):
    """Return (vendor, env_key) from the first vendor variable set, else (None, None)."""
    env = os.environ if environ is None else environ
    for key in VENDOR_ENV_KEYS:
        if key in env:
            return str(env[key]).strip().lower(), key
    return None, None


def detect_vendor(environ=None):
    vendor, key = vendor_from_env(environ)
    if vendor is None:
        return DEFAULT_VENDOR
    if vendor not in KNOWN_VENDORS:
        raise UnknownVendorError(
            f"{key}={vendor!r} is not a known vendor; known: {', '.join(sorted(KNOWN_VENDORS))}"
        )
    return vendor
