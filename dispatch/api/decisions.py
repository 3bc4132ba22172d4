"""REST calls that decide or settle an action (docs/rest-api.md#calls): approvals, operations,
renewals and cancellation."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from dispatch.api.authentication import principal_of
from dispatch.api.base import DIGEST_MAX, TEXT_MAX, ApiView, C, checked_id, validated
from dispatch.api.fields import (
    StrictCharField,
    StrictInputSerializer,
)
from dispatch.api.presenters import (
    operation_view,
    proposal_view,
    votes_view,
)
from dispatch.api.schema import error_responses, path_id
from dispatch.api.serializers import (
    OperationOutputSerializer,
    ProposalOutputSerializer,
    VoteSerializer,
    enum_field,
)
from dispatch.services.access import (
    access_operation_by_id,
)
from dispatch.services.approvals import approval_decide
from dispatch.services.cancellation import REASON_MAX, operation_cancel, proposal_cancel
from dispatch.services.reconciliation import operation_resolve
from dispatch.services.renewals import operation_reauthorize, renewal_decide
from protocols.jsontypes import JSONObject
from protocols.lifecycle import ApprovalState

# --- approvals ------------------------------------------------------------------------------------


class ApprovalDecideApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        decision = serializers.ChoiceField(choices=["grant", "deny"])
        digest = StrictCharField(max_length=DIGEST_MAX,
                                 help_text="The proposal digest the human was shown.")
        reason = StrictCharField(required=False, allow_blank=True, max_length=TEXT_MAX)

    class OutputSerializer(serializers.Serializer[JSONObject]):
        class ApprovalStateSerializer(serializers.Serializer[JSONObject]):
            id = serializers.CharField()
            state = enum_field(ApprovalState)
            quorum = serializers.IntegerField(help_text="Distinct humans who must grant.")
            votes = VoteSerializer(many=True, help_text="The grants so far, oldest first.")

        approval = ApprovalStateSerializer()
        permit_id = serializers.CharField(allow_null=True)

    @extend_schema(operation_id="approvals_decision", summary="Grant or deny an approval",
                   description="Humans holding the approval's role only; agents never decide. "
                               "A grant is a vote: the approval is granted, and its permit "
                               "minted, by the grant that completes its `quorum`; any denial "
                               "denies. A completing grant of a `dispatch_on_approval` "
                               "proposal also claims its permit and enqueues the dispatch.",
                   parameters=[path_id("approval_id", "approval")], request=InputSerializer,
                   responses={200: OutputSerializer, **error_responses(
                       C.NOT_FOUND, C.ROLE_REQUIRED, C.PROPOSAL_MISMATCH, C.APPROVAL_DECIDED,
                       C.APPROVAL_EXPIRED, C.TOOL_NOT_PERMITTED, C.AUTHORITY_MISSING,
                       C.AUTHORITY_EXPIRED, C.AUTHORITY_REVOKED, C.SCOPE_VIOLATION,
                       C.EFFECT_NOT_PERMITTED, C.STALE_REVISION, C.PROTOCOL_STATE_INVALID,
                       body=True)})
    def post(self, request: Request, approval_id: str) -> Response:
        principal = principal_of(request)
        checked = checked_id(approval_id, "approval")
        data = validated(self.InputSerializer, request)
        approval, permit = approval_decide(
            approver=principal, approval_id=checked, decision=data["decision"],
            digest=data["digest"], reason=data.get("reason", ""), now=timezone.now())
        return Response(self.OutputSerializer({
            "approval": {"id": approval.id, "state": approval.state,
                         "quorum": approval.quorum, "votes": votes_view(approval)},
            "permit_id": permit.id if permit else None}).data)


# --- operations -----------------------------------------------------------------------------------


class OperationDetailApi(ApiView):
    @extend_schema(operation_id="operations_retrieve", summary="Read an operation",
                   parameters=[path_id("operation_id", "operation")],
                   responses={200: OperationOutputSerializer, **error_responses(C.NOT_FOUND)})
    def get(self, request: Request, operation_id: str) -> Response:
        operation = access_operation_by_id(principal_of(request),
                                           checked_id(operation_id, "operation"))
        return Response(OperationOutputSerializer(operation_view(operation)).data)


class OperationResolveApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        outcome = serializers.ChoiceField(choices=["completed", "no_effect"])
        evidence = StrictCharField(max_length=TEXT_MAX,
                                   help_text="A note of the evidence the admin checked.")

    @extend_schema(operation_id="operations_resolve", summary="Resolve an unknown outcome",
                   description="Admins of the tenant only.",
                   parameters=[path_id("operation_id", "operation")], request=InputSerializer,
                   responses={200: OperationOutputSerializer, **error_responses(
                       C.NOT_FOUND, C.ROLE_REQUIRED, C.PROTOCOL_STATE_INVALID,
                       C.STALE_REVISION, body=True)})
    def post(self, request: Request, operation_id: str) -> Response:
        principal = principal_of(request)
        checked = checked_id(operation_id, "operation")
        data = validated(self.InputSerializer, request)
        operation = operation_resolve(admin=principal, operation_id=checked,
                                      outcome=data["outcome"], evidence=data["evidence"],
                                      now=timezone.now())
        return Response(OperationOutputSerializer(operation_view(operation)).data)


# --- renewed approval (docs/design.md#renewals) ---------------------------------------------------


class RenewalOutputSerializer(serializers.Serializer[Any]):
    id = serializers.CharField()
    operation_id = serializers.CharField()
    attempt = serializers.IntegerField(help_text="The attempt the renewal authorizes (N+1), "
                                                 "under the operation's own idempotency key.")
    digest = serializers.CharField(help_text="The proposal digest the decision confirms.")
    state = enum_field(ApprovalState)
    requested_by = serializers.CharField(source="requested_by.name")
    expires_at = serializers.DateTimeField()


class OperationReauthorizeApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        reason = StrictCharField(required=False, allow_blank=True, max_length=TEXT_MAX)

    @extend_schema(operation_id="operations_reauthorize",
                   summary="Request a renewed approval of an unknown operation",
                   description="An admin of the tenant, or the principal the operation runs "
                               "for. Only for an `unknown` operation a further attempt cannot "
                               "repeat: a retry-safe contract, or one whose destination says "
                               "the effect is absent. The same operation id (idempotency key) "
                               "and digest; a human other than the requester decides.",
                   parameters=[path_id("operation_id", "operation")], request=InputSerializer,
                   responses={201: RenewalOutputSerializer, **error_responses(
                       C.NOT_FOUND, C.PROTOCOL_STATE_INVALID, C.UNSAFE_RETRY,
                       C.CONTRACT_MISMATCH, C.APPROVAL_PENDING, body=True)})
    def post(self, request: Request, operation_id: str) -> Response:
        principal = principal_of(request)
        checked = checked_id(operation_id, "operation")
        data = validated(self.InputSerializer, request)
        renewal = operation_reauthorize(actor=principal, operation_id=checked,
                                        reason=data.get("reason", ""), now=timezone.now())
        return Response(RenewalOutputSerializer(renewal).data, status=201)


class RenewalDecideApi(ApiView):
    class InputSerializer(ApprovalDecideApi.InputSerializer):
        """The same decision as an approval's: grant or deny, the digest shown, a reason."""

    @extend_schema(operation_id="renewals_decision", summary="Grant or deny a renewed approval",
                   description="Humans holding the operator role who neither requested the "
                               "renewal nor are the operation's principal. A grant moves the "
                               "operation back to `claimed` and enqueues its next attempt.",
                   parameters=[path_id("renewal_id", "renewal")], request=InputSerializer,
                   responses={200: RenewalOutputSerializer, **error_responses(
                       C.NOT_FOUND, C.ROLE_REQUIRED, C.APPROVER_IS_REQUESTER,
                       C.PROPOSAL_MISMATCH, C.APPROVAL_DECIDED, C.APPROVAL_EXPIRED,
                       C.UNSAFE_RETRY, C.CONTRACT_MISMATCH, C.PROTOCOL_STATE_INVALID,
                       C.TOOL_NOT_PERMITTED, C.AUTHORITY_MISSING, C.AUTHORITY_EXPIRED,
                       C.AUTHORITY_REVOKED, C.SCOPE_VIOLATION, C.EFFECT_NOT_PERMITTED,
                       body=True)})
    def post(self, request: Request, renewal_id: str) -> Response:
        principal = principal_of(request)
        checked = checked_id(renewal_id, "renewal")
        data = validated(self.InputSerializer, request)
        renewal = renewal_decide(approver=principal, renewal_id=checked,
                                 decision=data["decision"], digest=data["digest"],
                                 reason=data.get("reason", ""), now=timezone.now())
        return Response(RenewalOutputSerializer(renewal).data)


# --- cancellation (docs/design.md#cancellation) ---------------------------------------------------

CANCEL_CODES = (C.NOT_FOUND, C.ROLE_REQUIRED, C.PROTOCOL_STATE_INVALID)
CANCEL_DESCRIPTION = (
    "By the agent that proposed, or an operator or admin of the tenant. Before the claim the "
    "proposal is withdrawn (its approval and permit revoked); after the claim, while no attempt "
    "is open, the operation ends at once without effect (or `unknown` after an uncertain "
    "attempt); during an attempt the handler is asked to stop, the permit stays consumed and "
    "the attempt's answer is the outcome: read the operation again. A cancellation of a "
    "settled operation, and a second cancellation, are `protocol_state_invalid` (409), with "
    "the operation's state in `details.state` where there is an operation. The reason is kept "
    "in the audit, masked.")


class OperationCancelApi(ApiView):
    """Cancel an operation (docs/design.md#cancellation). A repeated cancellation is not answered
    200: it is `protocol_state_invalid`, its message saying the action is already cancelled and
    `details.state` the operation's state, so a client that retries after a lost response
    learns that its first request took effect and reads the operation for the outcome."""

    class InputSerializer(StrictInputSerializer):
        reason = StrictCharField(required=False, allow_blank=True, max_length=REASON_MAX,
                                 help_text="Why; kept in the audit, with the action's values "
                                           "masked.")

    @extend_schema(operation_id="operations_cancel", summary="Cancel an operation",
                   description=CANCEL_DESCRIPTION,
                   parameters=[path_id("operation_id", "operation")], request=InputSerializer,
                   responses={200: OperationOutputSerializer,
                              **error_responses(*CANCEL_CODES, body=True)})
    def post(self, request: Request, operation_id: str) -> Response:
        principal = principal_of(request)
        checked = checked_id(operation_id, "operation")
        data = validated(self.InputSerializer, request)
        operation = operation_cancel(actor=principal, operation_id=checked,
                                     reason=data.get("reason", ""), now=timezone.now())
        return Response(OperationOutputSerializer(operation_view(operation)).data)


class ProposalCancelApi(ApiView):
    """Cancel a proposal's action, before or after its claim (docs/design.md#cancellation); answers
    the proposal, whose `operation_state` tells what became of a claimed one. A repeat is refused as
    for `OperationCancelApi`."""

    class InputSerializer(OperationCancelApi.InputSerializer):
        """The same body as an operation's cancellation: an optional reason."""

    @extend_schema(operation_id="proposals_cancel", summary="Cancel a proposal's action",
                   description=CANCEL_DESCRIPTION,
                   parameters=[path_id("proposal_id", "proposal")], request=InputSerializer,
                   responses={200: ProposalOutputSerializer,
                              **error_responses(*CANCEL_CODES, body=True)})
    def post(self, request: Request, proposal_id: str) -> Response:
        principal = principal_of(request)
        checked = checked_id(proposal_id, "proposal")
        data = validated(self.InputSerializer, request)
        now = timezone.now()
        proposal = proposal_cancel(actor=principal, proposal_id=checked,
                                   reason=data.get("reason", ""), now=now)
        return Response(ProposalOutputSerializer(proposal_view(proposal, now=now)).data)
