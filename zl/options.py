"""pytest options of the zl_bench plugins: one group, environment variables as defaults.

run_pytest.sh and the drivers talk to the plugins through environment variables; each
plugin also declares its settings as options here, so `pytest --help -p <plugins>` lists
them and a direct pytest user can pass them. The environment variable stays the default,
so neither interface changes what the other sees.
"""

from __future__ import annotations

import os
from typing import Any, Optional

GROUP = "zl_bench"
GROUP_DESCRIPTION = "zl_bench (honest A/B timing of FlagGems operators; each default is read from the variable named)"


def group(parser: Any):
    return parser.getgroup(GROUP, GROUP_DESCRIPTION)


def add(parser: Any, flag: str, env: str, help: str, default: str = "") -> None:
    """Register `flag` (string-valued) whose default is $env, else `default`.

    The value stays a string: the plugin parses it with its own named error, exactly as
    it parses the variable, so an option and a variable can never be read differently.
    """
    dest = flag.lstrip("-").replace("-", "_")
    known = _ENV_OF.get(dest)
    if known is not None and known != (env, default):
        raise ValueError(f"{flag} is declared twice with different variables/defaults: "
                         f"{known} and {(env, default)}")
    opts = group(parser)
    # Two plugins that read the same variable (ZL_BACKEND, OUT_DIR) both declare it;
    # the option is added once per parser, whichever plugin comes first.
    if not any(flag in opt.names() for opt in opts.options):
        opts.addoption(flag, dest=dest, default=None, metavar="VALUE",
                       help=f"{help} [env {env}; default {default!r}]")
    _ENV_OF[dest] = (env, default)


_ENV_OF: dict = {}


def value(config: Any, flag: str) -> str:
    """The option's value: the command line, else its environment variable, else its default."""
    dest = flag.lstrip("-").replace("-", "_")
    given: Optional[str] = config.getoption(dest, default=None)
    if given is not None:
        return str(given)
    env, default = _ENV_OF.get(dest, ("", ""))
    return os.environ.get(env, default) if env else default
