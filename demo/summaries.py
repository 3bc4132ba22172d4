"""What each demo action says in one sentence, and how an email draft reads, for the console
(`dispatch.presentation`): registered with the contracts and the kind by `demo.extension`.

Each summary takes the snapshot's arguments, resources resolved (`{"draft": {"id", "revision",
"digest", "payload"}}`), and names every party the action reaches: all `to` and `cc` recipients,
both accounts. Money is written by its currency with Babel (`€99,999.99`, `¥5,000`); only here,
for reading: the canonical amount stays the decimal string the snapshot holds. Text the agent
wrote (a memo, a subject) is quoted and shortened; the console escapes it.
Django-free, like the contracts.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from babel.numbers import format_currency

from dispatch.presentation import Header, MessagePresentation, Money, Summarizer, Summary

#: How much agent-written text a sentence quotes before it shortens it.
QUOTE_LIMIT = 80

EMAIL = MessagePresentation(
    title="Email",
    headers=(Header("From", "from"), Header("To", "to"), Header("Cc", "cc"),
             Header("Subject", "subject")),
    body="body",
)


def money(amount: str | Decimal, currency: str) -> str:
    """`amount` of `currency` as an American-English reader writes it: `€99,999.99`,
    `¥5,000` (the currency's own minor units, ISO 4217)."""
    return format_currency(Decimal(amount), currency, locale="en_US")


def quoted(text: Any) -> str:
    """Agent-written text in quotes, on one line, shortened past `QUOTE_LIMIT` characters."""
    line = " ".join(str(text).split())
    if len(line) > QUOTE_LIMIT:
        line = line[:QUOTE_LIMIT - 1].rstrip() + "…"
    return f"'{line}'"


def _payload(arguments: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    payload = arguments[name]["payload"]
    assert isinstance(payload, Mapping)
    return payload


def email_summary(arguments: Mapping[str, Any]) -> Summary:
    """`Email ada@example.com, cc finance@example.com — 'About your renewal'`: every
    recipient, never `and 3 more`."""
    draft = _payload(arguments, "draft")
    recipients = ", ".join(draft["to"])
    if draft.get("cc"):
        recipients += ", cc " + ", ".join(draft["cc"])
    return Summary(f"Email {recipients} — {quoted(draft['subject'])}")


def transfer_summary(arguments: Mapping[str, Any]) -> Summary:
    """`Pay €99,999.99 from acct-001 to acct-555 — 'urgent wire'`; the amount is declared, so
    the console can flag a large one."""
    amount, currency = Decimal(arguments["amount"]), arguments["currency"]
    text = (f"Pay {money(amount, currency)} from {arguments['from_account']} "
            f"to {arguments['to_account']}")
    if arguments.get("memo"):
        text += f" — {quoted(arguments['memo'])}"
    return Summary(text, amounts=(Money(amount, currency),))


def lookup_summary(arguments: Mapping[str, Any]) -> Summary:
    return Summary(f"Look up customer {arguments['customer_id']} in the CRM")


def fetch_summary(arguments: Mapping[str, Any]) -> Summary:
    question = _payload(arguments, "question")
    return Summary(f"Fetch {arguments['source']} for the question {quoted(question['text'])}")


def attest_summary(arguments: Mapping[str, Any]) -> Summary:
    report = _payload(arguments, "report")
    return Summary(f"Check the report {quoted(report['title'])} under the policy "
                   f"{arguments['policy']}")


def publish_summary(arguments: Mapping[str, Any]) -> Summary:
    report = _payload(arguments, "report")
    count = len(report["citations"])
    return Summary(f"Publish the report {quoted(report['title'])} ({count} "
                   f"citation{'' if count == 1 else 's'}), attested by "
                   f"{arguments['attestation']}")


#: Each demo contract's summary, by name (`Runtime.register(..., summary=...)`).
SUMMARIES: Mapping[str, Summarizer] = {
    "email.send": email_summary,
    "payments.transfer": transfer_summary,
    "crm.lookup": lookup_summary,
    "research.fetch": fetch_summary,
    "evidence.attest": attest_summary,
    "report.publish": publish_summary,
}

#: How each demo resource kind's payload reads, by kind (`register_resource_kind`).
PRESENTATIONS: Mapping[str, MessagePresentation] = {"email_draft": EMAIL}
