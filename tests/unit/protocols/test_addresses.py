"""One plain mailbox per field: what is accepted, what is refused and why, and its two forms."""

from __future__ import annotations

import string
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.addresses import AddressError, is_mailbox, parse_mailbox

BIDI_CONTROLS = ["\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
                 "\u2066", "\u2067", "\u2068", "\u2069"]


@pytest.mark.parametrize(
    "address",
    ["support@acme.example", "a.b+tag@sub.example.co.uk", "o'neil@example.com",
     "x!#$%&'*+/=?^_`{|}~-y@example.com", "a@ACME.Example", "a@a-b.example", "a@1.example",
     "kunde@bücher.example", "kunde@xn--bcher-kva.example", "kunde@XN--BCHER-KVA.example",
     "user@münchen.de", "info@例え.jp", "billing@p\u0430ypal.example",
     "l" * 64 + "@example.com", "a@" + ".".join(["l" * 63] * 3) + "." + "l" * 60],  # 254
)
def test_plain_address_is_accepted(address: str) -> None:
    assert parse_mailbox(address).domain == address.rpartition("@")[2]
    assert is_mailbox(address)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("a@example.com\r\nBcc: x@evil.example", "control character U+000D"),
        ("a@example.com\n", "control character U+000A"),
        ("a@exam\x00ple.com", "control character U+0000"),
        ("a@exam\x85ple.com", "control character U+0085"),
        *[(f"support@acme{c}.example", f"invisible character U+{ord(c):04X}")
          for c in BIDI_CONTROLS],
        ("support@acme.example\u200b", "invisible character U+200B"),
        ("sup\u00adport@acme.example", "invisible character U+00AD"),
        ("support@acme\u3164.example", "invisible character U+3164"),
        ("support@acme\ufe0f.example", "invisible character U+FE0F"),
        ("a@x.example b@y.example", "contains a space (U+0020"),
        ("a@x\u00a0.example", "contains a space (U+00A0"),
        ("Eve <eve@x.example>", "contains a space"),
        ("Eve<eve@x.example>", "angle brackets"),
        ("<eve@x.example>", "angle brackets"),
        ("a@x.example,b@y.example", "one address per field"),
        ("a@x.example;b@y.example", "one address per field"),
        ('"a b"@example.com', "contains a space"),
        ('"ab"@example.com', "quoted local parts are not accepted"),
        ("a(comment)@example.com", "comments are not accepted"),
        ("a@[192.0.2.1]", "address literals are not accepted"),
        ("a\\b@example.com", "backslash"),
        ("a@192.0.2.1", "numeric label"),
        ("root@localhost", "one label"),
        ("", "is empty"),
        ("example.com", "has no @"),
        ("a@b@example.com", "more than one @"),
        ("@example.com", "empty local part"),
        ("a@", "empty domain"),
        (".a@example.com", "not a dot-atom"),
        ("a.@example.com", "not a dot-atom"),
        ("a..b@example.com", "not a dot-atom"),
        ("jörg@example.com", "non-ASCII local part"),
        ("l" * 65 + "@example.com", "longer than 64"),
        ("a@example..com", "empty domain label"),
        ("a@.example.com", "empty domain label"),
        ("a@example.com.", "empty domain label"),
        ("a@-x.example", "'-x' is not a DNS label"),
        ("a@x-.example", "'x-' is not a DNS label"),
        ("a@exa_mple.com", "is not a DNS label"),
        ("a@" + "l" * 64 + ".example", "is not a DNS label"),
        ("a@" + ".".join(["l" * 63] * 4) + ".example", "domain longer than 253"),
        ("l" * 64 + "@" + ".".join(["l" * 63] * 3) + ".ll", "longer than 254"),
        ("a@xn--zzzz.example", "not a valid internationalized label"),
        ("a@xn--abc-.example", "not a valid internationalized label"),
        ("a@BÜCHER.example", "not a valid internationalized label"),
        ("a@" + unicodedata.normalize("NFD", "bücher") + ".example", "Normalization Form C"),
        ("a@\u0627b.example", "not a valid internationalized label"),  # Bidi rule
        ("a@x\u3002example", "not a valid internationalized label"),  # ideographic full stop
        ("a@" + "ü" * 60 + ".example", "not a valid internationalized label"),  # > 63 as A-label
    ],
)
def test_refusal_names_its_reason(address: str, reason: str) -> None:
    with pytest.raises(AddressError) as caught:
        parse_mailbox(address)
    assert reason in str(caught.value)


def test_internationalized_domain_has_both_forms() -> None:
    mailbox = parse_mailbox("kunde@bücher.example")
    assert mailbox.internationalized
    assert mailbox.unicode == "kunde@bücher.example"
    assert mailbox.ascii == "kunde@xn--bcher-kva.example"
    assert mailbox.mixed_script_labels == ()


def test_a_label_as_written_is_read_in_unicode() -> None:
    mailbox = parse_mailbox("kunde@xn--bcher-kva.example")
    assert mailbox.internationalized
    assert mailbox.unicode_domain == "bücher.example"
    assert mailbox.ascii_domain == "xn--bcher-kva.example"


def test_ascii_domain_is_not_internationalized() -> None:
    mailbox = parse_mailbox("Support@ACME.example")
    assert not mailbox.internationalized
    assert mailbox.ascii == mailbox.unicode == "Support@ACME.example"


def test_mixed_script_label_is_named() -> None:
    mailbox = parse_mailbox("billing@secure.p\u0430ypal.example")
    assert mailbox.mixed_script_labels == ("p\u0430ypal",)
    assert mailbox.ascii_domain == "secure.xn--pypal-4ve.example"


def test_non_strings_are_left_to_the_type_keyword() -> None:
    assert is_mailbox(5)
    assert is_mailbox(None)


ATEXT = string.ascii_letters + string.digits + "!#$%&'*+/=?^_`{|}~-"
LDH = string.ascii_lowercase + string.digits
atoms = st.text(ATEXT, min_size=1, max_size=8)
labels = st.text(LDH, min_size=1, max_size=10)


@given(st.lists(atoms, min_size=1, max_size=4), st.lists(labels, min_size=1, max_size=3),
       st.sampled_from(["example", "test", "co"]))
def test_every_dot_atom_at_an_ldh_domain_is_accepted_as_written(
    local: list[str], domain: list[str], top: str,
) -> None:
    address = ".".join(local) + "@" + ".".join([*domain, top])
    mailbox = parse_mailbox(address)
    assert mailbox.ascii == mailbox.unicode == address


@given(st.text(min_size=1, max_size=40))
def test_nothing_accepted_can_hide_or_break_a_line(text: str) -> None:
    try:
        mailbox = parse_mailbox(text)
    except AddressError:
        return
    assert text.count("@") == 1
    assert not any(unicodedata.category(c)[0] in "CZ" for c in text)
    assert not set(text) & set('<>,;"()[]\\')
    assert mailbox.ascii.isascii()


@given(st.sampled_from(["support@acme.example", "kunde@bücher.example"]),
       st.integers(min_value=0, max_value=20),
       st.sampled_from([*BIDI_CONTROLS, "\r", "\n", "\x00", "\u200b", "\u2060", "\ufeff"]))
def test_one_hidden_character_anywhere_is_refused(address: str, at: int, hidden: str) -> None:
    position = at % (len(address) + 1)
    with pytest.raises(AddressError):
        parse_mailbox(address[:position] + hidden + address[position:])
