"""Decide the `-p` plugin list of a zl_bench run: one definition, used by every driver.

The seed records why this is code and not a list each driver copies: a campaign
worker hand-copied the plugin list, drifted, and every sealed measurement of that
campaign silently lost graph timing.

Policy is read off the backend's capability flags, never off its name:
- `_cudagraph_plugin` is never listed; `_timing_plugin` installs graph timing only when the
  backend declares `supports_cuda_graph`.
- autotune record/replay and IR collection need Triton's hooks
  (`supports_triton_hooks`) and can be switched off with ZL_ENABLE_AUTOTUNE=0 /
  ZL_ENABLE_IR=0.
- ZL_EXTRA_PLUGINS (space separated) is appended, without duplicates.

CLI: `python plugin_plan.py` (the top-level entry point) or `python -m zl.plan`; HELP below.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import List, Mapping, Optional, Sequence

from zl import cli_help
from zl.backends import UnknownBackendError, get_backend
from zl.config import environ
from zl.switches import SwitchError, env_switch

_ROOT = Path(__file__).resolve().parent.parent

# Order matters: device setup must import first so GEMS_VENDOR is set before any
# benchmark module imports flag_gems; the sweep plugin runs its shards before the
# measurement plugins patch anything in this process.
CORE_PLUGINS = (
    "_device_setup_plugin",
    "_parallel_warmup_plugin",
    "_seed_plugin",
    "_shape_inject_plugin",
    "_shape_iter_inject_plugin",
    "_bespoke_shape_plugin",
)
TIMING_PLUGIN = "_timing_plugin"
REPORT_PLUGIN = "_pretty_report_plugin"
AUTOTUNE_PLUGIN = "_autotune_record_plugin"
IR_PLUGIN = "_ir_meta_plugin"
# Reads its own switch (ZL_ENABLE_RESULTS / --zl-results), so it is always listed.
RESULTS_PLUGIN = "_results_plugin"
# The Hopper fp16 mm cluster workaround; opt-in (ZL_ENABLE_MM_CLUSTER=1), and only where the
# backend declares supports_mm_cluster_fix. Backends' compat_plugins (e.g. musa's skip-gate
# fix) come first: they rewrite collected items before anything else reads them.
MM_CLUSTER_PLUGIN = "_mm_cluster_fix_plugin"


class PlanError(RuntimeError):
    """The requested plan cannot be loaded (missing module)."""


def plan_plugins(backend_name: Optional[str] = None, extra: Optional[Sequence[str]] = None,
                 env: Optional[Mapping[str, str]] = None) -> List[str]:
    """The `-p` list for the backend, from the switches in `env` (default: this process's)."""
    env = environ() if env is None else env
    backend = get_backend(backend_name)
    plugins: List[str] = list(getattr(backend, "compat_plugins", ()) or ()) + list(CORE_PLUGINS)
    hooks = bool(getattr(backend, "supports_triton_hooks", True))
    if hooks and env_switch("ZL_ENABLE_AUTOTUNE", True, environ=env):
        plugins.append(AUTOTUNE_PLUGIN)
    plugins.append(TIMING_PLUGIN)
    plugins.append(REPORT_PLUGIN)
    plugins.append(RESULTS_PLUGIN)
    if hooks and env_switch("ZL_ENABLE_IR", True, environ=env):
        plugins.append(IR_PLUGIN)
    if env_switch("ZL_ENABLE_MM_CLUSTER", False, environ=env) and getattr(backend, "supports_mm_cluster_fix", False):
        plugins.append(MM_CLUSTER_PLUGIN)
    extras = extra if extra is not None else env.get("ZL_EXTRA_PLUGINS", "").split()
    for name in extras:
        if name and name not in plugins:
            plugins.append(name)
    return plugins


def missing_modules(plugins: Sequence[str]) -> List[str]:
    missing = []
    for name in plugins:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    return missing


def pytest_args(plugins: Sequence[str]) -> List[str]:
    args: List[str] = []
    for name in plugins:
        args += ["-p", name]
    return args


HELP = """Print the `-p` plugin list of a zl_bench run for a backend: the one list every driver
uses (read off the backend's capability flags; ZL_ENABLE_AUTOTUNE=0 / ZL_ENABLE_IR=0 drop
those plugins, ZL_EXTRA_PLUGINS is appended without duplicates). Each module must be
importable, or nothing is printed.

Examples:
  python plugin_plan.py --backend cuda --one-per-line
  python plugin_plan.py --backend musa --pytest-args     # -p _musa_benchmark_compat_plugin ...

Outputs:
  On stdout: the plugin modules, space separated as `-p NAME` tokens (default and
  --pytest-args) or one name per line (--one-per-line).

Exit codes:
  0  printed
  2  an unknown backend, an on/off variable that is neither, or a plugin module that is
     not importable (named)
"""


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = cli_help.parser(HELP, prog="plugin_plan.py")
    p.add_argument("--backend", default=None,
                   help="cuda, musa, rocm, ascend or an alias (default $ZL_BACKEND or cuda)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--pytest-args", action="store_true", help="print `-p name` tokens on one line (default)")
    fmt.add_argument("--one-per-line", action="store_true", help="print one module name per line")
    args = p.parse_args(argv)
    try:
        names = plan_plugins(args.backend)
    except (UnknownBackendError, SwitchError) as exc:
        print(f"!!! {exc}", file=sys.stderr)
        return 2
    missing = missing_modules(names)
    if missing:
        print(f"!!! plugin module(s) not importable: {' '.join(missing)} "
              f"(PYTHONPATH must contain {_ROOT}; check ZL_EXTRA_PLUGINS spelling)", file=sys.stderr)
        return 2
    print("\n".join(names) if args.one_per_line else " ".join(pytest_args(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
