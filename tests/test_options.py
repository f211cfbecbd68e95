"""zl.options: one zl_bench group, env defaults, shared flags declared once, no silent defaults."""
import pytest

from zl import options


class FakeGroup:
    def __init__(self):
        self.added = []

    def addoption(self, flag, **kw):
        self.added.append(flag)


class FakeParser:
    def __init__(self):
        self.groups = {}

    def getgroup(self, name, description=""):
        return self.groups.setdefault(name, FakeGroup())


class FakeConfig:
    def __init__(self, **given):
        self.given = given

    def getoption(self, dest, default=None):
        return self.given.get(dest, default)


def test_value_order_command_line_env_default(monkeypatch):
    parser = FakeParser()
    options.add(parser, "--zl-test-opt", "ZL_TEST_OPT", "a test option", "dflt")
    assert parser.groups[options.GROUP].added == ["--zl-test-opt"]
    monkeypatch.delenv("ZL_TEST_OPT", raising=False)
    assert options.value(FakeConfig(), "--zl-test-opt") == "dflt"
    monkeypatch.setenv("ZL_TEST_OPT", "from-env")
    assert options.value(FakeConfig(), "--zl-test-opt") == "from-env"
    assert options.value(FakeConfig(zl_test_opt="cli"), "--zl-test-opt") == "cli"


def test_a_shared_flag_is_declared_once_per_parser_and_must_agree():
    parser = FakeParser()
    options.add(parser, "--zl-test-shared", "ZL_TEST_SHARED", "shared", "")
    options.add(parser, "--zl-test-shared", "ZL_TEST_SHARED", "shared again", "")
    assert parser.groups[options.GROUP].added == ["--zl-test-shared"]
    other = FakeParser()
    options.add(other, "--zl-test-shared", "ZL_TEST_SHARED", "shared", "")
    assert other.groups[options.GROUP].added == ["--zl-test-shared"]
    with pytest.raises(ValueError, match="ZL_OTHER"):
        options.add(parser, "--zl-test-shared", "ZL_OTHER", "conflict", "")


def test_undeclared_flag_is_an_error_not_a_default():
    with pytest.raises(LookupError, match="never declared"):
        options.value(FakeConfig(), "--zl-never-declared")
