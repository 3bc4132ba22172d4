"""The page an admin resolves an unknown outcome from (docs/design.md#reconciliation): every
field of the action, where it went and under which key, how to check that destination, and
what its last lookup said, in words, with its time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from dispatch.models import Operation
from dispatch.services.reconciliation import operation_reconcile
from tests.conftest import World
from tests.console.conftest import Browser
from tests.db.test_renewals import cancelled_while_running

pytestmark = pytest.mark.django_db


def test_the_page_shows_the_action_the_check_and_the_last_lookup(
    world: World, as_user: Callable[[str, str], Browser], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bank answers that it holds no transfer under the key.
    monkeypatch.setattr("demo.handlers.bank_lookup", lambda base_url, key, timeout: None)
    operation = cancelled_while_running(world)
    asked = world.now + timedelta(seconds=30)
    operation_reconcile(operation_id=operation.id, now=asked, enqueue=False)
    stored = Operation.objects.get(id=operation.id)
    assert (stored.state, stored.lookup_found, stored.looked_up_at) == (
        "unknown", "absent", asked)

    admin = as_user("admin", "admin-pw")
    listing = admin.get("/console/operations/unknown/").content.decode()
    assert "<strong>Absent</strong>: the destination does not hold the effect, at" in listing
    body = admin.get(f"/console/operations/{operation.id}/").content.decode()
    # Every field, untruncated, and where it went under which key.
    for path, value in (("from_account", "acct-001"), ("to_account", "acct-999"),
                        ("amount", "10.00"), ("currency", "EUR"), ("memo", "(empty)")):
        assert f'<th scope="row" class="mono">{path}</th><td class="value">' in body
        assert value in body
    assert "It goes to <strong>bank</strong> at" in body
    assert f"under the idempotency key <span class=\"mono\">{operation.id}</span>" in body
    # How to check, from the extension's registration, naming this key.
    assert f"Ask the bank for the transfer with key {operation.id}" in body
    # The verdict in words, and when.
    assert "<strong>Absent</strong>: the destination does not hold the effect." in body
    assert f'<time datetime="{asked.isoformat()}" data-local-time>' \
           f'{asked:%Y-%m-%d %H:%M:%S} UTC</time>' in body


def test_before_any_lookup_the_page_says_so(
    world: World, as_user: Callable[[str, str], Browser], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("demo.handlers.bank_lookup", lambda base_url, key, timeout: None)
    operation = cancelled_while_running(world)
    Operation.objects.filter(id=operation.id).update(lookup_found="", looked_up_at=None)
    body = as_user("admin", "admin-pw").get(
        f"/console/operations/{operation.id}/").content.decode()
    assert "No lookup has answered yet" in body
