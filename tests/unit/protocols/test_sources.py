"""The source allow-list (docs/design.md#evidence, protocols.sources): a structural URL prefix,
never a string prefix, so none of the usual ways around a prefix check reads off the list."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.sources import allowlist_entry_problem, source_allowed, source_problem

ALLOW = ["https://docs.example.org/public/", "http://127.0.0.1:8026/sources"]


@pytest.mark.parametrize("url", [
    "https://docs.example.org/public/tides",
    "https://docs.example.org/public/a/b?lang=en",
    "https://DOCS.example.org/public/tides",          # hosts compare case-insensitively
    "https://docs.example.org:443/public/tides",      # the effective port
    "http://127.0.0.1:8026/sources/bees",
    "http://127.0.0.1:8026/sources",
])
def test_a_url_under_an_entry_is_allowed(url: str) -> None:
    assert source_allowed(url, ALLOW)


@pytest.mark.parametrize("url", [
    "https://docs.example.org.attacker.net/public/x",   # a longer host
    "https://docs.example.org@169.254.169.254/public/", # credentials: the host is another
    "https://evil@docs.example.org/public/x",
    "https://docs.example.org/public-internal/x",       # not a whole segment
    "https://docs.example.org/public/../admin",         # a dot segment
    "https://docs.example.org/public/%2e%2e/admin",     # an encoded one
    "https://docs.example.org/public/..%2fadmin",       # an encoded slash
    "https://docs.example.org/public%5c..%5cadmin",
    "https://docs.example.org/public\\..\\admin",       # a backslash
    "http://docs.example.org/public/x",                 # another scheme
    "https://docs.example.org:8443/public/x",           # another port
    "https://docs.example.org/public/x#frag",
    "https://docs.example.org/public/x y",
    "ftp://docs.example.org/public/x",
    "file:///etc/passwd",
    "https:///public/x",
    "https://docs.example.org:99999/public/x",          # a malformed port
    "http://127.0.0.1:8027/sources/bees",
    "http://127.0.0.1:8026/sourcesX/bees",
    "",
])
def test_a_url_off_the_list_or_unsafe_is_refused(url: str) -> None:
    assert not source_allowed(url, ALLOW)


def test_an_unusable_entry_admits_nothing_and_says_why() -> None:
    assert allowlist_entry_problem("https://user@docs.example.org/") == \
        "it names credentials (user@host)"
    assert allowlist_entry_problem("docs.example.org/public") == \
        "it is not an http or https URL with a host"
    assert allowlist_entry_problem("https://docs.example.org/?a=1") == "it has a query"
    assert not source_allowed("https://docs.example.org/x", ["https://user@docs.example.org/"])
    assert allowlist_entry_problem(ALLOW[0]) is None


def test_a_problem_is_named_for_a_url_that_is_never_a_source() -> None:
    assert source_problem("https://a.example/../x") == "its path holds a dot segment"
    assert source_problem("https://a.example/x") is None


@given(st.text(alphabet=st.characters(codec="ascii"), max_size=60))
def test_whatever_follows_the_host_an_allowed_url_stays_on_that_host(tail: str) -> None:
    url = "https://docs.example.org" + tail
    if source_allowed(url, ALLOW):
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        assert (parts.hostname, parts.port or 443) == ("docs.example.org", 443)
        assert parts.path.split("/")[1] == "public"
