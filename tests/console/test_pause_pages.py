"""The emergency stop in the console (docs/design.md#approval-policies): an admin pauses and
resumes from the Pauses page (a pause asks first); every console page of the tenant says who
paused what and when, while it is paused; operators see the banner but cannot pause."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from dispatch.models import AuditEvent, Pause
from dispatch.services.pauses import pause_set
from tests.conftest import World
from tests.console.conftest import Browser, text

pytestmark = pytest.mark.django_db

PAUSES = "/console/pauses/"


def test_an_admin_pauses_a_contract_and_every_page_says_so(world: World, admin: Browser,
                                                           operator: Browser) -> None:
    page = text(admin.get(PAUSES))
    assert "Nothing is paused." in page
    assert 'data-confirm="Pause what you chose' in page  # asks before it stops anything
    assert '<a href="/console/pauses/" aria-current="page">Pauses</a>' in page
    response = admin.post(PAUSES + "pause/", {"operation": "payments.transfer", "agent": "",
                                              "reason": "fraud alert"})
    assert response.status_code == 302
    pause = Pause.objects.get()
    assert (pause.operation, pause.agent, pause.paused_by) == ("payments.transfer", None, "admin")
    assert AuditEvent.objects.filter(kind="pause.set", actor="admin").count() == 1
    for browser, url in ((admin, "/console/"), (admin, "/console/audit/"),
                         (operator, "/console/"), (operator, "/console/decided/")):
        page = text(browser.get(url))
        banner = re.search(r'<div class="alert alert-paused".*?</div>', page, re.S)
        assert banner, url
        assert "<strong>Contract payments.transfer</strong>, paused by admin at" in banner[0]
        assert pause.paused_at.strftime("%Y-%m-%d %H:%M:%S") in banner[0]
        assert "fraud alert" in banner[0]


def test_an_admin_resumes_and_the_banner_goes(world: World, admin: Browser) -> None:
    pause, _ = pause_set(actor="manage.py", tenant=world.admin.tenant, agent=world.owner,
                         now=timezone.now())
    page = text(admin.get(PAUSES))
    assert "<strong>Agent owner</strong>, paused by manage.py" in page
    response = admin.post(f"{PAUSES}{pause.id}/resume/", {})
    assert response.status_code == 302
    pause.refresh_from_db()
    assert pause.lifted_by == "admin" and pause.lifted_at is not None
    assert AuditEvent.objects.filter(kind="pause.lifted", actor="admin").count() == 1
    page = text(admin.get(PAUSES))
    assert "alert-paused" not in page and "Nothing is paused." in page
    assert "resumed by admin" in page
    # Resumed meanwhile, or never there: not found, nothing written.
    assert admin.post(f"{PAUSES}{pause.id}/resume/", {}).status_code == 404


def test_another_tenants_pause_is_neither_shown_nor_resumable(world: World,
                                                               admin: Browser) -> None:
    from dispatch.models import Tenant

    other = Tenant.objects.get(id=world.outsider.tenant_id)
    theirs, _ = pause_set(actor="manage.py", tenant=other, now=timezone.now())
    assert "alert-paused" not in text(admin.get("/console/"))
    assert admin.post(f"{PAUSES}{theirs.id}/resume/", {}).status_code == 404
    theirs.refresh_from_db()
    assert theirs.lifted_at is None


def test_an_operator_cannot_pause_or_resume(world: World, operator: Browser) -> None:
    pause, _ = pause_set(actor="manage.py", tenant=world.admin.tenant, now=timezone.now())
    assert operator.get(PAUSES).status_code == 403
    operator.get("/console/")
    assert operator.post(PAUSES + "pause/", {"operation": "", "agent": ""}).status_code == 403
    assert operator.post(f"{PAUSES}{pause.id}/resume/", {}).status_code == 403
    page = text(operator.get("/console/"))
    assert "<strong>The tenant</strong>, paused by manage.py" in page
    assert "Pauses page" not in page and 'href="/console/pauses/"' not in page
    pause.refresh_from_db()
    assert pause.lifted_at is None and Pause.objects.count() == 1


def test_a_pause_form_naming_nothing_known_is_refused(world: World, admin: Browser) -> None:
    admin.get(PAUSES)
    response = admin.post(PAUSES + "pause/", {"operation": "x.y", "agent": world.approver.id})
    assert response.status_code == 400
    assert not Pause.objects.exists()
