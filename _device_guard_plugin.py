"""Alias of `_device_setup_plugin` under the name the design card uses.

A pure alias: importing it runs the same import-time vendor setup and exposes the same
hooks. Given together with `-p _device_setup_plugin`, the session object is registered
once (the second configure finds it), so identity is probed and the foreign-vendor report
printed once.
"""

from _device_setup_plugin import (  # noqa: F401
    foreign_vendor_modules,
    pytest_addoption,
    pytest_configure,
    pytest_load_initial_conftests,
    pytest_unconfigure,
)
