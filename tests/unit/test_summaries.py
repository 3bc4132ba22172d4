"""The sentence on top of an approval: the demo's summaries, the core's fallback and flags, and
an email draft read as an email (`dispatch.presentation`, `demo.summaries`)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from console.presenters import headline, message_view
from demo import extension
from demo.summaries import (
    EMAIL,
    attest_summary,
    email_summary,
    fetch_summary,
    lookup_summary,
    money,
    publish_summary,
    transfer_summary,
)
from dispatch.presentation import Money, Summary, summarize
from dispatch.runtime import Runtime
from protocols.contracts import ContractRegistry
from protocols.grants import Policy


def transfer(amount: str, currency: str = "EUR", memo: str = "urgent wire") -> dict[str, Any]:
    return {"from_account": "acct-001", "to_account": "acct-555", "amount": amount,
            "currency": currency, "memo": memo}


def draft(**payload: Any) -> dict[str, Any]:
    return {"draft": {"id": "res_1", "revision": 2, "digest": "sha256:ab", "payload": {
        "from": "support@acme.example", "to": ["ada@example.com"], "cc": [],
        "subject": "About your renewal", "body": "Dear Ada,\n\nIt renews.\nBye", **payload}}}


def test_a_transfer_reads_with_its_money_written_by_currency() -> None:
    summary = transfer_summary(transfer("99999.99"))
    assert summary.text == "Pay €99,999.99 from acct-001 to acct-555 — 'urgent wire'"
    assert summary.amounts == (Money(Decimal("99999.99"), "EUR"),)


@pytest.mark.parametrize(("amount", "currency", "written"), [
    ("12.50", "EUR", "€12.50"),
    ("1250.00", "USD", "$1,250.00"),
    ("5000", "JPY", "¥5,000"),  # no minor units (ISO 4217)
    ("1234567", "JPY", "¥1,234,567"),
    ("0.50", "GBP", "£0.50"),
    ("10.500", "KWD", "KWD10.500"),  # three minor units
])
def test_money_follows_the_currency(amount: str, currency: str, written: str) -> None:
    assert money(amount, currency) == written


def test_a_transfer_without_memo_has_no_quote() -> None:
    assert transfer_summary(transfer("5000", "JPY", memo="")).text == \
        "Pay ¥5,000 from acct-001 to acct-555"


def test_an_email_names_every_recipient_cc_included() -> None:
    assert email_summary(draft(cc=["finance@example.com"])).text == \
        "Email ada@example.com, cc finance@example.com — 'About your renewal'"
    many = [f"r{i}@example.com" for i in range(30)]
    text = email_summary(draft(to=many, cc=["a@example.com", "b@example.com"])).text
    assert all(address in text for address in [*many, "a@example.com", "b@example.com"])
    assert "more" not in text
    assert email_summary(draft()).text == "Email ada@example.com — 'About your renewal'"


def test_agent_text_is_quoted_on_one_line_and_shortened() -> None:
    text = email_summary(draft(subject="Line one\tand " + "x" * 200)).text
    assert text.startswith("Email ada@example.com — 'Line one and xxx")
    assert text.endswith("…'")
    assert len(text) < 130


def test_the_other_demo_contracts_read_sensibly() -> None:
    assert lookup_summary({"customer_id": "cus-42"}).text == "Look up customer cus-42 in the CRM"
    question = {"question": {"id": "res_q", "revision": 1, "digest": "sha256:q", "payload": {
        "topic": "coast", "text": "When is the sea highest?"}}}
    assert fetch_summary({**question, "source": "http://127.0.0.1/sources/tides"}).text == \
        "Fetch http://127.0.0.1/sources/tides for the question 'When is the sea highest?'"
    report = {"report": {"id": "res_r", "revision": 1, "digest": "sha256:r", "payload": {
        "question": "res_q", "title": "Tides", "body": "…", "citations": [{}, {}]}}}
    assert attest_summary({**report, "policy": "cited-sources/1"}).text == \
        "Check the report 'Tides' under the policy cited-sources/1"
    assert publish_summary({**report, "attestation": "att_1"}).text == \
        "Publish the report 'Tides' (2 citations), attested by att_1"


def test_every_demo_contract_registers_a_summary_and_the_draft_its_reading() -> None:
    runtime = Runtime(registry=ContractRegistry(), handlers={},
                      policy=Policy(allowed_effects=frozenset()))
    extension.register(runtime)
    assert {name for name, _ in runtime.summaries} == \
        {contract.qualified_name for contract in runtime.registry}
    assert runtime.presentations == {"email_draft": EMAIL}


def test_the_fallback_counts_the_arguments() -> None:
    assert summarize(None, "x.do", {"a": 1, "b": 2}).text == "x.do with 2 arguments"
    assert summarize(None, "x.do", {"a": 1}).text == "x.do with 1 argument"


def test_a_failing_or_empty_summary_falls_back() -> None:
    def broken(arguments: Any) -> Summary:
        raise KeyError("amount")

    assert summarize(broken, "x.do", {}).text == "x.do with 0 arguments"
    assert summarize(lambda arguments: " ", "x.do", {"a": 1}).text == "x.do with 1 argument"
    assert summarize(lambda arguments: "Do it", "x.do", {}) == Summary("Do it")


def test_the_headline_reveals_hidden_characters_and_badges_outside_effects() -> None:
    shown = headline(Summary("Pay \u202etxt.exe", amounts=(Money(Decimal("20000"), "EUR"),)),
                     ["read", "financial_write", "external_write"], large=True)
    assert shown.text == "Pay \\u202etxt.exe"
    assert shown.alarming == ("external_write", "financial_write")
    assert shown.large
    quiet = headline(Summary("Look up"), ["read"], large=False)
    assert quiet.alarming == ()
    assert not quiet.large


def test_a_draft_reads_as_an_email_with_its_bookkeeping_apart() -> None:
    view = message_view("draft", "email_draft", EMAIL,
                        draft(cc=["finance@example.com"], extra="kept")["draft"])
    assert view is not None
    assert [(h.label, h.values, h.listed) for h in view.headers] == [
        ("From", ("support@acme.example",), False),
        ("To", ("ada@example.com",), True),
        ("Cc", ("finance@example.com",), True),
        ("Subject", ("About your renewal",), False),
        ("extra", ("kept",), False),  # a member the presentation does not name is still shown
    ]
    assert view.body == "Dear Ada,\n\nIt renews.\nBye"
    assert view.bookkeeping == (("draft.id", "res_1"), ("draft.revision", "2"),
                                ("draft.digest", "sha256:ab"))
    assert message_view("draft", "email_draft", EMAIL, {"id": "res_1"}) is None
