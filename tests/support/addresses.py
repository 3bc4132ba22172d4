"""Addresses that are not one plain mailbox, each refused at intake (shared by db and API tests)."""

from __future__ import annotations

import pytest

BAD_ADDRESSES = [
    pytest.param("a@example.com\r\nBcc: x@evil.example", id="crlf-header-injection"),
    pytest.param("a@example.com\n", id="trailing-newline"),
    pytest.param("support@acme\u202e.example", id="bidi-override"),
    pytest.param("support@acme.example\u200b", id="zero-width-space"),
    pytest.param("Eve <eve@x.example>", id="display-name"),
    pytest.param("<eve@x.example>", id="angle-brackets"),
    pytest.param("a@x.example, b@y.example", id="two-addresses"),
    pytest.param("a@x.example b@y.example", id="two-addresses-by-space"),
    pytest.param("a@-bad-.example", id="label-hyphens"),
    pytest.param("a@" + "l" * 64 + ".example", id="label-too-long"),
    pytest.param("a@exa_mple.com", id="label-underscore"),
    pytest.param("a@example..com", id="empty-label"),
    pytest.param("a@xn--zzzz.example", id="bogus-a-label"),
    pytest.param("a@BÜCHER.example", id="uppercase-u-label"),
]
