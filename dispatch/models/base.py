"""The core records of the operation store (docs/design.md#outcomes): fields, constraints and
indexes only.

The records the others point at (tenant, principal, grant, operation, execution, ...) live here,
so that `delegations` and `evidence` import this module, never the package that re-exports them.
No business rules live here. State columns store values of the StrEnums in
`protocols.lifecycle`; services move them with conditional updates derived from the declared
transition tables, and the constraints below are the database's backstop.
"""

from __future__ import annotations

from enum import StrEnum
from functools import partial

from django.conf import settings
from django.db import models
from django.db.models import Q

from dispatch.ids import new_id
from protocols.lifecycle import ApprovalState, OperationState, PermitState
from protocols.roles import Role


def _choices(enum: type[StrEnum]) -> list[tuple[str, str]]:
    return [(member.value, member.value) for member in enum]


#: A human's role (`protocols.roles.Role`), or "" for none (every agent); labels as migrated.
_ROLE_CHOICES = [("", "None"), *((role.value, role.name.title()) for role in Role)]


def _id_field(prefix: str) -> models.CharField[str, str]:
    return models.CharField(primary_key=True, max_length=40, default=partial(new_id, prefix),
                            editable=False)


class Tenant(models.Model):
    id = _id_field("ten")
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # How many pauses are in force (docs/design.md#approval-policies): every claim and attempt
    # start reads it share-locked and every pause and resume updates it, so a pause that
    # commits before a claim does is always seen by it (`dispatch.services.pauses`).
    pauses = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return self.name


class Principal(models.Model):
    class Kind(models.TextChoices):
        AGENT = "agent"
        HUMAN = "human"

    id = _id_field("prn")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="principals")
    name = models.CharField(max_length=150, unique=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    role = models.CharField(max_length=10, choices=_ROLE_CHOICES, blank=True, default="")
    user = models.OneToOneField(settings.AUTH_USER_MODEL, null=True, blank=True,
                                on_delete=models.PROTECT, related_name="principal")
    # The operations this principal may ever propose (an agent's tool set).
    tools = models.JSONField(default=list)
    # A delegated workflow step's sub-agent (docs/design.md#delegation): nobody names it as a
    # grant's subject or runs as it, and it acts only under its own step's grant.
    subagent = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(kind="human") | Q(role=""), name="agents_hold_no_role"),
            models.CheckConstraint(
                condition=Q(kind="agent") | Q(subagent=False), name="subagents_are_agents"),
        ]

    def __str__(self) -> str:
        return self.name


class ApiToken(models.Model):
    """A bearer token, stored as a SHA-256 of its secret (tokens are 256-bit random)."""

    id = _id_field("tok")
    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="tokens")
    lookup = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)


class Grant(models.Model):
    id = _id_field("grt")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    issuer = models.CharField(max_length=150)
    subject = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="grants")
    operations = models.JSONField()
    scope = models.JSONField()
    not_before = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT,
                               related_name="children")
    # The budget units that may ever be spent under this grant (its counter is
    # `grant:<id>`), carved out of the delegator's when a workflow step delegated it
    # (docs/design.md#delegation); null: unbudgeted.
    budget = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["subject", "revoked_at"])]


class Resource(models.Model):
    id = _id_field("res")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    kind = models.CharField(max_length=50)
    current_revision = models.PositiveIntegerField(default=1)
    # one of its kind's states (`Runtime.register_resource_kind` checks they fit), no fixed list
    state = models.CharField(max_length=20)
    created_by = models.ForeignKey(Principal, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)


class Revision(models.Model):
    """An immutable payload of a resource. Never updated; editing inserts a new one."""

    id = _id_field("rev")
    resource = models.ForeignKey(Resource, on_delete=models.PROTECT, related_name="revisions")
    number = models.PositiveIntegerField()
    payload = models.JSONField()
    digest = models.CharField(max_length=71)
    created_by = models.ForeignKey(Principal, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["resource", "number"], name="one_revision_number"),
        ]


class Proposal(models.Model):
    """An immutable snapshot of one exact action (docs/design.md#principals)."""

    id = _id_field("prp")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    principal = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="proposals")
    execution_id = models.CharField(max_length=80)
    operation = models.CharField(max_length=150)
    contract_version = models.PositiveIntegerField()
    contract_fingerprint = models.CharField(max_length=71)
    arguments = models.JSONField()
    canonical = models.TextField()
    digest = models.CharField(max_length=71)
    # [{"id","revision","digest"}] of every referenced resource, in argument order
    resource_refs = models.JSONField(default=list)
    destination_fingerprint = models.CharField(max_length=71)
    policy_fingerprint = models.CharField(max_length=71)
    dispatch_on_approval = models.BooleanField(default=False)
    # The caller's id of this call (docs/rest-api.md#calls): proposing it again is idempotent. Its
    # scope is the execution id the caller named, or "" (the principal alone) when it named none.
    call_id = models.CharField(max_length=200, blank=True, default="")
    call_scope = models.CharField(max_length=80, blank=True, default="")
    cancelled_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    # Where the proposal came in (docs/mcp.md#operators): "" for the REST API and the embedded
    # runtime, "mcp" for the MCP gateway; `client` is the name and version the MCP client gave,
    # shown to the operator as the client's own claim, never as authority.
    channel = models.CharField(max_length=20, blank=True, default="")
    client = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-created_at"]),
            models.Index(fields=["principal", "execution_id"]),
        ]
        constraints = [
            models.UniqueConstraint(fields=["principal", "call_scope", "call_id"],
                                    condition=~Q(call_id=""), name="one_proposal_per_call"),
        ]


class ProposalResource(models.Model):
    """Which resource revisions a proposal snapshots: finds sibling proposals of a revision."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="resources")
    resource = models.ForeignKey(Resource, on_delete=models.PROTECT, related_name="+")
    revision = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["resource", "revision"], name="proposal_by_revision")]


class ApprovalRequest(models.Model):
    id = _id_field("apr")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    proposal = models.OneToOneField(Proposal, on_delete=models.PROTECT, related_name="approval")
    role = models.CharField(max_length=10)
    # Distinct humans who must grant (docs/design.md#approval-policies): the contract's quorum
    # raised by the deployment's rules on the snapshot's arguments, fixed when it opens.
    quorum = models.PositiveSmallIntegerField(default=1)
    state = models.CharField(max_length=10, choices=_choices(ApprovalState))
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [
            # The console queue: pending approvals of a tenant, newest first, keyset-paged.
            models.Index(fields=["tenant", "state", "-created_at", "-id"],
                         name="approval_queue"),
            models.Index(fields=["state", "expires_at"], name="approval_expiry"),
        ]


class Vote(models.Model):
    """One human's grant or denial of an approval, bound to the digest they were shown. The
    vote that completes the quorum (or any denial) decides the approval (`Decision`); the
    unique approver per approval is the backstop against voting twice."""

    id = _id_field("vot")
    approval = models.ForeignKey(ApprovalRequest, on_delete=models.PROTECT,
                                 related_name="votes")
    approver = models.ForeignKey(Principal, on_delete=models.PROTECT)
    outcome = models.CharField(max_length=5, choices=[("grant", "grant"), ("deny", "deny")])
    digest = models.CharField(max_length=71)
    voted_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["approval", "approver"],
                                               name="one_vote_per_approver")]


class Decision(models.Model):
    """The decision of an approval: its completing grant or its denial. The unique approval is
    the backstop against a second decision."""

    class Outcome(models.TextChoices):
        GRANT = "grant"
        DENY = "deny"

    id = _id_field("dec")
    approval = models.OneToOneField(ApprovalRequest, on_delete=models.PROTECT,
                                    related_name="decision")
    approver = models.ForeignKey(Principal, on_delete=models.PROTECT)
    outcome = models.CharField(max_length=5, choices=Outcome.choices)
    digest = models.CharField(max_length=71)
    reason = models.TextField(blank=True, default="")
    decided_at = models.DateTimeField()

    class Meta:
        # The console's Decided tab, newest first (`selectors.approvals.decision_list`).
        indexes = [models.Index(fields=["-decided_at", "-id"], name="decision_newest")]


class Permit(models.Model):
    """A one-shot permit minted by the approval resolver; binds everything of
    docs/design.md#permits."""

    id = _id_field("prm")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    approval = models.OneToOneField(ApprovalRequest, on_delete=models.PROTECT,
                                    related_name="permit")
    proposal = models.OneToOneField(Proposal, on_delete=models.PROTECT, related_name="permit")
    state = models.CharField(max_length=10, choices=_choices(PermitState))
    approver = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="+")
    requester = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="+")
    execution_id = models.CharField(max_length=80)
    grant_id = models.CharField(max_length=40)
    grant_scope = models.JSONField()
    operation = models.CharField(max_length=150)
    contract_fingerprint = models.CharField(max_length=71)
    digest = models.CharField(max_length=71)
    resource_refs = models.JSONField(default=list)
    destination_fingerprint = models.CharField(max_length=71)
    policy_fingerprint = models.CharField(max_length=71)
    operation_id = models.CharField(max_length=40, unique=True)
    issued_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "expires_at"], name="permit_expiry")]


class Operation(models.Model):
    """One logical action; its id is the destination's idempotency key (docs/design.md#outcomes)."""

    id = _id_field("op")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    # One operation per proposal: the backstop against a second claim of the same action.
    proposal = models.OneToOneField(Proposal, on_delete=models.PROTECT,
                                    related_name="operation_record")
    permit = models.OneToOneField(Permit, null=True, blank=True, on_delete=models.PROTECT,
                                  related_name="operation_record")
    principal = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="+")
    execution_id = models.CharField(max_length=80)
    operation = models.CharField(max_length=150)
    contract_fingerprint = models.CharField(max_length=71)
    state = models.CharField(max_length=25, choices=_choices(OperationState))
    attempts_made = models.PositiveIntegerField(default=0)
    # Sticky uncertainty (docs/design.md#outcomes): an attempt of this operation may have had its
    # effect, and no authoritative lookup has proven the key absent since. While it holds, nothing
    # may end the operation `failed_no_effect` (`operation_move` makes such a move `unknown`).
    uncertain = models.BooleanField(default=False)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    evidence = models.TextField(blank=True, default="")
    # What the destination's lookup last said of the effect (`present`, `absent` or `unknown`,
    # "" before any lookup) and when (`dispatch.services.lookups.lookup_record`).
    lookup_found = models.CharField(max_length=7, blank=True, default="")
    looked_up_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["state", "updated_at"], name="operation_by_state"),
            models.Index(fields=["tenant", "state", "-updated_at"], name="operation_tenant_state"),
            # The console's operations list, newest claim first
            # (`selectors.operations.operation_list`).
            models.Index(fields=["tenant", "-claimed_at", "-id"], name="operation_tenant_claimed"),
        ]


class Renewal(models.Model):
    """A renewed approval for one further attempt of an operation that stopped short
    (docs/design.md#renewals): a lapsed permit or authority before a retry, or an effect a lookup
    found authoritatively absent. The same operation id, so the same idempotency key, and the same
    digest: never a new operation for the same logical action. A human other than the requester and
    the operation's principal decides it; a grant moves the operation from `unknown` back to
    `claimed` for attempt `attempt`."""

    id = _id_field("ren")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    operation = models.ForeignKey(Operation, on_delete=models.PROTECT, related_name="renewals")
    attempt = models.PositiveIntegerField()  # the attempt number the renewal authorizes
    digest = models.CharField(max_length=71)  # the proposal's, bound
    requested_by = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="+")
    reason = models.TextField(blank=True, default="")
    # Distinct humans who must grant it: the quorum the operation's approval needed
    # (docs/design.md#approval-policies), fixed when the renewal is requested.
    quorum = models.PositiveSmallIntegerField(default=1)
    state = models.CharField(max_length=10, choices=_choices(ApprovalState))
    approver = models.ForeignKey(Principal, null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="+")
    decision_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One pending renewal per further attempt: a second request waits for the first's
            # fate; after a denial or expiry another may be asked.
            models.UniqueConstraint(fields=["operation", "attempt"],
                                    condition=Q(state="pending"),
                                    name="one_pending_renewal_per_attempt"),
        ]


class RenewalVote(models.Model):
    """One human's grant of a renewal, toward its quorum: the grant that completes it decides
    the renewal. The unique approver per renewal is the backstop against voting twice."""

    id = _id_field("rvt")
    renewal = models.ForeignKey(Renewal, on_delete=models.PROTECT, related_name="votes")
    approver = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="+")
    voted_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["renewal", "approver"],
                                               name="one_renewal_vote_per_approver")]


class Attempt(models.Model):
    class Outcome(models.TextChoices):
        COMPLETED = "completed"
        FAILED_NO_EFFECT = "failed_no_effect"
        UNCERTAIN = "uncertain"

    operation = models.ForeignKey(Operation, on_delete=models.PROTECT, related_name="attempts")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices, blank=True, default="")
    error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            # A redelivered task cannot start the same attempt twice.
            models.UniqueConstraint(fields=["operation", "number"], name="one_attempt_number"),
        ]


class BudgetCounter(models.Model):
    """Reserved capacity for a key such as `principal:<id>:<hour>` or `execution:<id>`, or a
    spend cap's sum in ten-thousandths (`cap:…`, `protocols.approval_rules.CAP_PLACES`)."""

    key = models.CharField(max_length=200, primary_key=True)
    used = models.PositiveBigIntegerField(default=0)
    limit = models.PositiveBigIntegerField()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(used__lte=models.F("limit")),
                                   name="budget_within_limit"),
        ]


class AuditEvent(models.Model):
    """Append-only; written in the same transaction as the change it records."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    at = models.DateTimeField()
    kind = models.CharField(max_length=50)
    actor = models.CharField(max_length=150)
    operation_id = models.CharField(max_length=40, blank=True, default="")
    proposal_id = models.CharField(max_length=40, blank=True, default="")
    digest = models.CharField(max_length=71, blank=True, default="")
    details = models.JSONField(default=dict)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-id"], name="audit_tenant"),
            models.Index(fields=["operation_id"], name="audit_operation"),
            models.Index(fields=["proposal_id"], name="audit_proposal"),
            models.Index(fields=["tenant", "kind", "-id"], name="audit_kind"),
        ]


class Lease(models.Model):
    """A named lock with an expiry, held by one process at a time (one reconciliation pass).

    A holder that dies leaves it to expire; nothing else depends on its release."""

    name = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=40)
    expires_at = models.DateTimeField()
