"""One plain mailbox address per field, read the same way by the operator and the mail system.

Accepted: RFC 5321 §4.1.2 `Mailbox` = `Local-part "@" Domain`, narrowed to what cannot be read
two ways:

- the local part is a dot-atom of ASCII `atext` (RFC 5322 §3.2.3), at most 64 octets (RFC 5321
  §4.5.3.1.1). Quoted strings are refused: they admit spaces, `@`, `<>` and backslash escapes,
  and `"a"@x` and `a@x` name one mailbox under two spellings. Non-ASCII local parts (RFC 6531)
  are refused too: they need SMTPUTF8 everywhere and invite look-alike letters;
- the domain is at least two DNS labels. An ASCII label is letters, digits and inner hyphens,
  1-63 octets (RFC 1035 §2.3.1, RFC 1123 §2.1); a label starting `xn--` must be a valid A-label;
  a non-ASCII label must be a valid IDNA2008 U-label (RFC 5891 §5.4: NFC, lowercase, no
  disallowed code points, the Bidi and contextual rules), checked with the `idna` package without
  UTS #46 mapping, so nothing is silently rewritten. The domain in A-labels is at most 253
  octets, the whole address at most 254 (RFC 5321 §4.5.3.1.3). The last label is not all digits,
  so nothing reads as an IP address; address literals (`[192.0.2.1]`) are refused.

Refused before any of that, each with its own reason: control characters (CR, LF, NUL, ...),
invisible format characters (bidi controls U+200E/F, U+202A-202E, U+2066-2069, zero-width
characters, ...), spaces, display names and angle brackets, and more than one address.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Final

import idna

from protocols.scripts import is_mixed_script

__all__ = ["AddressError", "Mailbox", "is_mailbox", "parse_mailbox"]

MAX_LOCAL_PART: Final = 64
MAX_DOMAIN: Final = 253
MAX_ADDRESS: Final = 254

_ATEXT: Final = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"  # RFC 5322 §3.2.3
_DOT_ATOM: Final = re.compile(rf"{_ATEXT}+(?:\.{_ATEXT}+)*\Z")
_LDH_LABEL: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
# Default-ignorable letters and marks that render as nothing but are not in category Cf.
_INVISIBLE: Final = frozenset({
    0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0,
    *range(0x180B, 0x1810), *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0),
})
_ONE_ADDRESS_ONLY: Final = (
    ("<>", "has angle brackets: give the bare address, without a display name or <>"),
    (",;", "has a comma or semicolon: give one address per field"),
    ('"', "has a quote: quoted local parts are not accepted, use a dot-atom such as a.b"),
    ("()", "has parentheses: comments are not accepted in an address"),
    ("[]", "has brackets: address literals are not accepted, give a domain name"),
    ("\\", "has a backslash, which no plain address contains"),
)


class AddressError(ValueError):
    """Why a text is not one plain mailbox address; the message says what to give instead."""


@dataclass(frozen=True)
class Mailbox:
    """A parsed address. `domain` is as written; the other forms are derived from it."""

    local_part: str
    domain: str
    ascii_domain: str  # A-labels: what DNS and SMTP see
    unicode_domain: str  # U-labels: what a reader sees
    mixed_script_labels: tuple[str, ...]  # U-labels whose letters mix scripts

    @property
    def internationalized(self) -> bool:
        """Does any label differ between its ASCII and Unicode forms?"""
        return self.ascii_domain.lower() != self.unicode_domain.lower()

    @property
    def ascii(self) -> str:
        return f"{self.local_part}@{self.ascii_domain}"

    @property
    def unicode(self) -> str:
        return f"{self.local_part}@{self.unicode_domain}"


def _u(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def _check_characters(text: str) -> None:
    for char in text:
        category = unicodedata.category(char)
        if category == "Cc":
            raise AddressError(f"contains the control character {_u(char)}: give the address "
                               "alone, on one line")
        if category == "Cf" or ord(char) in _INVISIBLE:
            raise AddressError(f"contains the invisible character {_u(char)}, which can hide "
                               "or reorder what is shown")
        if category in ("Zs", "Zl", "Zp"):
            raise AddressError(f"contains a space ({_u(char)}): give one address, without a "
                               "display name")
        if category in ("Co", "Cs", "Cn"):
            raise AddressError(f"contains the unassigned or private-use character {_u(char)}")
    for chars, reason in _ONE_ADDRESS_ONLY:
        if any(c in text for c in chars):
            raise AddressError(reason)


def _check_local_part(local: str) -> None:
    if not local:
        raise AddressError("has an empty local part (before the @)")
    if not local.isascii():
        raise AddressError("has a non-ASCII local part (before the @), which is not accepted")
    if len(local) > MAX_LOCAL_PART:
        raise AddressError(f"has a local part longer than {MAX_LOCAL_PART} characters")
    if not _DOT_ATOM.match(local):
        raise AddressError(f"local part {local!r} is not a dot-atom: letters, digits and "
                           "!#$%&'*+/=?^_`{|}~- with single dots between them")


def _label(label: str) -> tuple[str, str]:
    """(A-label, U-label) of one domain label, or `AddressError`."""
    if not label:
        raise AddressError("has an empty domain label (two dots, or a dot at an end)")
    if label.isascii() and label[:4].lower() != "xn--":
        if not _LDH_LABEL.match(label):
            raise AddressError(f"domain label {label!r} is not a DNS label: letters, digits "
                               "and inner hyphens, 1 to 63 characters")
        return label, label
    try:
        if label.isascii():
            ulabel = idna.ulabel(label.lower())
            if idna.alabel(ulabel).decode("ascii") != label.lower():
                raise idna.IDNAError("not the A-label of its own U-label")
            return label, ulabel
        return idna.alabel(label).decode("ascii"), label
    except (idna.IDNAError, UnicodeError) as exc:
        reason = (f"domain label {label!r} is not a valid internationalized label "
                  f"(IDNA2008: {exc}); write it in lowercase, or as its xn-- form")
        raise AddressError(reason) from None


def parse_mailbox(text: str) -> Mailbox:
    """The one plain address `text` is (see the module docstring), or `AddressError`."""
    if not text:
        raise AddressError("is empty")
    _check_characters(text)
    local, at, domain = text.rpartition("@")
    if not at:
        raise AddressError("has no @: give one address as local-part@domain")
    if "@" in local:
        raise AddressError("has more than one @: give one address per field")
    _check_local_part(local)
    if not domain:
        raise AddressError("has an empty domain (after the @)")
    pairs = [_label(label) for label in domain.split(".")]
    if len(pairs) < 2:
        raise AddressError(f"domain {domain!r} has one label: give a full domain name")
    if pairs[-1][0].isdigit():
        raise AddressError(f"domain {domain!r} ends in a numeric label: IP addresses are not "
                           "accepted")
    ascii_domain = ".".join(a for a, _ in pairs)
    if len(ascii_domain) > MAX_DOMAIN:
        raise AddressError(f"has a domain longer than {MAX_DOMAIN} characters in ASCII form")
    if len(local) + 1 + len(ascii_domain) > MAX_ADDRESS:
        raise AddressError(f"is longer than {MAX_ADDRESS} characters in ASCII form")
    return Mailbox(
        local_part=local,
        domain=domain,
        ascii_domain=ascii_domain,
        unicode_domain=".".join(u for _, u in pairs),
        mixed_script_labels=tuple(u for _, u in pairs if is_mixed_script(u)),
    )


def is_mailbox(value: object) -> bool:
    """A JSON Schema format check: True for a plain address or a non-string (the `type`
    keyword judges those); `AddressError` with the reason otherwise."""
    if isinstance(value, str):
        parse_mailbox(value)
    return True
