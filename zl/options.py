"""pytest options of the zl_bench plugins: one group, environment variables as defaults.

run_pytest.sh and the drivers talk to the plugins through environment variables; each
plugin also declares its settings as options here, so `pytest --help -p <plugins>` lists
them and a direct pytest user can pass them. The environment variable stays the default,
so neither interface changes what the other sees.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

GROUP = "zl_bench"
GROUP_DESCRIPTION = "zl_bench (honest A/B timing of FlagGems operators; each default is read from the variable named)"


def group(parser: Any):
    return parser.getgroup(GROUP, GROUP_DESCRIPTION)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


# dest -> (environment variable, default). Module-level on purpose: several plugins read the
# same setting (e.g. the backend), and each may declare it; the first declaration in a
# parser wins and the others must agree, or the two readings could differ.
_ENV_OF: Dict[str, Tuple[str, str]] = {}


def add(parser: Any, flag: str, env: str, help: str, default: str = "") -> None:
    """Register `flag` (string-valued) whose default is $env, else `default`.

    The value stays a string: the plugin parses it with its own named error, exactly as
    it parses the variable, so an option and a variable can never be read differently.
    Declaring the same flag again (another plugin reading the same setting) is a no-op
    when it names the same variable and default, and an error otherwise.
    """
    dest = _dest(flag)
    known = _ENV_OF.get(dest)
    if known is not None and known != (env, default):
        raise ValueError(f"{flag} is declared for both ${known[0]} and ${env} "
                         f"(defaults {known[1]!r} and {default!r})")
    _ENV_OF[dest] = (env, default)
    declared = parser.__dict__.setdefault("_zl_declared", set())
    if dest in declared:
        return
    declared.add(dest)
    group(parser).addoption(flag, dest=dest, default=None, metavar="VALUE",
                            help=f"{help} [env {env}; default {default!r}]")


def value(config: Any, flag: str) -> str:
    """The option's value: the command line, else its environment variable, else its default.

    A flag nobody declared is a programming error (LookupError), never a silent default:
    the variable would otherwise be ignored without a word.
    """
    given = config.getoption(_declared(flag), default=None) if config is not None else None
    return _or_env(flag, given)


def early_value(early_config: Any, flag: str) -> str:
    """value() in pytest_load_initial_conftests, before the full parse: the command line as
    far as pytest has read it (known_args_namespace), else the variable, else the default."""
    given = getattr(getattr(early_config, "known_args_namespace", None), _declared(flag), None)
    return _or_env(flag, given)


def _declared(flag: str) -> str:
    """The flag's dest; LookupError for a flag nobody declared."""
    dest = _dest(flag)
    if dest not in _ENV_OF:
        raise LookupError(f"zl_bench option {flag} was never declared (zl.options.add)")
    return dest


def _or_env(flag: str, given: Optional[str]) -> str:
    if given is not None:
        return str(given)
    env, default = _ENV_OF[_dest(flag)]
    return os.environ.get(env, default)
