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
    grp = group(parser)
    # Several plugins read the same variable (OUT_DIR, ZL_OP ...): the first one to load
    # declares it, later identical declarations are no-ops, a different variable is an error.
    if any(flag in opt.names() for opt in grp.options):
        if _ENV_OF.get(dest, (env, default))[0] != env:
            raise ValueError(f"{flag} is declared for both ${_ENV_OF[dest][0]} and ${env}")
        return
    grp.addoption(flag, dest=dest, default=None, metavar="VALUE",
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
