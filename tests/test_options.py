"""zl.options: one zl_bench group, env defaults, shared flags declared once, no silent defaults."""
import pytest
from _pytest.config.argparsing import Parser

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
    with pytest.raises(ValueError, match=r"\$ZL_TEST_SHARED and \$ZL_OTHER"):
        options.add(parser, "--zl-test-shared", "ZL_OTHER", "conflict", "")


def test_undeclared_flag_is_an_error_not_a_default():
    with pytest.raises(LookupError, match="never declared"):
        options.value(FakeConfig(), "--zl-never-declared")


def test_a_second_identical_declaration_is_a_no_op_and_a_conflicting_one_is_named():
    parser = Parser(_ispytest=True)
    options.add(parser, "--zl-test-shared", "ZL_TEST_SHARED", "shared by two plugins")
    options.add(parser, "--zl-test-shared", "ZL_TEST_SHARED", "shared by two plugins")
    group = options.group(parser)
    assert [o.names() for o in group.options].count(["--zl-test-shared"]) == 1
    with pytest.raises(ValueError, match=r"--zl-test-shared is declared for both \$ZL_TEST_SHARED and \$OTHER"):
        options.add(parser, "--zl-test-shared", "OTHER", "another meaning")
