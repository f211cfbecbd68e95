"""zl.options: one zl_bench group, each option one setting of zl.config, shared flags declared
once, no silent defaults."""
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
    options.add(parser, "--zl-l2", "ZL_L2", "L2 mode", "warm")
    assert parser.groups[options.GROUP].added == ["--zl-config", "--zl-l2"]
    monkeypatch.delenv("ZL_L2", raising=False)
    assert options.value(FakeConfig(), "--zl-l2") == "warm"
    monkeypatch.setenv("ZL_L2", "from-env")
    assert options.value(FakeConfig(), "--zl-l2") == "from-env"
    assert options.value(FakeConfig(zl_l2="cli"), "--zl-l2") == "cli"


def test_a_shared_flag_is_declared_once_per_parser_and_must_agree():
    parser = FakeParser()
    options.add(parser, "--zl-op", "ZL_OP", "shared", "")
    options.add(parser, "--zl-op", "ZL_OP", "shared again", "")
    assert parser.groups[options.GROUP].added == ["--zl-config", "--zl-op"]
    other = FakeParser()
    options.add(other, "--zl-op", "ZL_OP", "shared", "")
    assert other.groups[options.GROUP].added == ["--zl-config", "--zl-op"]
    with pytest.raises(ValueError, match=r"--zl-op is declared for \$ZL_OTHER .* names \$ZL_OP"):
        options.add(parser, "--zl-op", "ZL_OTHER", "conflict", "")
    with pytest.raises(ValueError, match=r"--zl-op is declared for \$ZL_OP \(default 'x'\)"):
        options.add(parser, "--zl-op", "ZL_OP", "another default", "x")


def test_undeclared_flag_is_an_error_not_a_default():
    with pytest.raises(LookupError, match="is not a zl_bench setting"):
        options.value(FakeConfig(), "--zl-never-declared")
    with pytest.raises(ValueError, match="names no setting"):
        options.add(FakeParser(), "--zl-never-declared", "ZL_NEVER", "no such setting")


def test_a_second_identical_declaration_is_a_no_op_and_a_conflicting_one_is_named():
    parser = Parser(_ispytest=True)
    options.add(parser, "--zl-seed", "ZL_SEED", "shared by two plugins", "0")
    options.add(parser, "--zl-seed", "ZL_SEED", "shared by two plugins", "0")
    group = options.group(parser)
    assert [o.names() for o in group.options].count(["--zl-seed"]) == 1
    assert [o.names() for o in group.options].count(["--zl-config"]) == 1
    with pytest.raises(ValueError, match=r"--zl-seed is declared for \$OTHER"):
        options.add(parser, "--zl-seed", "OTHER", "another meaning", "0")
