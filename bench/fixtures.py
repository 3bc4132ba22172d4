"""Data for the benchmarks, made inside a Django child process.

One world (a tenant, an agent with grants, an operator) is made through the services. Large
numbers of rows are then cloned from one real, service-made specimen: ids are new and every
digest and canonical snapshot is recomputed with the production functions, so each clone is a
row the dispatcher accepts exactly as it accepts the specimen. Rows go in with `COPY` on
PostgreSQL and `executemany` on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

MAILBOX = "support@acme.example"
TOOLS = ["crm.lookup", "email.send", "payments.transfer"]
OPERATOR_PASSWORD = "bench-operator-pw"
DRAFT = {"from": MAILBOX, "to": ["customer@example.com"], "subject": "Your refund",
         "body": "We have refunded your order."}


@dataclass(frozen=True)
class World:
    tenant_id: str
    owner_id: str
    owner_token: str
    operator_id: str
    operator_name: str


def make_world(now: datetime, prefix: str = "") -> World:
    from dispatch.services.authority import grant_issue
    from dispatch.services.principals import agent_create, human_create

    owner, token = agent_create(name=f"{prefix}bench-agent", tenant=f"{prefix}bench",
                                tools=TOOLS)
    operator, _ = human_create(name=f"{prefix}bench-operator", tenant=f"{prefix}bench",
                               role="operator", password=OPERATOR_PASSWORD)
    start = now - timedelta(minutes=5)
    grant_issue(issuer="admin", subject=owner, operations=["email.send"],
                scope={"mailbox": [MAILBOX]}, now=start)
    grant_issue(issuer="admin", subject=owner, operations=["payments.transfer"],
                scope={"account": ["acct-001"]}, now=start)
    grant_issue(issuer="admin", subject=owner, operations=["crm.lookup"],
                scope={"customer": "*"}, now=start)
    return World(owner.tenant_id, owner.id, token, operator.id, operator.name)


def _chunks(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    it = iter(rows)
    while chunk := list(islice(it, size)):
        yield chunk


def insert_rows(model: Any, rows: Iterable[dict[str, Any]], batch: int = 5000) -> int:
    """Bulk-insert plain rows: `COPY` on PostgreSQL, `executemany` on SQLite."""
    from django.db import connection, transaction

    count = 0
    fields: list[Any] = []
    table = connection.ops.quote_name(model._meta.db_table)
    for chunk in _chunks(rows, batch):
        if not fields:
            fields = [f for f in model._meta.concrete_fields if f.attname in chunk[0]]
        columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        values = [[f.get_db_prep_save(row[f.attname], connection) for f in fields]
                  for row in chunk]
        with transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                raw = cursor.cursor  # the psycopg cursor under Django's wrapper
                with raw.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                    for row in values:
                        copy.write_row(row)
            else:
                marks = ", ".join(["%s"] * len(fields))
                cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", values)
        count += len(chunk)
    return count


def _row(instance: Any) -> dict[str, Any]:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


@dataclass(frozen=True)
class Claimable:
    """What a claimant needs to know about one approved, unclaimed email proposal."""

    proposal_id: str
    permit_id: str
    operation_id: str
    digest: str
    resource_id: str
    revision: int
    execution_id: str
    tenant_id: str
    principal_id: str
    operation: str
    fingerprint: str
    policy_fingerprint: str

    def binding(self) -> dict[str, Any]:
        """What the product's audit events of this action carry (audit_binding)."""
        return {"contract_fingerprint": self.fingerprint,
                "policy_fingerprint": self.policy_fingerprint,
                "execution_id": self.execution_id,
                "resources": [{"id": self.resource_id, "revision": self.revision}]}


def approved_emails(world: World, count: int, now: datetime,
                    on_approval: bool = False) -> list[Claimable]:
    """`count` granted `email.send` proposals, each on its own authorized draft, unclaimed;
    `on_approval`: proposed with `dispatch_on_approval` (a worker claims and runs them)."""
    from dispatch import models as dispatch_models
    from dispatch.ids import new_id
    from dispatch.models import (
        ApprovalRequest,
        Decision,
        Permit,
        Principal,
        Proposal,
        Resource,
        Revision,
    )
    from dispatch.runtime import get_runtime
    from dispatch.services.admission import snapshot_of
    from dispatch.services.approvals import approval_decide
    from dispatch.services.proposals import proposal_create
    from dispatch.services.resources import resource_create
    from protocols.canonical import canonicalize, digest

    owner = Principal.objects.get(id=world.owner_id)
    operator = Principal.objects.get(id=world.operator_id)
    # The specimen, made by the services exactly as an agent and an operator would.
    resource, revision = resource_create(principal=owner, kind="email_draft", payload=DRAFT,
                                         now=now)
    proposal = proposal_create(principal=owner, operation="email.send", arguments={
        "draft": {"id": resource.id, "revision": 1}}, now=now)
    approval_decide(approver=operator, approval_id=proposal.approval.id, decision="grant",
                    digest=proposal.digest, now=now)
    proposal.refresh_from_db()
    resource.refresh_from_db()
    approval = ApprovalRequest.objects.get(proposal_id=proposal.id)
    decision = Decision.objects.get(approval_id=approval.id)
    permit = Permit.objects.get(proposal_id=proposal.id)
    base = {"resource": _row(resource), "revision": _row(revision), "proposal": _row(proposal),
            "approval": _row(approval), "decision": _row(decision), "permit": _row(permit)}
    runtime = get_runtime()
    contract = runtime.contract("email.send")

    items: list[Claimable] = []
    rows: dict[str, list[dict[str, Any]]] = {key: [] for key in base}
    for _ in range(count):
        rid, pid, aid, mid = new_id("res"), new_id("prp"), new_id("apr"), new_id("prm")
        exe, op = new_id("exe"), new_id("op")
        resolved = {"draft": {"id": rid, "revision": 1, "digest": revision.digest,
                              "payload": revision.payload}}
        snapshot = snapshot_of(runtime, contract, resolved)
        snap_digest = digest(snapshot)
        refs = [{"id": rid, "revision": 1, "digest": revision.digest}]
        rows["resource"].append({**base["resource"], "id": rid})
        rows["revision"].append({**base["revision"], "id": new_id("rev"), "resource_id": rid})
        rows["proposal"].append({**base["proposal"], "id": pid, "execution_id": exe,
                                 "dispatch_on_approval": on_approval,
                                 "arguments": {"draft": {"id": rid, "revision": 1}},
                                 "canonical": canonicalize(snapshot).decode(),
                                 "digest": snap_digest, "resource_refs": refs})
        rows["approval"].append({**base["approval"], "id": aid, "proposal_id": pid})
        rows["decision"].append({**base["decision"], "id": new_id("dec"), "approval_id": aid,
                                 "digest": snap_digest})
        rows["permit"].append({**base["permit"], "id": mid, "approval_id": aid,
                               "proposal_id": pid, "execution_id": exe, "digest": snap_digest,
                               "resource_refs": refs, "operation_id": op})
        items.append(Claimable(pid, mid, op, snap_digest, rid, 1, exe, world.tenant_id,
                               world.owner_id, "email.send", proposal.contract_fingerprint,
                               proposal.policy_fingerprint))
    for key, model in (("resource", Resource), ("revision", Revision), ("proposal", Proposal),
                       ("approval", ApprovalRequest), ("decision", Decision),
                       ("permit", Permit)):
        insert_rows(model, rows[key])
    # Where the schema indexes proposals by the revisions they snapshot, index the clones too.
    indexed = getattr(dispatch_models, "ProposalResource", None)
    if indexed is not None:
        insert_rows(indexed, ({"proposal_id": item.proposal_id, "resource_id": item.resource_id,
                               "revision": item.revision} for item in items))
    return items


def crm_proposals(world: World, count: int, now: datetime) -> list[str]:
    """`count` `crm.lookup` proposals (no approval needed), cloned from a service-made one."""
    from dispatch.ids import new_id
    from dispatch.models import Principal, Proposal
    from dispatch.services.proposals import proposal_create

    owner = Principal.objects.get(id=world.owner_id)
    specimen = proposal_create(principal=owner, operation="crm.lookup",
                               arguments={"customer_id": "cus-001"}, now=now)
    base = _row(specimen)
    ids = [new_id("prp") for _ in range(count)]
    insert_rows(Proposal, ({**base, "id": pid, "execution_id": new_id("exe")} for pid in ids))
    return [specimen.id, *ids][:count]


@dataclass(frozen=True)
class Dispatchable:
    """What a raw claimant needs to know about one proposal that takes no approval."""

    proposal_id: str
    tenant_id: str
    principal_id: str
    execution_id: str
    operation: str
    fingerprint: str
    digest: str
    policy_fingerprint: str

    def binding(self) -> dict[str, Any]:
        """What the product's audit events of this action carry (audit_binding)."""
        return {"contract_fingerprint": self.fingerprint,
                "policy_fingerprint": self.policy_fingerprint,
                "execution_id": self.execution_id, "resources": []}


def make_noop_world(now: datetime, prefix: str = "") -> World:
    """A tenant whose agent may call the no-op contracts of `bench.noop` (which must be
    registered: `DISPATCH_EXTENSIONS=bench.noop`), and an operator who may approve them."""
    from bench.noop import NOOP, NOOP_GATED, SCOPE
    from dispatch.services.authority import grant_issue
    from dispatch.services.principals import agent_create, human_create

    owner, token = agent_create(name=f"{prefix}noop-agent", tenant=f"{prefix}noop",
                                tools=[NOOP, NOOP_GATED])
    operator, _ = human_create(name=f"{prefix}noop-operator", tenant=f"{prefix}noop",
                               role="operator", password=OPERATOR_PASSWORD)
    grant_issue(issuer="admin", subject=owner, operations=[NOOP, NOOP_GATED], scope=SCOPE,
                now=now - timedelta(minutes=5))
    return World(owner.tenant_id, owner.id, token, operator.id, operator.name)


def cloned_proposals(world: World, operation: str, arguments: dict[str, Any], count: int,
                     now: datetime) -> list[Dispatchable]:
    """`count` proposals of an operation that takes no approval: one made by
    `proposal_create`, the rest its clones (new ids and execution ids; the digest does not
    depend on either)."""
    from dispatch.ids import new_id
    from dispatch.models import Principal, Proposal
    from dispatch.services.proposals import proposal_create

    owner = Principal.objects.get(id=world.owner_id)
    specimen = proposal_create(principal=owner, operation=operation, arguments=arguments,
                               now=now)
    base = _row(specimen)
    rows = [{**base, "id": new_id("prp"), "execution_id": new_id("exe")}
            for _ in range(count - 1)]
    insert_rows(Proposal, rows)
    return [Dispatchable(row["id"], specimen.tenant_id, specimen.principal_id,
                         row["execution_id"], specimen.operation,
                         specimen.contract_fingerprint, specimen.digest,
                         specimen.policy_fingerprint)
            for row in [base, *rows]][:count]


def analyze() -> None:
    """Refresh the planner's statistics after a bulk load (autovacuum would, later)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
