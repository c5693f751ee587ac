"""Regex patterns bounded before they are compiled (parrot/regex_guard.py): a pattern's
expansion, and one request's patterns together. The patterns reach it through
`parse_transforms`, as a wire request's do."""

from __future__ import annotations

import pytest

from parrot.errors import InvalidRequestError
from parrot.regex_guard import MAX_REGEX_PATTERNS_PER_REQUEST, regex_expansion, regex_quota
from parrot.transforms import parse_transforms


@pytest.mark.parametrize("pattern, expansion", [
    ("A: (.*)", 4), ("a{3,}", 4), ("(?:ab){10}", 20), ("(?:a|bc){5}", 15),
    ("(?:(?:a{10}){10}){10}", 1000), ("(?=a{10})b", 11), (r"\d{1,3}(?:,\d{3})*", 7)])
def test_regex_expansion_is_the_product_of_nested_counts(pattern, expansion):
    assert regex_expansion(pattern) == expansion


def test_one_request_compiles_a_bounded_number_of_patterns():
    with regex_quota():
        for i in range(MAX_REGEX_PATTERNS_PER_REQUEST):
            parse_transforms([{"type": "regex", "pattern": f"x{i}(.)"}], "p")
        parse_transforms([{"type": "regex", "pattern": "x0(.)"}], "p")  # seen: free
        with pytest.raises(InvalidRequestError, match="distinct regex patterns"):
            parse_transforms([{"type": "regex", "pattern": "another(.)"}], "p")
    with regex_quota():  # and in expansion: 5 patterns of 4,000 units are over 16,384
        with pytest.raises(InvalidRequestError, match="expand to more than"):
            for i in range(5):
                parse_transforms([{"type": "regex", "pattern": f"x{i}(?:(a){{10}}){{400}}"}],
                                 "p")
    parse_transforms([{"type": "regex", "pattern": "another(.)"}], "p")  # outside: no quota
