"""REST calls that bring an action in (docs/rest-api.md#calls): contracts, resources, proposals,
dispatch."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from dispatch.api.authentication import principal_of
from dispatch.api.base import NAME_MAX, ApiView, C, checked_id, validated
from dispatch.api.fields import (
    ExecutionIdField,
    IdField,
    JsonObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictInputSerializer,
    StrictIntegerField,
)
from dispatch.api.presenters import (
    contract_view,
    proposal_view,
    resource_view,
)
from dispatch.api.schema import error_responses, path_id, query
from dispatch.api.serializers import (
    ProposalOutputSerializer,
    ResourceOutputSerializer,
    enum_field,
    object_field,
)
from dispatch.observability.context import bind_ids
from dispatch.runtime import get_runtime
from dispatch.selectors.contracts import contracts_of_tool_set
from dispatch.services.access import (
    access_proposal_by_id,
    access_resource_by_id,
)
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.proposals import CALL_ID, CALL_ID_RULE, proposal_intake
from dispatch.services.resources import resource_create, revision_create
from protocols.denials import Denial
from protocols.jsontypes import JSONObject, JSONValue
from protocols.lifecycle import OperationState

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


# --- contracts ------------------------------------------------------------------------------------


class ContractListApi(ApiView):
    class OutputSerializer(serializers.Serializer[JSONObject]):
        class ContractSerializer(serializers.Serializer[JSONObject]):
            class ApprovalSerializer(serializers.Serializer[JSONObject]):
                role = serializers.CharField()
                expires_in = serializers.IntegerField(help_text="Seconds.")

            name = serializers.CharField()
            version = serializers.IntegerField()
            fingerprint = serializers.CharField()
            input_schema = object_field(help_text="JSON Schema of `arguments`.")
            effects = serializers.ListField(child=enum_field(
                ["read", "external_write", "financial_write", "human"]))
            approval = ApprovalSerializer(allow_null=True)
            idempotency = enum_field(["none", "receiver_dedup", "idempotent"])

        results = ContractSerializer(many=True)

    @extend_schema(operation_id="contracts_list", summary="List the operation contracts",
                   description=(
                       "Every registered contract, each version; with `permitted=true`, only "
                       "the newest version of each contract the caller may propose (its tool "
                       "set): what the MCP gateway lists as its tools, and what the client's "
                       "framework tools offer a model."),
                   parameters=[query("permitted", "`true`: only the caller's tool set.",
                                     {"type": "string", "enum": ["true", "false"]})],
                   responses={200: OutputSerializer,
                              **error_responses(C.MALFORMED_REQUEST)})
    def get(self, request: Request) -> Response:
        permitted = request.query_params.get("permitted", "false")
        if permitted not in ("true", "false"):
            raise Denial(C.MALFORMED_REQUEST, "permitted must be true or false.",
                         parameter="permitted")
        contracts = (contracts_of_tool_set(principal_of(request).tools)
                     if permitted == "true" else get_runtime().registry)
        results = [contract_view(contract) for contract in contracts]
        return Response(self.OutputSerializer({"results": results}).data)


# --- resources ------------------------------------------------------------------------------------


class ResourceCreateApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        kind = StrictCharField(max_length=50, help_text="A resource kind, e.g. `email_draft`.")
        payload = JsonObjectField(help_text="Checked against the kind's payload schema.")

    @extend_schema(operation_id="resources_create", summary="Create a resource",
                   description="Only a principal with a tool (an operation of its tool set) "
                               "that takes a resource of this kind; the resource is its own.",
                   request=InputSerializer,
                   responses={201: ResourceOutputSerializer,
                              **error_responses(C.TOOL_NOT_PERMITTED, body=True)})
    def post(self, request: Request) -> Response:
        data = validated(self.InputSerializer, request)
        resource, revision = resource_create(principal=principal_of(request), kind=data["kind"],
                                             payload=data["payload"], now=timezone.now())
        return Response(ResourceOutputSerializer(resource_view(resource, revision)).data,
                        status=201)


class ResourceDetailApi(ApiView):
    @extend_schema(operation_id="resources_retrieve", summary="Read a resource's current revision",
                   description="For its creator, the tenant's admins and principals with a tool "
                               "that takes its kind; to anyone else it is `not_found`.",
                   parameters=[path_id("resource_id", "resource")],
                   responses={200: ResourceOutputSerializer, **error_responses(C.NOT_FOUND)})
    def get(self, request: Request, resource_id: str) -> Response:
        resource = access_resource_by_id(principal_of(request),
                                         checked_id(resource_id, "resource"))
        return Response(ResourceOutputSerializer(resource_view(resource)).data)


class RevisionCreateApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        base_revision = StrictIntegerField(min_value=1, max_value=2**31 - 1,
                                           help_text="The revision this edit starts from.")
        payload = JsonObjectField()

    @extend_schema(operation_id="resources_revisions_create", summary="Edit a resource",
                   description="By its creator (with a tool that still takes its kind) or an "
                               "admin of the tenant; to anyone else it is `not_found`.",
                   parameters=[path_id("resource_id", "resource")], request=InputSerializer,
                   responses={201: ResourceOutputSerializer, **error_responses(
                       C.NOT_FOUND, C.TOOL_NOT_PERMITTED, C.STALE_REVISION,
                       C.PROTOCOL_STATE_INVALID, body=True)})
    def post(self, request: Request, resource_id: str) -> Response:
        principal = principal_of(request)
        checked = checked_id(resource_id, "resource")
        data = validated(self.InputSerializer, request)
        resource, revision = revision_create(
            principal=principal, resource_id=checked, base_revision=data["base_revision"],
            payload=data["payload"], now=timezone.now())
        return Response(ResourceOutputSerializer(resource_view(resource, revision)).data,
                        status=201)


# --- proposals ------------------------------------------------------------------------------------

PROPOSAL_CODES = (C.UNKNOWN_OPERATION, C.NOT_FOUND, C.TOOL_NOT_PERMITTED, C.AUTHORITY_MISSING,
                  C.AUTHORITY_EXPIRED, C.AUTHORITY_REVOKED, C.SCOPE_VIOLATION,
                  C.EFFECT_NOT_PERMITTED, C.STALE_REVISION, C.PROTOCOL_STATE_INVALID,
                  C.PROPOSAL_MISMATCH)


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": 200,
                      "pattern": "^[ -~]{1,200}$"})
class CallIdField(StrictCharField):
    """A call id: 1 to 200 printable ASCII characters, the rule of `proposal_intake`."""

    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {"invalid": CALL_ID_RULE}

    def to_internal_value(self, data: JSONValue) -> str:
        if not isinstance(data, str) or not CALL_ID.fullmatch(data):
            self.fail("invalid")
        return data


class ProposalCreateApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        operation = StrictCharField(max_length=NAME_MAX,
                                    help_text="A contract's qualified name.")
        arguments = JsonObjectField(help_text="Checked against the contract's input schema; "
                                              'a resource is `{"id","revision"}`.')
        execution_id = ExecutionIdField(required=False,
                                        help_text="Groups the proposals of one run.")
        approval_expires_in = StrictIntegerField(
            required=False, min_value=1,
            help_text="Seconds; shortens the contract's approval expiry, never lengthens it.")
        dispatch_on_approval = StrictBooleanField(
            required=False, default=False,
            help_text="Claim the permit and dispatch as soon as a human grants.")
        call_id = CallIdField(
            required=False,
            help_text="Makes intake idempotent: the same principal, `execution_id` and "
                      "`call_id` answer 200 with the proposal made first; another operation "
                      "or other arguments under them are `proposal_mismatch`. Without an "
                      "`execution_id`, scoped to the principal alone.")

    @extend_schema(operation_id="proposals_create", summary="Propose an exact action",
                   description="201 with a new proposal; 200 with the proposal made first "
                               "for a repeated `call_id` (a retry after a lost response).",
                   request=InputSerializer,
                   responses={200: OpenApiResponse(ProposalOutputSerializer,
                                                   description="The proposal this call id "
                                                               "made first."),
                              201: OpenApiResponse(ProposalOutputSerializer,
                                                   description="A new proposal."),
                              **error_responses(*PROPOSAL_CODES, body=True)})
    def post(self, request: Request) -> Response:
        data = validated(self.InputSerializer, request)
        now = timezone.now()
        intake = proposal_intake(
            principal=principal_of(request), operation=data["operation"],
            arguments=data["arguments"], execution_id=data.get("execution_id"),
            approval_expires_in=data.get("approval_expires_in"),
            dispatch_on_approval=data["dispatch_on_approval"], call_id=data.get("call_id"),
            now=now)
        bind_ids(proposal_id=intake.proposal.id)  # on this request's log line
        view = proposal_view(intake.proposal, now=now, fresh=intake.created,
                             approval=intake.approval)
        return Response(ProposalOutputSerializer(view).data,
                        status=201 if intake.created else 200)


class ProposalDetailApi(ApiView):
    @extend_schema(operation_id="proposals_retrieve", summary="Read a proposal",
                   parameters=[path_id("proposal_id", "proposal")],
                   responses={200: ProposalOutputSerializer, **error_responses(C.NOT_FOUND)})
    def get(self, request: Request, proposal_id: str) -> Response:
        proposal = access_proposal_by_id(principal_of(request),
                                         checked_id(proposal_id, "proposal"))
        return Response(ProposalOutputSerializer(
            proposal_view(proposal, now=timezone.now())).data)


DISPATCH_CODES = (
    C.NOT_FOUND, C.UNKNOWN_OPERATION, C.CONTRACT_MISMATCH, C.TOOL_NOT_PERMITTED,
    C.AUTHORITY_MISSING, C.AUTHORITY_EXPIRED, C.AUTHORITY_REVOKED, C.SCOPE_VIOLATION,
    C.EFFECT_NOT_PERMITTED, C.PROTOCOL_STATE_INVALID, C.STALE_REVISION, C.APPROVAL_REQUIRED,
    C.APPROVAL_PENDING, C.APPROVAL_DENIED, C.APPROVAL_EXPIRED, C.APPROVAL_REVOKED,
    C.PROPOSAL_MISMATCH, C.PERMIT_CLAIMED, C.UNSAFE_RETRY, C.BUDGET_EXHAUSTED,
)


class ProposalDispatchApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        permit = IdField(required=False, allow_null=True,
                         help_text="This proposal's permit; by default the one minted for it.")

    class OutputSerializer(serializers.Serializer[JSONObject]):
        operation_id = serializers.CharField()
        state = enum_field(OperationState)

    @extend_schema(operation_id="proposals_dispatch", summary="Dispatch an approved proposal",
                   description="The claim is decided in this request; the handler then runs "
                               "on a worker. Poll the operation for its outcome.",
                   parameters=[path_id("proposal_id", "proposal")], request=InputSerializer,
                   responses={202: OutputSerializer,
                              **error_responses(*DISPATCH_CODES, body=True)})
    def post(self, request: Request, proposal_id: str) -> Response:
        principal = principal_of(request)
        checked = checked_id(proposal_id, "proposal")
        data = validated(self.InputSerializer, request)
        operation = proposal_dispatch(principal=principal, proposal_id=checked,
                                      permit_id=data.get("permit"), now=timezone.now())
        return Response(self.OutputSerializer(
            {"operation_id": operation.id, "state": operation.state}).data, status=202)
