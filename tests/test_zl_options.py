"""zl.options.add: a variable several plugins read is declared once, never twice differently."""
import pytest
from _pytest.config.argparsing import Parser

from zl import options


def test_a_second_identical_declaration_is_a_no_op_and_a_conflicting_one_is_named():
    parser = Parser(_ispytest=True)
    options.add(parser, "--zl-test-shared", "ZL_TEST_SHARED", "shared by two plugins")
    options.add(parser, "--zl-test-shared", "ZL_TEST_SHARED", "shared by two plugins")
    group = options.group(parser)
    assert [o.names() for o in group.options].count(["--zl-test-shared"]) == 1
    with pytest.raises(ValueError, match=r"--zl-test-shared is declared for both \$ZL_TEST_SHARED and \$OTHER"):
        options.add(parser, "--zl-test-shared", "OTHER", "another meaning")
