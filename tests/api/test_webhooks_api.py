"""`POST/GET webhooks/`, `DELETE webhooks/{id}/` (docs/rest-api.md#webhooks): the secret once,
http(s) only, one's own endpoints only."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.models import Notification, WebhookEndpoint
from tests.api.conftest import API, Caller, assert_error, schema_errors
from tests.conftest import World

pytestmark = pytest.mark.django_db

HOOK = {"url": "http://127.0.0.1:9/hooks", "events": ["approval.granted", "operation.completed"]}


def delete(caller: Caller, path: str) -> Any:
    return caller.client.delete(API + path, **caller._headers())


def test_the_secret_is_shown_once(owner: Caller) -> None:
    created = owner.post("webhooks/", HOOK)
    assert created.status_code == 201, created.content
    body = created.json()
    assert set(body) == {"id", "url", "events", "created_at", "secret"}
    assert body["secret"].startswith("whsec_")
    assert body["events"] == sorted(HOOK["events"])
    listed = owner.get("webhooks/")
    assert listed.status_code == 200
    assert listed.json()["results"] == [
        {k: v for k, v in body.items() if k != "secret"}]
    assert body["secret"] not in listed.content.decode()


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "example.com",
                                 "javascript:alert(1)", "http://user:pw@example.com/",
                                 "http:///nohost", ""])
def test_only_http_urls(owner: Caller, url: str) -> None:
    assert [e["pointer"] for e in schema_errors(owner.post(
        "webhooks/", {**HOOK, "url": url}))] == ["/url"]


def test_unknown_events_are_refused(owner: Caller) -> None:
    assert [e["pointer"] for e in schema_errors(owner.post(
        "webhooks/", {**HOOK, "events": ["approval.granted", "permit.minted"]}))] \
        == ["/events/1"]
    assert schema_errors(owner.post("webhooks/", {**HOOK, "events": []}))


def test_loopback_is_refused_unless_the_deployment_allows_it(
    owner: Caller, settings: Any,
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE = False
    for url in ("http://127.0.0.1:9/hooks", "http://localhost/x", "http://10.0.0.8/",
                "http://[::1]/", "http://169.254.169.254/latest/meta-data/"):
        (error,) = schema_errors(owner.post("webhooks/", {**HOOK, "url": url}))
        assert "public address" in error["message"], error


def test_an_agent_deletes_only_its_own(owner: Caller, caller: Any, world: World) -> None:
    created = owner.post("webhooks/", HOOK).json()
    outsider = caller("outsider")
    assert_error(delete(outsider, f"webhooks/{created['id']}/"), 404, "not_found")
    assert outsider.get("webhooks/").json() == {"results": []}
    deleted = delete(owner, f"webhooks/{created['id']}/")
    assert deleted.status_code == 200
    assert deleted.json() == {k: v for k, v in created.items() if k != "secret"}
    assert_error(delete(owner, f"webhooks/{created['id']}/"), 404, "not_found")
    assert owner.get("webhooks/").json() == {"results": []}
    # Nothing more is written for it.
    proposal, _ = world.approved_email()
    assert not Notification.objects.filter(proposal_id=proposal.id).exists()
    assert WebhookEndpoint.objects.get(id=created["id"]).deleted_at is not None


def test_unauthenticated_is_refused(caller: Any) -> None:
    assert_error(caller(None).post("webhooks/", HOOK), 401, "unauthenticated")
