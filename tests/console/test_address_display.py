"""The approval page shows each internationalized domain as written and as sent (punycode), and
flags a domain label that mixes scripts; the canonical snapshot stays the hashed text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.utils.html import escape

from tests.conftest import World
from tests.console.conftest import Browser, text

pytestmark = pytest.mark.django_db

MIXED = "billing@p\u0430ypal.example"  # a Cyrillic "а" among Latin letters


def page(operator: Browser, world: World, to: list[str]) -> tuple[Any, str]:
    proposal = world.propose_email(world.draft(to=to))
    response = operator.get(f"/console/approvals/{proposal.approval.id}/")
    assert response.status_code == 200
    return proposal, text(response)


def addresses_section(body: str) -> str:
    found = re.search(r'<section[^>]*aria-labelledby="addresses-title".*?</section>', body,
                      re.DOTALL)
    assert found, "the page has no section on addresses"
    return found.group(0)


def test_internationalized_domain_is_shown_in_unicode_and_punycode(
    world: World, operator: Browser,
) -> None:
    _, body = page(operator, world, ["kunde@bücher.example"])
    section = addresses_section(body)
    assert "bücher.example" in section
    assert "xn--bcher-kva.example" in section
    assert "draft.payload.to[0]" in section
    assert "mixed scripts" not in body.lower()


def test_a_label_as_written_is_shown_in_unicode_too(world: World, operator: Browser) -> None:
    _, body = page(operator, world, ["customer@example.com", "kunde@xn--bcher-kva.example"])
    section = addresses_section(body)
    assert "kunde@bücher.example" in section
    assert "draft.payload.to[1]" in section
    assert "customer@example.com" not in section  # plain ASCII domains need no second form


def test_mixed_script_label_is_flagged(world: World, operator: Browser) -> None:
    _, body = page(operator, world, [MIXED])
    section = addresses_section(body)
    warning = re.search(r'<div class="alert alert-warning" role="alert">(.*?)</div>', section,
                        re.DOTALL)
    assert warning, "no warning on the page"
    assert "Mixed scripts" in warning.group(1)
    assert "Cyrillic" in warning.group(1)
    assert "Latin" in warning.group(1)
    assert "xn--pypal-4ve.example" in section
    assert "badge-mixed-scripts" in section


def test_plain_addresses_need_no_address_section(world: World, operator: Browser) -> None:
    _, body = page(operator, world, ["customer@example.com"])
    assert 'aria-labelledby="addresses-title"' not in body
    assert "mixed scripts" not in body.lower()


def test_page_shows_the_exact_address_and_the_hashed_text(
    world: World, operator: Browser,
) -> None:
    proposal, body = page(operator, world, ["kunde@bücher.example", MIXED])
    # The exact canonical text, unchanged, is on the page (HTML-escaped only).
    assert escape(proposal.canonical) in body
    assert body.count(MIXED) >= 3  # the fields table, the snapshot and the address section


def test_invisible_characters_in_a_subject_are_shown_as_escapes(
    world: World, operator: Browser,
) -> None:
    proposal = world.propose_email(world.draft(subject="Refund \u202eenod\u202c for order 7"))
    body = text(operator.get(f"/console/approvals/{proposal.approval.id}/"))
    assert body.count("\u202e") == 1  # only in the exact canonical text, which must stay so
    assert "\u202e" in proposal.canonical
    assert "Refund \\u202eenod\\u202c for order 7" in body
