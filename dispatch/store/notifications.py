"""Who hears of an action (docs/design.md#notifications, #statement-layer): the approvers' addresses
an approval request is mailed to, and the proposing agent's webhook endpoints a decision and an
outcome tell (an outcome asks only where its move's statement found the agent holds one,
`dispatch.store.operations`), one fixed query each.
"""

from __future__ import annotations

import functools

from django.db import connection

from dispatch.models import Principal, WebhookEndpoint
from dispatch.store.sql import columns, instance, rows, statement
from protocols.roles import Role

#: The addresses of a tenant's active humans who may decide an approval of a role (the role,
#: or admin), never its requester, nor a sub-agent.
_APPROVER_EMAILS = statement(
    "principal.approver_emails",
    'SELECT u."email" FROM "dispatch_principal" p JOIN "auth_user" u ON u."id" = p."user_id" '
    'WHERE p."tenant_id" = %(tenant_id)s AND p."kind" = %(kind)s AND NOT p."subagent" '
    'AND p."role" IN (%(role)s, %(admin)s) AND u."is_active" AND p."id" <> %(requester_id)s '
    'AND u."email" <> \'\'')


def approver_emails(*, tenant_id: str, role: str, requester_id: str) -> list[str]:
    """The addresses, sorted and each once, of tenant `tenant_id`'s active humans with one who
    hold `role` or admin, neither the requester `requester_id` nor a sub-agent."""
    return sorted({email for (email,) in rows(_APPROVER_EMAILS, {
        "tenant_id": tenant_id, "kind": Principal.Kind.HUMAN, "role": role,
        "admin": Role.ADMIN, "requester_id": requester_id})})


@functools.cache
def _endpoints(vendor: str) -> str:
    return statement(
        "webhook.endpoints_of",
        f"SELECT {columns(WebhookEndpoint, 'w')} "
        'FROM "dispatch_webhookendpoint" w WHERE w."principal_id" = %(principal_id)s '
        'AND w."deleted_at" IS NULL ORDER BY w."created_at"')


def endpoints(*, principal_id: str, event: str) -> list[WebhookEndpoint]:
    """Principal `principal_id`'s live (undeleted) webhook endpoints that take `event`, oldest
    first, as the ORM would load them; no query compiler."""
    found = (instance(WebhookEndpoint, row)
             for row in rows(_endpoints(connection.vendor), {"principal_id": principal_id}))
    return [endpoint for endpoint in found if endpoint is not None and event in endpoint.events]
