"""JSON Schema patterns with their ECMA-262 meaning: `$` is the end of the text, `\\d` is 0-9."""

from __future__ import annotations

import re
import warnings
from re import _parser  # type: ignore[attr-defined]  # the oracle: how `re` itself reads it
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from protocols.patterns import PatternError, anchor_end, compile_pattern


@pytest.mark.parametrize(
    ("pattern", "accepted", "refused"),
    [
        ("^[A-Z]{3}$", "EUR", "EUR\n"),
        ("^[A-Za-z0-9-]{1,34}$", "acct-001", "acct-001\n"),
        ("^(EUR|USD)$", "USD", "USD\n"),
        (r"^\d{3}$", "123", "١٢٣"),  # Arabic-Indic digits are not ECMA-262 \d
        (r"^\w+$", "abc_1", "abç"),
        ("^a$|^b$", "b", "a\n"),
    ],
)
def test_pattern_means_what_json_schema_says(pattern: str, accepted: str, refused: str) -> None:
    compiled = compile_pattern(pattern)
    assert compiled.search(accepted)
    assert not compiled.search(refused)
    assert re.search(pattern, refused)  # which jsonschema's own `pattern` accepts


@pytest.mark.parametrize(
    ("pattern", "rewritten"),
    [
        ("a$", r"a\Z"),
        (r"a\$", r"a\$"),
        ("\\\\$", "\\\\\\Z"),
        ("[$]$", r"[$]\Z"),
        ("[]$]$", r"[]$]\Z"),
        ("[^]$]$", r"[^]$]\Z"),
        (r"[\]$]$", r"[\]$]\Z"),
        ("[[$]$", r"[[$]\Z"),
        ("(?#$)$", r"(?#$)\Z"),
        ("(?#[)$", r"(?#[)\Z"),
        ("(?i)^eur$", r"(?i)^eur\Z"),
        ("(?P<c>a$)|(?:b$)", r"(?P<c>a\Z)|(?:b\Z)"),
        ("^no anchor", "^no anchor"),
    ],
)
def test_only_anchors_are_rewritten(pattern: str, rewritten: str) -> None:
    assert anchor_end(pattern) == rewritten


@pytest.mark.parametrize("pattern", ["(?x)^a $", "(?x:a)$", "(?-x:a)", "(?ix)a"])
def test_verbose_pattern_is_refused(pattern: str) -> None:
    with pytest.raises(PatternError, match="verbose"):
        compile_pattern(pattern)


def test_pattern_that_cannot_compile_is_refused() -> None:
    with pytest.raises(PatternError, match="not a usable pattern"):
        compile_pattern("(?u)a")  # Unicode classes cannot be ASCII ones


def _tree(node: Any) -> Any:
    if isinstance(node, _parser.SubPattern):
        return [_tree(item) for item in node.data]
    if isinstance(node, list | tuple):
        return [_tree(item) for item in node]
    return str(node)


def _parsed(pattern: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "possible nested set" and the like
        return _tree(_parser.parse(pattern))


def _replaced(tree: Any) -> Any:
    if isinstance(tree, list):
        return [_replaced(item) for item in tree]
    return "AT_END_STRING" if tree == "AT_END" else tree


PIECES = ["a", "b", "$", "^", "\\", "[", "]", "(", ")", "?", ":", "#", "|", "*", "-", "\n",
          "x", "i", "P", "<", ">", "{", "}", "1", "Z", "\\$", "[^", "(?", "(?#", "(?x)"]


@given(st.lists(st.sampled_from(PIECES), max_size=14).map("".join))
def test_rewrite_changes_exactly_the_end_anchors(pattern: str) -> None:
    """What `re` parses from the rewritten pattern is the original's parse with every `$`
    anchor (AT_END) made the end of the text (AT_END_STRING), and nothing else."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(pattern)
    except re.error:
        assume(False)
    try:
        rewritten = anchor_end(pattern)
    except PatternError:
        assert "(?" in pattern
        assert "x" in pattern
        return
    assert _parsed(rewritten) == _replaced(_parsed(pattern))
