"""pytest plugin: record the configs Triton's autotuner picked (side A), or replay them (side B).

Why: two runs of an A/B must execute the same kernel configs, otherwise the comparison
mixes "the change" with "a different autotune winner" (router_gemm moved 8 points from
that alone).

What it patches, only while active (a record or a replay dir is set and triton has an
Autotuner), all through one `zl.patching.PatchStack` undone in `pytest_unconfigure`:
- `triton.runtime.autotuner.Autotuner.run`, the `run` of every subclass that defines its
  own (FlagGems' `LibTuner`) and, through `Autotuner.__init_subclass__`, of subclasses
  created later; for one call the tuner's cache is a proxy that sees the tuner's own key
  (zl.autotune.tuner). Record reads the used config back; replay answers every recorded
  key unconditionally, so a warm cache cannot win while the run claims to replay.
- FlagGems' `LibEntry.kernel_cache` dicts: emptied for the session, restored after it
  (zl.autotune.libentry), so an earlier session's picks neither bypass nor outlive this one.
- an atexit hook (record mode) so a crash after tuning still writes the records.

When it steps back, each time saying so and writing `autotune_mode` itself: neither or
both dirs set, or no Autotuner -> `uncontrolled`; a replay record that is missing,
unreadable, truncated or from another backend -> `replay_fallback` with
`replay_fallback_reason` and one `AUTOTUNE_REPLAY_FALLBACK ... kernel=* key=*` line, and
the run tunes live; a key without a record -> one marker line per key and the counts in
run_identity.json. The mode table is in zl.autotune.control.
"""

from __future__ import annotations

import sys

import pytest

from zl.autotune import control
from zl.autotune import options as autotune_options
from zl.autotune.isolation import isolation_problems
from zl.backends import UnknownBackendError, get_backend
from zl.flaggems import PACKAGES
from zl.identity import update_identity
from zl.options import value
from zl.term import log as _term_log

NAME = "zl_autotune"
_TAG = "[autotune-record-plugin]"
# Taken when pytest imports this module for `-p`, i.e. before any conftest: the FlagGems
# benchmark conftest imports flag_gems at load, so by pytest_configure the package is
# always present and only its store location can still be checked.
LOADED_AT_PLUGIN_IMPORT = tuple(m for m in PACKAGES if m in sys.modules)


def _log(msg: str) -> None:
    _term_log(_TAG, msg)


def pytest_addoption(parser):
    autotune_options.declare(parser)


def read_settings(config) -> control.Settings:
    try:
        backend = get_backend().name
    except UnknownBackendError as exc:
        raise pytest.UsageError(str(exc)) from None
    op = value(config, "--zl-op").strip() or "unknown_op"
    return control.Settings(
        op=op,
        record_dir=value(config, "--zl-autotune-record-dir").strip(),
        replay_dir=value(config, "--zl-autotune-replay-dir").strip(),
        preswept=autotune_options.preswept(config),
        out_dir=value(config, "--zl-out-dir").strip(),
        provider=value(config, "--zl-provider").strip() or "flaggems",
        backend=backend,
    )


def _identity_writer(out_dir: str):
    def write(**fields) -> None:
        try:
            update_identity(out_dir, **fields)
        except Exception as exc:  # a run without a writable identity still runs, saying so
            _log(f"run identity not updated ({type(exc).__name__}: {exc})")
    return write


def pytest_configure(config):
    """Decide the mode, write it to run_identity.json, and install the wrappers when active."""
    isolate = autotune_options.switch(config, "--zl-isolate-tuner-cache")
    for problem in isolation_problems(isolate, LOADED_AT_PLUGIN_IMPORT):
        _log(f"!!! WARNING ZL_ISOLATE_TUNER_CACHE=1 but {problem}: the run may share tuned "
             "configs with other runs")
    settings = read_settings(config)
    decision = control.decide(settings)
    identity = _identity_writer(settings.out_dir)
    if decision.marker:
        control.print_marker(decision.marker)
    if decision.message:
        _log(decision.message)
    if decision.mode in ("record", "replay"):
        plugin = control.AutotuneControl(settings, decision, _log, identity)
        plugin.start()
        config.pluginmanager.register(plugin, NAME)
    identity(**decision.identity)


def pytest_unconfigure(config):
    """Dump the session's records and undo every patch."""
    plugin = config.pluginmanager.get_plugin(NAME)
    if plugin is not None:
        config.pluginmanager.unregister(plugin, NAME)
        plugin.close()
