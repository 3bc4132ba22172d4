"""REST calls that list and read approvals (docs/rest-api.md#admin), so that an approver outside
the console (a chat, a phone, an on-call tool) finds what waits for a decision and decides it
with `POST approvals/{id}/decision/`. Operators and admins only, of their own tenant, each seeing
the approvals of the roles they hold, as the console's queue does."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from dispatch.api.authentication import principal_of
from dispatch.api.base import ApiView, C, checked_id
from dispatch.api.pagination import ApprovalPagination
from dispatch.api.presenters import approval_item_view
from dispatch.api.schema import error_responses, page_parameters, path_id, query
from dispatch.api.serializers import PageLinksSerializer, VoteSerializer, enum_field
from dispatch.selectors.approvals import approval_get, approval_list_in_state
from dispatch.selectors.votes import vote_lists
from dispatch.services.authority import require_role
from protocols.denials import Denial
from protocols.jsontypes import JSONObject
from protocols.lifecycle import ApprovalState
from protocols.roles import Role


class ApprovalItemSerializer(serializers.Serializer[JSONObject]):
    id = serializers.CharField()
    state = enum_field(ApprovalState)
    proposal_id = serializers.CharField()
    operation = serializers.CharField(help_text="The contract's qualified name.")
    summary = serializers.CharField(help_text="The action's sentence, as the console shows it "
                                              "on top of the approval (one line).")
    digest = serializers.CharField(help_text="The proposal's digest: what a decision confirms.")
    requested_by = serializers.CharField(help_text="The name of the principal that proposed.")
    expires_at = serializers.DateTimeField()
    quorum = serializers.IntegerField(help_text="Distinct humans who must grant.")
    votes = VoteSerializer(many=True, help_text="The grants so far, oldest first.")


class ApprovalListApi(ApiView):
    class OutputSerializer(PageLinksSerializer):
        results = ApprovalItemSerializer(many=True)

    @extend_schema(operation_id="approvals_list", summary="List approvals",
                   description=(
                       "Operators and admins of the tenant: the approvals of the roles they "
                       "hold (an admin holds every role), oldest first, keyset-paged. `state` "
                       "is read as now: a pending approval past its expiry is `expired`."),
                   parameters=[
                       query("state", "Only approvals in this state (default `pending`).",
                             {"type": "string", "enum": list(ApprovalState)}),
                       *page_parameters(),
                   ],
                   responses={200: OutputSerializer,
                              **error_responses(C.ROLE_REQUIRED, C.MALFORMED_REQUEST)})
    def get(self, request: Request) -> Response:
        principal = principal_of(request)
        require_role(principal, Role.OPERATOR)
        raw = request.query_params.get("state", ApprovalState.PENDING.value)
        if raw not in set(ApprovalState):
            raise Denial(C.MALFORMED_REQUEST, "state must be one of "
                         + ", ".join(ApprovalState) + ".", parameter="state")
        now = timezone.now()
        paginator = ApprovalPagination()
        rows = paginator.paginate_queryset(
            approval_list_in_state(viewer=principal, state=ApprovalState(raw), now=now),
            request, view=self) or []
        votes = vote_lists(approvals=rows)
        return Response(self.OutputSerializer(paginator.as_page([
            approval_item_view(row, votes=votes[row.id], now=now) for row in rows])).data)


class ApprovalDetailApi(ApiView):
    class OutputSerializer(ApprovalItemSerializer):
        canonical = serializers.CharField(help_text="The proposal's canonical snapshot, exactly "
                                                    "the bytes `digest` hashes.")

    @extend_schema(operation_id="approvals_retrieve", summary="Read an approval",
                   description="Operators and admins of the tenant, for an approval of a role "
                               "they hold; with the proposal's `canonical` snapshot.",
                   parameters=[path_id("approval_id", "approval")],
                   responses={200: OutputSerializer,
                              **error_responses(C.NOT_FOUND, C.ROLE_REQUIRED)})
    def get(self, request: Request, approval_id: str) -> Response:
        principal = principal_of(request)
        require_role(principal, Role.OPERATOR)
        approval = approval_get(viewer=principal,
                                approval_id=checked_id(approval_id, "approval"))
        votes = vote_lists(approvals=[approval])
        item = approval_item_view(approval, votes=votes[approval.id], now=timezone.now())
        return Response(self.OutputSerializer(
            {**item, "canonical": approval.proposal.canonical}).data)
