"""The sentence on top of each queue row and approval page, its red badges and large-amount
flag, and an email draft shown as an email."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest

from dispatch.services.resources import resource_create
from tests.conftest import MAILBOX, World
from tests.console.conftest import Browser, text
from tests.support.caps import deploy
from tests.support.quorum import FOUR_EYES as EUR_FOUR_EYES
from tests.support.quorum import four_eyes

__all__ = ["four_eyes"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_runtime", "four_eyes")]

QUEUE = "/console/"
LARGE_SENTENCE = "Pay €99,999.99 from acct-001 to acct-999 — 'urgent wire'"
EMAIL_SENTENCE = "Email ada@example.com, cc finance@example.com — 'About your renewal'"


def page_url(proposal: Any) -> str:
    return f"/console/approvals/{proposal.approval.id}/"


def email_with_cc(world: World, body: str = "Dear Ada,\n\nYour plan renews on 1 May.") -> Any:
    resource, _ = resource_create(principal=world.owner, kind="email_draft", payload={
        "from": MAILBOX, "to": ["ada@example.com"], "cc": ["finance@example.com"],
        "subject": "About your renewal", "body": body}, now=world.now)
    return world.propose_email(resource)


def row_of(body: str, proposal: Any) -> str:
    """The queue row (`<tr>…</tr>`) of `proposal`'s approval."""
    for row in re.findall(r"<tr[ >].*?</tr>", body, flags=re.S):
        if f'id="q-{proposal.approval.id}"' in row:
            return row
    raise AssertionError(f"no queue row for {proposal.approval.id}")


def sentence(fragment: str) -> str:
    found = re.search(r'<span class="sentence">(.*?)</span>', fragment, flags=re.S)
    assert found, "no sentence"
    return html.unescape(found.group(1))


def test_queue_rows_say_what_each_action_does(world: World, operator: Browser) -> None:
    large = world.propose_transfer(amount="99999.99", memo="urgent wire")
    small = world.propose_transfer(amount="12.5", memo="refund")
    email = email_with_cc(world)
    body = text(operator.get(QUEUE))
    large_row, small_row, email_row = (row_of(body, p) for p in (large, small, email))
    assert sentence(large_row) == LARGE_SENTENCE
    assert sentence(small_row) == "Pay €12.50 from acct-001 to acct-999 — 'refund'"
    assert sentence(email_row) == EMAIL_SENTENCE
    # Money moved and mail sent are red; only the large amount is flagged large.
    for row in (large_row, small_row):
        assert 'badge-financial-write">financial_write' in row
        assert 'badge-external-write">external_write' in row
    assert 'badge-external-write">external_write' in email_row
    assert "badge-financial-write" not in email_row
    assert 'class="row-large"' in large_row
    assert 'badge-large">large amount' in large_row
    assert "badge-large" not in small_row and "row-large" not in small_row
    assert "badge-large" not in email_row


def test_the_flag_follows_the_approval_rules_currency_by_currency(
    world: World, operator: Browser, settings: Any,
) -> None:
    deploy(settings, [*EUR_FOUR_EYES, {"operation": "payments.transfer", "quorum": 2, "when": {
        "amount": {"gte": "1500000"}, "currency": {"eq": "JPY"}}}])
    flagged = {
        "¥1,234,567": (world.propose_transfer(amount="1234567", currency="JPY"), False),
        "€9,999.99": (world.propose_transfer(amount="9999.99"), False),
        "€10,000.00": (world.propose_transfer(amount="10000.00"), True),
        # No rule names KWD: held to the strictest rule, flagged whatever the amount.
        "KWD 9,999.99": (world.propose_transfer(amount="9999.99", currency="KWD"), True),
    }
    body = text(operator.get(QUEUE))
    for shown, (proposal, large) in flagged.items():
        assert ("badge-large" in row_of(body, proposal)) is large, shown
        assert ("badge-large" in text(operator.get(page_url(proposal)))) is large, shown
        # The flag and the quorum say the same thing.
        assert (proposal.approval.quorum == 2) is large, shown


def test_the_approval_page_leads_with_the_sentence(world: World, operator: Browser) -> None:
    large = world.propose_transfer(amount="99999.99", memo="urgent wire")
    body = text(operator.get(page_url(large)))
    head = body.split('<div class="detail-grid">')[0]
    assert sentence(head) == LARGE_SENTENCE
    assert "badge-financial-write" in head
    assert 'badge-large">large amount' in head
    assert "99999.99" in body  # the canonical amount, as hashed, is still shown as is


def test_agent_text_in_the_sentence_is_escaped(world: World, operator: Browser) -> None:
    proposal = world.propose_transfer(amount="5", memo="<script>alert(1)</script>\u202e")
    for body in (text(operator.get(QUEUE)), text(operator.get(page_url(proposal)))):
        assert "<script>alert(1)" not in body
        assert "&lt;script&gt;alert(1)&lt;/script&gt;\\u202e" in body


def test_an_email_reads_as_an_email(world: World, operator: Browser) -> None:
    proposal = email_with_cc(world)
    body = text(operator.get(page_url(proposal)))
    message = body.split('<article class="message"')[1].split("</article>")[0]
    headers = re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", message, flags=re.S)
    assert [label for label, _ in headers] == ["From", "To", "Cc", "Subject"]
    shown = dict(headers)
    assert shown["From"] == "support@acme.example"
    assert shown["To"] == '<ul class="recipients"><li>ada@example.com</li></ul>'
    assert shown["Cc"] == '<ul class="recipients"><li>finance@example.com</li></ul>'
    assert shown["Subject"] == "About your renewal"
    # The body keeps its line breaks; the bookkeeping is folded away below it.
    assert ">Dear Ada,\n\nYour plan renews on 1 May.</div>" in message
    bookkeeping = message.split('<details class="bookkeeping">')[1]
    resolved = json.loads(proposal.canonical)["arguments"]["draft"]
    for path in ("draft.id", "draft.revision", "draft.digest"):
        assert f'<th scope="row" class="mono">{path}</th>' in bookkeeping
    assert resolved["id"] in bookkeeping
    assert resolved["digest"] in bookkeeping
    # Not as a JSON list in the fields table any more; the destination in words.
    assert "draft.payload.cc" not in body
    assert re.search(r"It goes to <strong>smtp_sink</strong> at "
                     r'<span class="mono">127\.0\.0\.1:\d+</span>', body)
    # What the page promised before stays: digest, snapshot, the binding.
    assert f'name="digest" value="{proposal.digest}"' in body
    assert "&quot;cc&quot;: [\n" in body
    assert "First revision" in body
    assert "The permit will bind" in body


def test_a_contract_without_a_presentation_keeps_its_table(world: World,
                                                         operator: Browser) -> None:
    proposal = world.propose_transfer(amount="42", memo="x")
    body = text(operator.get(page_url(proposal)))
    assert '<article class="message"' not in body
    assert '<th scope="row" class="mono">amount</th><td class="value">42.00</td>' in body
