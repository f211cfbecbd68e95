"""A stand-in for pytest's Config, enough for a plugin's configure/unconfigure hooks.

`FakeConfig(plugin_module, zl_seed="3")` first runs the module's pytest_addoption on
a real pytest Parser (that is where zl.options learns which variable backs which option).
`options` maps option dests (e.g. "zl_seed") to command-line values; an option not
given reads as None, so `zl.options.value` falls back to the environment variable
exactly as under pytest. The plugin manager keeps registered objects by name.
"""


class FakePluginManager:
    def __init__(self):
        self.plugins = {}

    def register(self, obj, name):
        if name in self.plugins:
            raise ValueError(f"plugin name already registered: {name}")
        self.plugins[name] = obj

    def get_plugin(self, name):
        return self.plugins.get(name)

    def has_plugin(self, name):
        return name in self.plugins

    def unregister(self, obj):
        for name, known in list(self.plugins.items()):
            if known is obj:
                del self.plugins[name]


class FakeConfig:
    def __init__(self, plugin_module=None, **options):
        from _pytest.config.argparsing import Parser

        self.parser = Parser(_ispytest=True)
        if plugin_module is not None:
            plugin_module.pytest_addoption(self.parser)
        self.options = options
        self.pluginmanager = FakePluginManager()

    def getoption(self, dest, default=None):
        return self.options.get(dest, default)


class FakeSession(FakeConfig):
    """A FakeConfig with what makes pytest's Config a session for zl.config: a stash and
    cleanups. Its configuration is the process's `current()` until `end()` runs the cleanups,
    as pytest does when the session ends."""

    def __init__(self, plugin_module=None, **options):
        import pytest

        super().__init__(plugin_module, **options)
        self.stash = pytest.Stash()
        self._cleanups = []

    def add_cleanup(self, fn):
        self._cleanups.append(fn)

    def end(self):
        while self._cleanups:
            self._cleanups.pop()()
