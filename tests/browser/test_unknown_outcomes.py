"""In Chromium: a renewal is decided by an operator from the queue, and an admin resolves an
unknown outcome from its page, reads what the destination last said and how to check it, sees
the banner in words, and finds the pending renewal withdrawn (docs/design.md#renewals)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from dispatch.handlers import LookupFailedError
from dispatch.models import Operation, Renewal
from dispatch.services.reconciliation import operation_reconcile
from dispatch.services.renewals import operation_reauthorize
from tests.conftest import World
from tests.db.test_renewals import stopped_transfer
from tests.support.destinations import Destinations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def console_errors(page: Any) -> Iterator[list[str]]:
    """Every error the page logs to Chromium's console; none is expected."""
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    yield errors
    assert errors == []


def test_an_operator_decides_a_renewal_from_the_queue(
    live: World, destinations: Destinations, settings: Any, page: Any, login: Any,
    screenshot: Any, console_errors: list[str],
) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True  # attempt 2 runs on the grant's commit
    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=timezone.now(), reason="the bank was down")
    login("approver", "approver-pw")
    renewals = page.locator("#renewals")
    expect(renewals).to_contain_text("asked for it; you decide")
    expect(renewals).to_contain_text("the bank was down")
    renewals.get_by_role("link", name="payments.transfer: attempt 2").click()
    page.wait_for_url(f"**/console/renewals/{renewal.id}/")
    # Every field of the action a repeat would send, and where.
    fields = page.locator("table.fields")
    expect(fields).to_contain_text("acct-999")
    expect(fields).to_contain_text("lose-response-once.test")
    expect(page.locator(".destination-words")).to_contain_text(operation.id)
    screenshot("renewal-decision")
    page.get_by_role("button", name="Approve attempt 2").click()
    expect(page.get_by_text(f"Approved. Attempt 2 of operation {operation.id} is queued "
                            "under the same key.")).to_be_visible()
    expect(page.locator("#renewal-decision")).to_contain_text("Approved by approver")
    expect(page.get_by_role("button", name="Approve attempt 2")).to_have_count(0)
    assert Renewal.objects.get(id=renewal.id).state == "granted"
    assert Operation.objects.get(id=operation.id).state == "completed"  # one transfer, same key
    page.goto("/console/")
    expect(page.locator("#renewals")).to_have_count(0)


def test_an_admin_resolves_and_the_renewal_is_withdrawn(
    live: World, destinations: Destinations, page: Any, login: Any, screenshot: Any,
    monkeypatch: pytest.MonkeyPatch, console_errors: list[str],
) -> None:
    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.owner, operation_id=operation.id,
                                    now=timezone.now())

    def bank_down(base_url: str, key: str, timeout: float) -> None:
        raise LookupFailedError("connection refused")

    monkeypatch.setattr("demo.handlers.bank_lookup", bank_down)
    asked = timezone.now() - timedelta(seconds=1)
    operation_reconcile(operation_id=operation.id, now=asked, enqueue=False)

    login("admin", "admin-pw")
    page.goto(f"/console/operations/{operation.id}/")
    lookup = page.locator("#last-lookup")
    expect(lookup).to_contain_text("Could not tell: the destination's answer proves nothing "
                                   "either way.")
    expect(lookup).to_contain_text(f"{asked:%Y-%m-%d %H:%M:%S} UTC")
    # and in the reader's own zone where it is not UTC (console.js; tests/browser/test_audit.py)
    expect(lookup.locator("time[data-local-time]")).to_be_visible()
    expect(lookup).to_contain_text(f"Ask the bank for the transfer with key {operation.id}")
    expect(page.locator("table.fields")).to_contain_text("acct-999")
    screenshot("unknown-outcome")

    page.get_by_label("Evidence note").fill("The bank's statement shows the transfer once.")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Mark completed").click()
    page.wait_for_url("**/console/operations/unknown/")
    banner = page.locator(".messages")
    expect(banner).to_contain_text("Recorded as completed: the effect happened.")
    expect(banner).to_contain_text(f"Its pending renewal of attempt {renewal.attempt} was "
                                   "withdrawn: no operator can approve it now.")
    assert Operation.objects.get(id=operation.id).state == "reconciled_completed"

    page.goto(f"/console/renewals/{renewal.id}/")
    decision = page.locator("#renewal-decision")
    expect(decision).to_contain_text("Withdrawn")
    expect(decision).to_contain_text("an admin recorded the operation as completed")
    expect(page.get_by_role("button", name="Approve attempt 2")).to_have_count(0)
    screenshot("renewal-withdrawn")
    assert Renewal.objects.get(id=renewal.id).state == "revoked"
