"""Alias of `_device_setup_plugin` under the name the design card uses.

Importing it runs the same import-time vendor setup. When both names are given
with `-p`, the hooks here stand down so identity is probed and the foreign-vendor
report printed once.
"""

import _device_setup_plugin as _setup
from _device_setup_plugin import foreign_vendor_modules  # noqa: F401

_REAL = "_device_setup_plugin"


def pytest_configure(config):
    if not config.pluginmanager.has_plugin(_REAL):
        _setup.pytest_configure(config)


def pytest_sessionfinish(session, exitstatus):
    if not session.config.pluginmanager.has_plugin(_REAL):
        _setup.pytest_sessionfinish(session, exitstatus)
