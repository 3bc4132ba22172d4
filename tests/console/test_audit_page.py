"""The audit page as a person reads it: each event with its action's name and summary sentence,
its details as labelled fields (unknown keys under their own name), its times, and links to the
approval and the operation; a page costs the same queries whatever it holds."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from dispatch.models import AuditEvent
from dispatch.services.audit import audit_record
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.principals import human_create
from tests.conftest import World
from tests.console.conftest import Browser, text

pytestmark = pytest.mark.django_db

AUDIT = "/console/audit/"


def event_item(body: str, event: AuditEvent) -> str:
    """The page's item of one event, unescaped."""
    found = re.search(rf'<li class="audit-event" id="e-{event.id}">(.*?)</li>', body, re.S)
    assert found, f"event {event.id} ({event.kind}) is not on the page"
    return html.unescape(found.group(1))


def fields(item: str) -> dict[str, str]:
    """The item's labelled details, label to the value's text."""
    pairs = re.findall(r"<dt>(.*?)</dt><dd[^>]*>(.*?)</dd>", item, re.S)
    return {label: re.sub(r"<[^>]+>", "", value).strip() for label, value in pairs}


def event_of(kind: str, **where: Any) -> AuditEvent:
    return AuditEvent.objects.get(kind=kind, **where)


def test_a_claim_reads_as_its_action_with_links_and_labelled_details(
    world: World, admin: Browser,
) -> None:
    proposal, permit = world.approved_email(to=["ada@example.com"])
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=world.now, enqueue=False)
    body = text(admin.get(AUDIT))

    claimed = event_item(body, event_of("permit.claimed", proposal_id=proposal.id))
    assert "Permit claimed" in claimed
    assert '<span class="audit-operation mono">email.send</span>' in claimed
    assert "Email ada@example.com — 'Your refund'" in claimed
    assert f'href="/console/approvals/{proposal.approval.id}/"' in claimed
    assert f'href="/console/operations/{operation.id}/"' in claimed
    assert f"{world.now:%Y-%m-%d %H:%M:%S} UTC" in claimed
    assert f'datetime="{world.now.isoformat()}"' in claimed
    details = fields(claimed)
    assert details["Digest"] == proposal.digest
    assert details["Permit"] == permit.id
    assert details["Contract fingerprint"] == proposal.contract_fingerprint
    assert details["Execution"] == proposal.execution_id
    resource = proposal.resource_refs[0]
    assert details["Resources"] == f"{resource['id']} revision {resource['revision']}"
    assert details["Resource moves"] == f"{resource['id']} revision {resource['revision']} " \
                                        "(claim)"

    # An event from before the claim links the operation its action led to, too.
    requested = event_item(body, event_of("approval.requested", proposal_id=proposal.id))
    assert "Email ada@example.com — 'Your refund'" in requested
    assert f'href="/console/operations/{operation.id}/"' in requested
    assert f'href="/console/approvals/{proposal.approval.id}/"' in requested
    details = fields(requested)
    assert details["Approval"] == proposal.approval.id
    assert details["For role"] == "operator"
    expires = proposal.approval.expires_at
    assert details["Expires at"] == f"{expires:%Y-%m-%d %H:%M:%S} UTC"
    assert f'datetime="{expires.isoformat()}"' in requested

    # The links lead to working pages.
    assert admin.get(f"/console/approvals/{proposal.approval.id}/").status_code == 200
    assert admin.get(f"/console/operations/{operation.id}/").status_code == 200


def test_an_event_of_no_action_reads_as_its_kind_with_readable_values(
    world: World, admin: Browser,
) -> None:
    body = text(admin.get(f"{AUDIT}?kind=grant.issued"))
    issued = AuditEvent.objects.filter(kind="grant.issued", tenant_id=world.owner.tenant_id,
                                       details__operations=["email.send"]).get()
    item = event_item(body, issued)
    assert "Grant issued" in item
    assert "audit-operation" not in item and "/console/approvals/" not in item
    assert fields(item) == {"Grant": issued.details["grant_id"], "Granted to": "owner",
                            "Operations": "email.send",
                            "Scope": "mailbox: support@acme.example"}


def test_unknown_keys_are_shown_under_their_own_name(world: World, admin: Browser) -> None:
    proposal = world.propose_transfer(amount="12.50", memo="rent")
    # A refusal whose details carry keys this console has no label for (a later version's,
    # or a denial's own).
    audit_record(tenant_id=world.owner.tenant_id, kind="dispatch.denied", actor="owner",
                 at=timezone.now(), proposal_id=proposal.id,
                 details={"code": "budget_exhausted", "ticket": "T-42", "checked": False,
                          "nested": {"a": [1, 2]}, "nothing": None})
    body = text(admin.get(AUDIT))
    item = event_item(body, AuditEvent.objects.get(kind="dispatch.denied"))
    assert "Pay €12.50 from acct-001 to acct-999 — 'rent'" in item
    assert fields(item) == {"Refusal code": "budget_exhausted", "checked": "no",
                            "nested": "a: 1, 2", "nothing": "none", "ticket": "T-42"}


def test_a_refusal_of_no_proposal_still_names_its_operation(
    world: World, admin: Browser,
) -> None:
    """A dispatch refused for a proposal id that names nothing: no sentence, no links, the
    operation its details name."""
    audit_record(tenant_id=world.owner.tenant_id, kind="dispatch.denied", actor="owner",
                 at=world.now, proposal_id="prp_missing",
                 details={"code": "not_found", "kind": "proposal", "id": "prp_missing",
                          "operation": "payments.transfer"})
    item = event_item(text(admin.get(AUDIT)), AuditEvent.objects.get(kind="dispatch.denied"))
    assert '<span class="audit-operation mono">payments.transfer</span>' in item
    assert "/console/approvals/" not in item and "/console/operations/" not in item
    assert fields(item) == {"Operation": "payments.transfer", "Refusal code": "not_found",
                            "Kind": "proposal", "Id": "prp_missing"}


def test_another_tenants_proposal_lends_no_sentence_or_link(
    world: World, admin: Browser,
) -> None:
    theirs = world.propose_email(world.draft())  # acme's, seen from globex's admin below
    audit_record(tenant_id=world.outsider.tenant_id, kind="dispatch.denied", actor="outsider",
                 at=world.now, proposal_id=theirs.id, details={"code": "not_found"})
    human_create(name="globex-admin", tenant="globex", role="admin", password="pw")
    browser = Browser()
    browser.login("globex-admin", "pw")
    item = event_item(text(browser.get(AUDIT)), AuditEvent.objects.get(kind="dispatch.denied"))
    assert "audit-operation" not in item and "headline" not in item
    assert "/console/approvals/" not in item and "/console/operations/" not in item
    assert "Your refund" not in item


def test_a_page_costs_the_same_queries_whatever_it_holds(
    world: World, admin: Browser, django_assert_max_num_queries: Any,
) -> None:
    admin.get(AUDIT)  # the session and the runtime, warmed
    world.propose_transfer()
    with django_assert_max_num_queries(QUERIES) as few:
        small = admin.get(AUDIT)
    for i in range(30):
        proposal, _ = world.approved_email(to=[f"c{i}@example.com"])
        proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                          enqueue=False)
    with django_assert_max_num_queries(QUERIES) as many:
        full = admin.get(AUDIT)
    assert text(small).count('class="audit-event"') < 10
    assert text(full).count('class="audit-event"') == 50
    # Every row of an action has its sentence (a draft's `resource.created` names none).
    newest = AuditEvent.objects.filter(tenant_id=world.owner.tenant_id).order_by("-id")[:50]
    assert text(full).count('class="headline') == sum(1 for e in newest if e.proposal_id) == 40
    assert len(many.captured_queries) == len(few.captured_queries)


#: The session, the user, the principal, the page's events, its proposals (each with its
#: approval and operation) and its events' seals: six, however many rows.
QUERIES = 6


def test_each_event_shows_its_seal_block_or_not_yet_sealed(world: World, admin: Browser) -> None:
    from django.test import override_settings

    from dispatch.models import AuditSeal
    from dispatch.services.sealer import seal_tenant

    world.propose_transfer()
    first = AuditEvent.objects.filter(tenant_id=world.owner.tenant_id).order_by("id").first()
    assert first is not None
    assert "not yet sealed" in event_item(text(admin.get(AUDIT)), first)
    with override_settings(AUDIT_SEAL_LAG=0):
        assert seal_tenant(world.owner.tenant_id) > 0
    audit_record(tenant_id=world.owner.tenant_id, kind="test.later", actor="t",
                 at=timezone.now() + timedelta(hours=1))
    later = AuditEvent.objects.get(kind="test.later")
    body = text(admin.get(AUDIT))
    assert AuditSeal.objects.get(event_id=first.pk).block == 1
    assert re.search(r'class="audit-seal[^"]*"[^>]*>block 1<', event_item(body, first))
    assert "not yet sealed" in event_item(body, later)
