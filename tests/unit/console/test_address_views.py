"""The approval page's address rows: which addresses get one, with which forms and warnings."""

from __future__ import annotations

from console.presenters import AddressView, address_views


def test_internationalized_addresses_are_listed_with_both_forms() -> None:
    arguments = {"draft": {"payload": {
        "from": "support@acme.example", "subject": "Ihre Bestellung bei bücher.example",
        "to": ["customer@example.com", "kunde@bücher.example", "billing@p\u0430ypal.example"],
        "cc": ["x@xn--bcher-kva.example"]}}}
    assert address_views(arguments) == [
        AddressView("draft.payload.to[1]", "kunde@bücher.example", "kunde@bücher.example",
                    "kunde@xn--bcher-kva.example", ()),
        AddressView("draft.payload.to[2]", "billing@p\u0430ypal.example",
                    "billing@p\u0430ypal.example", "billing@xn--pypal-4ve.example",
                    (("p\u0430ypal", "Cyrillic and Latin"),)),
        AddressView("draft.payload.cc[0]", "x@xn--bcher-kva.example", "x@bücher.example",
                    "x@xn--bcher-kva.example", ()),
    ]


def test_plain_and_unparseable_values_are_left_out() -> None:
    assert address_views({"to": ["a@example.com"], "n": 5, "s": "not an address",
                          "l": [1, None], "bad": "Eve <eve@bücher.example>"}) == []
