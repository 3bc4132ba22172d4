"""A resource kind and its contract added by an extension alone: no line of the core names them.

This module is the extension (`EXTENSION_API`, `register`): a `ticket` kind with its own states
(open, pending, approved, resolving, resolved, unknown) and a contract `ticket.resolve` that
moves it. The test loads it through `settings.DISPATCH_EXTENSIONS` beside the demo, then
proposes, approves and dispatches through the real services, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from dispatch.handlers import FromCode, Handler, HandlerContext
from dispatch.runtime import Runtime, get_runtime
from protocols.audit_kinds import RESOURCE_MOVES
from protocols.contracts import (
    ApprovalRequirement,
    AuthorityRequirement,
    Effect,
    Idempotency,
    OperationContract,
    Reconciliation,
    ResourceKind,
    SchedulingContract,
)
from protocols.lifecycle import RESOURCE_PROTOCOLS, ResourceProtocol

pytestmark = pytest.mark.django_db

#: The extension API version this module implements, as any extension declares it.
EXTENSION_API = 1

TICKET = ResourceProtocol(
    name="ticket",
    initial="open",
    transitions={
        ("open", "edit"): "open",
        ("open", "propose"): "pending",
        ("pending", "propose"): "pending",
        ("pending", "grant"): "approved",
        ("approved", "grant"): "approved",
        ("pending", "deny"): "open",
        ("approved", "deny"): "approved",
        ("pending", "expire"): "open",
        ("approved", "expire"): "open",
        ("approved", "claim"): "resolving",
        ("resolving", "complete"): "resolved",
        ("resolving", "fail_no_effect"): "open",
        ("resolving", "uncertain"): "unknown",
        ("unknown", "retry"): "resolving",
        ("unknown", "reconcile_completed"): "resolved",
        ("unknown", "reconcile_no_effect"): "open",
    },
    final=frozenset({"resolved"}),
)

TICKET_KIND = ResourceKind(
    name="ticket",
    protocol=TICKET,
    payload_schema={
        "type": "object", "additionalProperties": False, "required": ["queue", "summary"],
        "properties": {"queue": {"type": "string", "pattern": "^[a-z]+$"},
                       "summary": {"type": "string", "maxLength": 200}},
    },
)


class TicketResolveHandler(Handler):
    name = "ticket.resolve"
    implementation_fingerprint = FromCode()
    resolved: list[str] = []  # noqa: RUF012 - the record of effects this test reads

    def destination(self) -> dict[str, Any]:
        return {"name": "helpdesk", "address": "in-process"}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        ticket = ctx.arguments["ticket"]
        self.resolved.append(ticket["id"])
        return {"resolution": f"resolved {ticket['payload']['summary']}"}


def ticket_resolve(implementation_fingerprint: str) -> OperationContract:
    return OperationContract(
        qualified_name="ticket.resolve",
        contract_version=1,
        implementation_fingerprint=implementation_fingerprint,
        input_type={
            "type": "object", "additionalProperties": False, "required": ["ticket"],
            "properties": {"ticket": {
                "type": "object", "additionalProperties": False, "required": ["id", "revision"],
                "properties": {"id": {"type": "string"},
                               "revision": {"type": "integer", "minimum": 1}}}},
        },
        output_type={"type": "object", "properties": {"resolution": {"type": "string"}}},
        authority_requirements=(AuthorityRequirement("queue", "/ticket/payload/queue"),),
        possible_effects=frozenset({Effect.EXTERNAL_WRITE}),
        protocol_preconditions={"ticket": "ticket"},
        protocol_outcomes={"completed": "resolved", "failed_no_effect": "open",
                           "unknown": "unknown"},
        approval_requirement=ApprovalRequirement(role="operator", expires_in=3600),
        idempotency_contract=Idempotency.NONE,
        scheduling_contract=SchedulingContract(timeout=5.0, max_attempts=1, budget_cost=1),
        destination="helpdesk",
        reconciliation=Reconciliation.NONE,
    )


def register(runtime: Runtime) -> None:
    """What `dispatch.runtime.get_runtime` calls, as it does the demo's."""
    runtime.register_resource_kind(TICKET_KIND)
    handler = TicketResolveHandler()
    runtime.register(ticket_resolve(handler.implementation_fingerprint), handler)


@pytest.fixture
def helpdesk(settings: Any) -> Iterator[None]:
    """The runtime built with this extension beside the demo; the ticket table unregistered
    after (the one process-wide table registry would otherwise keep it for later tests)."""
    settings.DISPATCH_EXTENSIONS = [*settings.DISPATCH_EXTENSIONS, __name__]
    get_runtime.cache_clear()
    TicketResolveHandler.resolved.clear()
    try:
        yield
    finally:
        get_runtime.cache_clear()
        RESOURCE_PROTOCOLS.pop("ticket", None)


def test_an_extension_adds_a_kind_and_an_action_on_it(helpdesk: None, now: datetime) -> None:
    from dispatch.models import AuditEvent, Resource
    from dispatch.services.approvals import approval_decide
    from dispatch.services.audit import audit_replay
    from dispatch.services.authority import grant_issue
    from dispatch.services.dispatcher import proposal_dispatch
    from dispatch.services.principals import agent_create, human_create
    from dispatch.services.proposals import proposal_create
    from dispatch.services.resources import resource_create
    from dispatch.services.worker import operation_execute

    assert get_runtime().resource_kinds["ticket"] is TICKET_KIND
    agent, _ = agent_create(name="helper", tenant="helpdesk", tools=["ticket.resolve"])
    operator, _ = human_create(name="lead", tenant="helpdesk", role="operator", password="pw")
    grant_issue(issuer="admin", subject=agent, operations=["ticket.resolve"],
                scope={"queue": ["billing"]}, now=now - timedelta(minutes=1))

    ticket, _ = resource_create(principal=agent, kind="ticket",
                                payload={"queue": "billing", "summary": "double charge"},
                                now=now)
    assert ticket.state == "open"
    proposal = proposal_create(principal=agent, operation="ticket.resolve",
                               arguments={"ticket": {"id": ticket.id, "revision": 1}}, now=now)
    assert Resource.objects.get(id=ticket.id).state == "pending"
    approval_decide(approver=operator, approval_id=proposal.approval.id, decision="grant",
                    digest=proposal.digest, now=now)
    assert Resource.objects.get(id=ticket.id).state == "approved"

    operation = proposal_dispatch(principal=agent, proposal_id=proposal.id, now=now,
                                  enqueue=False)
    assert Resource.objects.get(id=ticket.id).state == "resolving"
    operation = operation_execute(operation_id=operation.id)

    assert operation.state == "completed"
    assert operation.result == {"resolution": "resolved double charge"}
    assert TicketResolveHandler.resolved == [ticket.id]
    assert Resource.objects.get(id=ticket.id).state == "resolved"
    moves = [(row.kind, move["event"]) for row in AuditEvent.objects.filter(
        proposal_id=proposal.id).order_by("id") for move in row.details.get(RESOURCE_MOVES, [])]
    assert moves == [("proposal.created", "propose"), ("approval.granted", "grant"),
                     ("permit.claimed", "claim"), ("operation.completed", "complete")]
    # The audit replays through the ticket's own table, while it is registered.
    assert not audit_replay().violations


def test_a_denied_ticket_goes_back_to_open_and_a_new_proposal_may_follow(
        helpdesk: None, now: datetime) -> None:
    from dispatch.models import Resource
    from dispatch.services.approvals import approval_decide
    from dispatch.services.audit import audit_replay
    from dispatch.services.authority import grant_issue
    from dispatch.services.principals import agent_create, human_create
    from dispatch.services.proposals import proposal_create
    from dispatch.services.resources import resource_create

    agent, _ = agent_create(name="helper", tenant="helpdesk", tools=["ticket.resolve"])
    operator, _ = human_create(name="lead", tenant="helpdesk", role="operator", password="pw")
    grant_issue(issuer="admin", subject=agent, operations=["ticket.resolve"],
                scope={"queue": ["billing"]}, now=now - timedelta(minutes=1))
    ticket, _ = resource_create(principal=agent, kind="ticket",
                                payload={"queue": "billing", "summary": "refund"}, now=now)
    ref = {"ticket": {"id": ticket.id, "revision": 1}}
    proposal = proposal_create(principal=agent, operation="ticket.resolve", arguments=ref,
                               now=now)
    approval_decide(approver=operator, approval_id=proposal.approval.id, decision="deny",
                    digest=proposal.digest, now=now)
    # The ticket's own table: a denial takes a pending ticket back to open.
    assert Resource.objects.get(id=ticket.id).state == "open"
    proposal_create(principal=agent, operation="ticket.resolve", arguments=ref, now=now)
    assert Resource.objects.get(id=ticket.id).state == "pending"
    assert TicketResolveHandler.resolved == []
    assert not audit_replay().violations
