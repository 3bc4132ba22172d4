"""The agents' REST API (DESIGN §7): one APIView per call, each calling one service.

Views are thin: a nested `InputSerializer` checks the body's shape and JSON types, the service
decides everything else and raises `Denial`s that `dispatch.api.exceptions` renders unchanged.
`now` is taken here, once per request, and passed down.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from django.http import HttpRequest
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dispatch.api.authentication import principal_of
from dispatch.api.fields import (
    ExecutionIdField,
    IdField,
    JsonObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictDateTimeField,
    StrictInputSerializer,
    StrictIntegerField,
)
from dispatch.api.pagination import AuditPagination, GrantPagination
from dispatch.api.parsers import check_declared_length
from dispatch.api.schema import error_responses, page_parameters, path_id, query
from dispatch.api.selectors import (
    audit_of_tenant,
    audit_view,
    contract_view,
    grant_view,
    grants_of_principal,
    operation_view,
    proposal_view,
    resource_view,
)
from dispatch.api.serializers import (
    GrantOutputSerializer,
    GrantPageSerializer,
    OperationOutputSerializer,
    PageLinksSerializer,
    ProposalOutputSerializer,
    ResourceOutputSerializer,
    enum_field,
    object_field,
)
from dispatch.runtime import get_runtime
from dispatch.services.access import (
    access_operation_by_id,
    access_proposal_by_id,
    access_resource_by_id,
)
from dispatch.services.approvals import approval_decide
from dispatch.services.authority import grant_delegate, has_role
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.proposals import CALL_ID, CALL_ID_RULE, proposal_intake
from dispatch.services.reconciliation import operation_resolve
from dispatch.services.resources import resource_create, revision_create
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import ApprovalState, OperationState

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

C = DenialCode
#: What an id can look like (`prefix_` and URL-safe letters); anything else cannot exist.
ID_SHAPE = re.compile(r"[A-Za-z0-9_]{1,40}")
#: Upper bounds of request strings, beyond which no value can be valid.
NAME_MAX = 150
DIGEST_MAX = 100
TEXT_MAX = 10_000


class JsonOnlyNegotiation(DefaultContentNegotiation):
    """Always answer JSON, whatever `Accept` says: errors included, never a 406."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        first = next(iter(renderers))
        return first, first.media_type


class ApiView(APIView):
    content_negotiation_class = JsonOnlyNegotiation
    # OPTIONS is not part of the API (no metadata): it is neither served nor advertised.
    http_method_names = ("get", "post", "put", "patch", "delete", "head", "trace")

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # Every body, whatever its type or the view, is refused over 1 MiB before it is read.
        check_declared_length(request.META)
        super().initial(request, *args, **kwargs)


def checked_id(value: str, kind: str) -> str:
    """A path id; one that cannot exist answers exactly like another tenant's (`not_found`)."""
    if not ID_SHAPE.fullmatch(value):
        raise Denial(C.NOT_FOUND, kind=kind, id=value)
    return value


def validated(
    serializer_class: type[serializers.Serializer[dict[str, Any]]],
    request: Request,
) -> dict[str, Any]:
    """The body, checked by the view's `InputSerializer`; shape errors are `schema_invalid`."""
    if request.stream is None:
        # DRF reads no stream when there is no body (a zero or absent Content-Length) and
        # hands the view `{}`; an empty body is not an empty object (DESIGN §6).
        raise Denial(C.MALFORMED_REQUEST, reason="the body is empty")
    if not isinstance(request.data, dict):
        raise Denial(C.SCHEMA_INVALID, errors=[
            {"pointer": "", "message": "the body must be a JSON object"}])
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    data: dict[str, Any] = serializer.validated_data
    return data


# --- contracts ------------------------------------------------------------------------------------


class ContractListApi(ApiView):
    class OutputSerializer(serializers.Serializer[dict[str, Any]]):
        class ContractSerializer(serializers.Serializer[dict[str, Any]]):
            class ApprovalSerializer(serializers.Serializer[dict[str, Any]]):
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
                   responses={200: OutputSerializer, **error_responses()})
    def get(self, request: Request) -> Response:
        results = [contract_view(contract) for contract in get_runtime().registry]
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

    def to_internal_value(self, data: Any) -> str:
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
    C.PROPOSAL_MISMATCH, C.PERMIT_CLAIMED, C.BUDGET_EXHAUSTED,
)


class ProposalDispatchApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        permit = IdField(required=False, allow_null=True,
                         help_text="This proposal's permit; by default the one minted for it.")

    class OutputSerializer(serializers.Serializer[dict[str, Any]]):
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


# --- approvals ------------------------------------------------------------------------------------


class ApprovalDecideApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        decision = serializers.ChoiceField(choices=["grant", "deny"])
        digest = StrictCharField(max_length=DIGEST_MAX,
                                 help_text="The proposal digest the human was shown.")
        reason = StrictCharField(required=False, allow_blank=True, max_length=TEXT_MAX)

    class OutputSerializer(serializers.Serializer[dict[str, Any]]):
        class ApprovalStateSerializer(serializers.Serializer[dict[str, Any]]):
            id = serializers.CharField()
            state = enum_field(ApprovalState)

        approval = ApprovalStateSerializer()
        permit_id = serializers.CharField(allow_null=True)

    @extend_schema(operation_id="approvals_decision", summary="Grant or deny an approval",
                   description="Humans holding the approval's role only; agents never decide. "
                               "A grant of a `dispatch_on_approval` proposal also claims its "
                               "permit and enqueues the dispatch.",
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
            "approval": {"id": approval.id, "state": approval.state},
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


# --- grants ---------------------------------------------------------------------------------------


class GrantListApi(ApiView):
    @extend_schema(operation_id="grants_list", summary="List the caller's grants",
                   description="Newest first, keyset-paged; revoked and expired ones included.",
                   parameters=page_parameters(),
                   responses={200: GrantPageSerializer, **error_responses(C.MALFORMED_REQUEST)})
    def get(self, request: Request) -> Response:
        paginator = GrantPagination()
        page = paginator.paginate_queryset(grants_of_principal(principal_of(request)),
                                           request, view=self) or []
        return Response(GrantPageSerializer(paginator.as_page([grant_view(g) for g in page])).data)


class GrantDelegateApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        subject = IdField(help_text="The name of a principal of the same tenant.")
        operations = serializers.ListField(child=StrictCharField(max_length=NAME_MAX),
                                           min_length=1, max_length=100)
        scope = JsonObjectField(help_text='e.g. `{"mailbox": ["support@acme.example"]}`.')
        expires_at = StrictDateTimeField(
            required=False, allow_null=True,
            help_text="No later than the parent's; omitted or null: the parent's bound.")

    @extend_schema(operation_id="grants_delegate", summary="Delegate a narrower grant",
                   parameters=[path_id("grant_id", "grant")], request=InputSerializer,
                   responses={201: GrantOutputSerializer, **error_responses(
                       C.NOT_FOUND, C.DELEGATION_WIDENS, C.AUTHORITY_EXPIRED,
                       C.AUTHORITY_REVOKED, body=True)})
    def post(self, request: Request, grant_id: str) -> Response:
        principal = principal_of(request)
        checked = checked_id(grant_id, "grant")
        data = validated(self.InputSerializer, request)
        now = timezone.now()
        expires_at = data.get("expires_at")
        if expires_at is not None and expires_at <= now:
            raise Denial(C.SCHEMA_INVALID, errors=[
                {"pointer": "/expires_at", "message": "must be in the future"}])
        grant = grant_delegate(actor=principal, grant_id=checked, subject_name=data["subject"],
                               operations=data["operations"], scope=data["scope"],
                               expires_at=expires_at, now=now)
        return Response(GrantOutputSerializer(grant_view(grant)).data, status=201)


# --- audit ----------------------------------------------------------------------------------------


class AuditListApi(ApiView):
    class FilterSerializer(serializers.Serializer[dict[str, Any]]):
        operation = IdField(required=False)
        proposal = IdField(required=False)
        kind = StrictCharField(required=False, allow_blank=True, max_length=50)

    class OutputSerializer(PageLinksSerializer):
        class EventSerializer(serializers.Serializer[dict[str, Any]]):
            id = serializers.IntegerField()
            at = serializers.DateTimeField()
            kind = serializers.CharField(help_text="e.g. `proposal.created`, `permit.claimed`.")
            actor = serializers.CharField()
            operation_id = serializers.CharField(allow_null=True)
            proposal_id = serializers.CharField(allow_null=True)
            digest = serializers.CharField(allow_null=True)
            details = object_field()

        results = EventSerializer(many=True)

    @extend_schema(operation_id="audit_list", summary="Read the tenant's audit",
                   description="Admins of the tenant only; newest first, keyset-paged.",
                   parameters=[
                       query("operation", "Only events of this operation id.",
                             {"type": "string"}),
                       query("proposal", "Only events of this proposal id.",
                             {"type": "string"}),
                       query("kind", "Only events of this kind, e.g. `permit.claimed`.",
                             {"type": "string", "maxLength": 50}),
                       *page_parameters(),
                   ],
                   responses={200: OutputSerializer,
                              **error_responses(C.ROLE_REQUIRED, C.MALFORMED_REQUEST)})
    def get(self, request: Request) -> Response:
        principal = principal_of(request)
        if not has_role(principal, "admin"):
            raise Denial(C.ROLE_REQUIRED, role="admin")
        filters = self.FilterSerializer(data={
            name: request.query_params[name] for name in ("operation", "proposal", "kind")
            if name in request.query_params})
        if not filters.is_valid():
            raise Denial(C.MALFORMED_REQUEST, "A query parameter is not valid.", errors=[
                {"parameter": name, "message": str(messages[0])}
                for name, messages in filters.errors.items()])
        paginator = AuditPagination()
        events = audit_of_tenant(principal, operation=filters.validated_data.get("operation"),
                                 proposal=filters.validated_data.get("proposal"),
                                 kind=filters.validated_data.get("kind"))
        page = paginator.paginate_queryset(events, request, view=self) or []
        return Response(self.OutputSerializer(
            paginator.as_page([audit_view(event) for event in page])).data)


# --- anything else under /api/v1/ -------------------------------------------------------------


@extend_schema(exclude=True)
class NotFoundApi(ApiView):
    """Unknown paths answer the JSON `not_found` body, for every method."""

    def http_method_not_allowed(
        self, request: HttpRequest, *args: Any, **kwargs: Any,
    ) -> Response:
        raise Denial(C.NOT_FOUND)


