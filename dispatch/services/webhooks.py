"""Agents' webhook endpoints (docs/design.md#notifications): `POST webhooks/` registers one for
the agent's own proposals' decisions and outcomes, with a secret shown once; delivery is
`dispatch.services.notifications`'s. An endpoint's address must be public unless
`WEBHOOK_ALLOW_PRIVATE` (checked here when it is registered, and again at each delivery, where
the request goes to the address that check resolved: `dispatch.outbound`).
"""

from __future__ import annotations

import re
import secrets
from base64 import b64encode
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction

from dispatch import outbound
from dispatch.models import (
    Principal,
    WebhookEndpoint,
)
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject

#: What an agent's endpoint may ask to hear of its own proposals.
AGENT_EVENTS = (
    "approval.requested", "approval.granted", "approval.denied", "approval.expired",
    "operation.completed", "operation.failed_no_effect", "operation.unknown",
    "operation.reconciled_completed", "operation.reconciled_no_effect",
)
#: Webhook endpoints one agent may hold at once.
MAX_ENDPOINTS = 20
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


@dataclass(frozen=True)
class Registered:
    endpoint: WebhookEndpoint
    secret: str  # shown once, in the answer that created the endpoint


def _url_errors(url: object) -> list[JSONObject]:
    if not isinstance(url, str) or not url:
        return [{"pointer": "/url", "message": "must be an http or https URL"}]
    if len(url) > 2000:
        return [{"pointer": "/url", "message": "must be at most 2000 characters"}]
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return [{"pointer": "/url", "message": "must be an http or https URL"}]
    if parts.scheme not in ("http", "https") or not parts.hostname or _CONTROL.search(url) \
            or " " in url:
        return [{"pointer": "/url", "message": "must be an http or https URL"}]
    if parts.username or parts.password:
        return [{"pointer": "/url", "message": "must not hold credentials"}]
    if not settings.WEBHOOK_ALLOW_PRIVATE:
        try:
            outbound.resolve(url, allow_private=False)
        except outbound.OutboundError as exc:
            return [{"pointer": "/url", "message": f"must reach a public address: {exc.reason}"}]
    return []


def _event_errors(events: object) -> list[JSONObject]:
    if not isinstance(events, list) or not events:
        return [{"pointer": "/events", "message": "must be a non-empty list of event types"}]
    return [{"pointer": f"/events/{i}", "message": f"must be one of {', '.join(AGENT_EVENTS)}"}
            for i, event in enumerate(events) if event not in AGENT_EVENTS]


def webhook_register(*, principal: Principal, url: object, events: object,
                     now: datetime) -> Registered:
    """The caller's endpoint for its own proposals' events, with a new signing secret."""
    errors = _url_errors(url) + _event_errors(events)
    if errors:
        raise Denial(DenialCode.SCHEMA_INVALID, errors=errors)
    assert isinstance(url, str) and isinstance(events, list)
    secret = "whsec_" + b64encode(secrets.token_bytes(32)).decode()
    with transaction.atomic():
        held = WebhookEndpoint.objects.select_for_update().filter(
            principal_id=principal.id, deleted_at=None).count()
        if held >= MAX_ENDPOINTS:
            raise Denial(DenialCode.SCHEMA_INVALID, errors=[
                {"pointer": "/url", "message": f"an agent holds at most {MAX_ENDPOINTS} "
                                               "webhooks: delete one first"}])
        endpoint = WebhookEndpoint.objects.create(
            tenant_id=principal.tenant_id, principal=principal, url=url,
            events=sorted(set(events)), secret=secret, created_at=now)
    return Registered(endpoint, secret)


def webhook_list(*, principal: Principal) -> Iterable[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(principal_id=principal.id,
                                          deleted_at=None).order_by("created_at", "id")


def webhook_delete(*, principal: Principal, endpoint_id: object,
                   now: datetime) -> WebhookEndpoint:
    """Delete the caller's own endpoint: nothing more is sent to it (not_found otherwise)."""
    found = WebhookEndpoint.objects.filter(id=endpoint_id, principal_id=principal.id,
                                           deleted_at=None) if isinstance(endpoint_id, str) \
        else WebhookEndpoint.objects.none()
    endpoint = found.first()
    if endpoint is None or found.update(deleted_at=now) != 1:
        raise Denial(DenialCode.NOT_FOUND)
    endpoint.deleted_at = now
    return endpoint
