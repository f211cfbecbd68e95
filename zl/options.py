"""pytest options of the zl_bench plugins: one group, each setting's variable named.

Every plugin setting is a field of the run configuration (zl.config.SETTINGS): its
variable, its `--zl-*` option and its default are declared there once. A plugin declares
the options it reads here, so `pytest --help -p <plugins>` lists them; `--zl-config FILE`
(run_pytest.sh passes OUT_DIR/run_config.json) is declared with the first of them.
`value()` reads one setting: the command line, else the configuration (the file, else the
environment), else the default.
"""

from __future__ import annotations

from typing import Any

from zl import config as run_config

GROUP = "zl_bench"
GROUP_DESCRIPTION = "zl_bench (honest A/B timing of FlagGems operators; each default is read from the variable named)"


def group(parser: Any):
    return parser.getgroup(GROUP, GROUP_DESCRIPTION)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def add(parser: Any, flag: str, env: str, help: str, default: str = "") -> None:
    """Register the string-valued option `flag` of the setting whose variable is `env`.

    The value stays a string: the plugin parses it with its own named error, exactly as
    it parses the variable, so an option and a variable can never be read differently.
    `flag`, `env` and `default` must be one row of zl.config.SETTINGS (ValueError naming
    both otherwise): two plugins reading one setting then cannot read it two ways.
    Declaring the same flag again (another plugin reading the same setting) is a no-op.
    """
    setting = run_config.BY_FLAG.get(flag)
    if setting is None or (setting.env, setting.default) != (env, default):
        known = f"${setting.env} (default {setting.default!r})" if setting else "no setting"
        raise ValueError(f"{flag} is declared for ${env} (default {default!r}) but zl.config "
                         f"names {known}")
    declared = parser.__dict__.setdefault("_zl_declared", set())
    if not declared:
        group(parser).addoption(run_config.OPTION, dest=run_config.OPTION_DEST, default=None,
                                metavar="FILE", help="the run configuration (run_config.json, "
                                "written by run_pytest.sh); each --zl-* option given wins over it; "
                                "without it the settings are read from the environment")
        declared.add(run_config.OPTION_DEST)
    dest = _dest(flag)
    if dest in declared:
        return
    declared.add(dest)
    group(parser).addoption(flag, dest=dest, default=None, metavar="VALUE",
                            help=f"{help} [env {env}; default {default!r}]")


def value(config: Any, flag: str) -> str:
    """The setting's word: the command line, else the run configuration, else its default.
    A flag that is no setting is a programming error (LookupError), never a silent default."""
    run_config.setting(flag)
    return run_config.of(config).word(flag)


def early_value(early_config: Any, flag: str) -> str:
    """value() in pytest_load_initial_conftests, before the full parse: the command line as
    far as pytest has read it (known_args_namespace), else the configuration."""
    run_config.setting(flag)
    return run_config.early_of(early_config).word(flag)
