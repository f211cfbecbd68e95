"""runlog/sizefold.py: folding is exactly reversible and refuses unsafe input."""

import pytest

from zl.runlog.sizefold import fold, legend_line, parse_legend_line, split_top_level, unfold


def test_split_respects_nesting_and_quotes():
    assert split_top_level("[torch.Size([1, 2]), 'a,b', {'k': (1, 2)}]") == \
        ["torch.Size([1, 2])", "'a,b'", "{'k': (1, 2)}"]
    assert split_top_level("(1, 2)") is None
    assert split_top_level("[1, (2]") is None


def test_fold_roundtrip_exact():
    details = ["[torch.Size([4096, 4096]), 1, torch.float16]",
               "[torch.Size([64, 64]), 1, torch.float16]",
               "[torch.Size([64, 64]), 1, torch.float16]"]
    legend, shown = fold(details)
    assert shown == ["[torch.Size([4096, 4096])]", "[torch.Size([64, 64])]", "[torch.Size([64, 64])]"]
    parsed = parse_legend_line(legend_line(legend))
    assert [unfold(s, parsed) for s in shown] == details


@pytest.mark.parametrize("details", [
    ["[1, 2]"],                              # one row: nothing to fold against
    ["[1, 2]", "[3, 4]"],                    # nothing constant
    ["[1, 2]", "[1, 2]"],                    # everything constant
    ["[1, 2]", "[1, 2, 3]"],                 # ragged
    ["[1, 2]", None],                        # N/A row
    ["{'a': 1}", "{'a': 2}"],                # not a list
    ["[1,2]", "[1,3]"],                      # not upstream's spacing: would not round-trip
])
def test_fold_declines(details):
    assert fold(details) is None


def test_unfold_without_legend_or_mismatched_is_identity():
    assert unfold("[1]", None) == "[1]"
    assert unfold("[1, 2]", {"n": 2, "fixed": {"0": "9"}}) == "[1, 2]"
