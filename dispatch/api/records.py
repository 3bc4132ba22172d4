"""REST calls over authority and the record (docs/rest-api.md#calls): grants (their issue and
revocation by an admin, docs/rest-api.md#admin) and the audit."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from dispatch.api.authentication import principal_of
from dispatch.api.base import NAME_MAX, ApiView, C, checked_id, require_future, validated
from dispatch.api.fields import (
    IdField,
    JsonObjectField,
    StrictCharField,
    StrictDateTimeField,
    StrictInputSerializer,
)
from dispatch.api.pagination import AuditPagination, CheckpointPagination, GrantPagination
from dispatch.api.presenters import audit_view, grant_view
from dispatch.api.schema import error_responses, page_parameters, path_id, query
from dispatch.api.serializers import (
    GrantOutputSerializer,
    GrantPageSerializer,
    PageLinksSerializer,
    object_field,
)
from dispatch.selectors.audit import audit_of_tenant
from dispatch.selectors.principals import grants_of_principal, principal_named
from dispatch.selectors.seals import checkpoints_of_tenant
from dispatch.services.authority import (
    grant_delegate,
    grant_issue,
    grant_revoke,
    has_role,
    require_role,
)
from dispatch.services.checkpoints import checkpoint_view
from protocols.denials import Denial
from protocols.jsontypes import JSONObject
from protocols.roles import Role

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

    class InputSerializer(StrictInputSerializer):
        subject = IdField(help_text="The name of a principal of the admin's tenant.")
        operation = StrictCharField(max_length=NAME_MAX,
                                    help_text="A contract's qualified name.")
        scope = JsonObjectField(help_text='e.g. `{"customer": ["cus-002"]}`, or '
                                          '`{"customer": "*"}` for any.')
        expires_at = StrictDateTimeField(required=False, allow_null=True,
                                         help_text="Omitted or null: no expiry.")

    @extend_schema(operation_id="grants_create", summary="Issue a grant",
                   description="Admins only, to a principal of their tenant: what `manage.py "
                               "grant` does, audited `grant.issued` under the admin's name.",
                   request=InputSerializer,
                   responses={201: GrantOutputSerializer, **error_responses(
                       C.ROLE_REQUIRED, C.NOT_FOUND, C.UNKNOWN_OPERATION, body=True)})
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        require_role(principal, Role.ADMIN)
        data = validated(self.InputSerializer, request)
        now = timezone.now()
        require_future(data.get("expires_at"), now, "/expires_at")
        subject = principal_named(viewer=principal, name=data["subject"])
        try:
            grant = grant_issue(issuer=principal, subject=subject,
                                operations=[data["operation"]], scope=data["scope"], now=now,
                                expires_at=data.get("expires_at"))
        except (ValueError, TypeError, AttributeError) as exc:  # the scope's shape
            raise Denial(C.SCHEMA_INVALID, errors=[
                {"pointer": "/scope", "message": str(exc)}]) from None
        return Response(GrantOutputSerializer(grant_view(grant)).data, status=201)


class GrantDetailApi(ApiView):
    @extend_schema(operation_id="grants_revoke", summary="Revoke a grant",
                   description="Admins only: what `manage.py revoke` does. The grant, every "
                               "grant delegated from it and every unclaimed permit resting on "
                               "them are revoked in one transaction, audited `grant.revoked`.",
                   parameters=[path_id("grant_id", "grant")],
                   responses={204: None, **error_responses(C.NOT_FOUND, C.ROLE_REQUIRED)})
    def delete(self, request: Request, grant_id: str) -> Response:
        principal = principal_of(request)
        require_role(principal, Role.ADMIN)
        grant_revoke(actor=principal, grant_id=checked_id(grant_id, "grant"),
                     now=timezone.now())
        return Response(status=204)


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
        require_future(expires_at, now, "/expires_at")
        grant = grant_delegate(actor=principal, grant_id=checked, subject_name=data["subject"],
                               operations=data["operations"], scope=data["scope"],
                               expires_at=expires_at, now=now)
        return Response(GrantOutputSerializer(grant_view(grant)).data, status=201)


# --- audit ----------------------------------------------------------------------------------------


class AuditListApi(ApiView):
    class FilterSerializer(serializers.Serializer[JSONObject]):
        operation = IdField(required=False)
        proposal = IdField(required=False)
        kind = StrictCharField(required=False, allow_blank=True, max_length=50)

    class OutputSerializer(PageLinksSerializer):
        class EventSerializer(serializers.Serializer[JSONObject]):
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
        if not has_role(principal, Role.ADMIN):
            raise Denial(C.ROLE_REQUIRED, role=Role.ADMIN)
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


class AuditCheckpointListApi(ApiView):
    class OutputSerializer(PageLinksSerializer):
        class CheckpointSerializer(serializers.Serializer[JSONObject]):
            tenant = serializers.CharField()
            block = serializers.IntegerField(help_text="The tenant's last block at the time.")
            digest = serializers.CharField(help_text="That block's digest (`sha256:<hex>`).")
            sealed_at = serializers.CharField(help_text="That block's `sealed_at`.")
            kid = serializers.CharField(help_text="The signing key, as `GET keys/` names it.")
            signature = serializers.CharField(
                help_text="Unpadded base64url Ed25519 signature of `canon/1` of the other "
                          "members (docs/audit-seal.md#checkpoints).")

        results = CheckpointSerializer(many=True)

    @extend_schema(operation_id="audit_checkpoints_list",
                   summary="Read the tenant's signed audit checkpoints",
                   description=(
                       "Admins of the tenant only; latest first, keyset-paged. Each sealing "
                       "pass publishes one: the head of the tenant's sealed audit, signed. An "
                       "outside witness keeps them, and `manage.py audit_verify --checkpoint` "
                       "holds the chain to them."),
                   parameters=page_parameters(),
                   responses={200: OutputSerializer,
                              **error_responses(C.ROLE_REQUIRED, C.MALFORMED_REQUEST)})
    def get(self, request: Request) -> Response:
        principal = principal_of(request)
        if not has_role(principal, Role.ADMIN):
            raise Denial(C.ROLE_REQUIRED, role=Role.ADMIN)
        paginator = CheckpointPagination()
        page = paginator.paginate_queryset(checkpoints_of_tenant(principal), request,
                                           view=self) or []
        return Response(self.OutputSerializer(
            paginator.as_page([checkpoint_view(row) for row in page])).data)
