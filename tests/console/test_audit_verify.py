"""The audit page's Verify action (docs/audit-seal.md#verification): admins only; it says what
`manage.py audit_verify --tenant T` says of the admin's tenant, naming the first tampered event."""

from __future__ import annotations

import html

import pytest
from django.db import connection

from dispatch.models import AuditEvent
from dispatch.services.sealer import seal_tenant
from tests.audit.conftest import _seal_keys  # noqa: F401 (the fixture, used by name)
from tests.conftest import World
from tests.console.conftest import Browser, text

# The sealed audit's fixed keys and no sealing lag (tests/audit/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_seal_keys")]

AUDIT, VERIFY = "/console/audit/", "/console/audit/verify/"


def verdict(admin: Browser) -> str:
    admin.get(AUDIT)  # the page with the button (and its CSRF token)
    response = admin.post(VERIFY, {})
    assert response.status_code == 302 and response["Location"] == AUDIT
    return html.unescape(text(admin.get(AUDIT)))


@pytest.mark.audit_corrupted
def test_verify_says_the_chain_verifies_then_names_the_changed_event(
        world: World, admin: Browser) -> None:
    assert 'action="/console/audit/verify/"' in text(admin.get(AUDIT))
    assert seal_tenant(world.owner.tenant.id) > 0
    assert "The audit chain verifies" in verdict(admin)

    event = AuditEvent.objects.filter(tenant_id=world.owner.tenant.id).order_by("id").first()
    assert event is not None
    with connection.cursor() as cursor:  # tampering behind the application's back
        cursor.execute('UPDATE "dispatch_auditevent" SET "actor" = %s WHERE "id" = %s',
                       ["mallory", event.pk])
    page = verdict(admin)
    assert "The audit chain does not verify" in page
    assert f"event {event.pk} (seq 1, block 1): changed" in page


def test_verify_is_for_admins_only_and_posts_only(world: World, operator: Browser,
                                                  admin: Browser) -> None:
    operator.get("/console/")
    assert operator.post(VERIFY, {}).status_code == 403
    # Opened in a browser, the address leads to the audit page, and verifies nothing.
    opened = admin.get(VERIFY)
    assert (opened.status_code, opened["Location"]) == (302, "/console/audit/")
    assert "The audit chain" not in text(admin.get("/console/audit/"))
