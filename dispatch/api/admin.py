"""REST calls that provision a tenant (docs/rest-api.md#admin): agents and their tokens, and the
emergency stop. What `manage.py create_agent`, `pause` and `resume` do, an admin of the tenant
does here with a personal token, through the same services, audited as the commands are. Grants
are in `records`."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from dispatch.api.authentication import principal_of
from dispatch.api.base import NAME_MAX, ApiView, C, checked_id, validated
from dispatch.api.fields import IdField, StrictCharField, StrictInputSerializer
from dispatch.api.presenters import pause_view
from dispatch.api.schema import error_responses, path_id
from dispatch.models import Principal
from dispatch.selectors.pauses import pause_get
from dispatch.selectors.principals import principal_named
from dispatch.services.authority import require_role
from dispatch.services.pauses import pause_lift, pause_set
from dispatch.services.principals import agent_provision, agent_token_rotate
from protocols.denials import Denial
from protocols.jsontypes import JSONObject
from protocols.roles import Role

# --- agents ---------------------------------------------------------------------------------------


class AgentCreateApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        name = StrictCharField(max_length=NAME_MAX,
                               help_text="Unique among every tenant's principals.")
        tools = serializers.ListField(
            child=StrictCharField(max_length=NAME_MAX), max_length=100,
            help_text="The operations the agent may ever propose (its tool set).")

    class OutputSerializer(serializers.Serializer[JSONObject]):
        id = serializers.CharField()
        name = serializers.CharField()
        token = serializers.CharField(help_text="The agent's bearer token, shown in this answer "
                                                "only (only its hash is stored).")

    @extend_schema(operation_id="agents_create", summary="Create an agent",
                   description="Admins only, in their own tenant: what `manage.py create_agent` "
                               "does. The answer holds the agent's bearer token, once.",
                   request=InputSerializer,
                   responses={201: OutputSerializer, **error_responses(
                       C.ROLE_REQUIRED, C.UNKNOWN_OPERATION, body=True)})
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        require_role(principal, Role.ADMIN)
        data = validated(self.InputSerializer, request)
        agent, token = agent_provision(actor=principal, name=data["name"], tools=data["tools"])
        return Response(self.OutputSerializer(
            {"id": agent.id, "name": agent.name, "token": token}).data, status=201)


class AgentTokenApi(ApiView):
    class OutputSerializer(serializers.Serializer[JSONObject]):
        token = serializers.CharField(help_text="The agent's new bearer token, shown once.")

    @extend_schema(operation_id="agents_token_rotate", summary="Rotate an agent's token",
                   description="Admins only: a new token for an agent of their tenant, and "
                               "every token it held before refused from this answer on. No "
                               "body.",
                   parameters=[path_id("agent_id", "agent")], request=None,
                   responses={201: OutputSerializer,
                              **error_responses(C.NOT_FOUND, C.ROLE_REQUIRED)})
    def post(self, request: Request, agent_id: str) -> Response:
        principal = principal_of(request)
        require_role(principal, Role.ADMIN)
        token = agent_token_rotate(actor=principal, agent_id=checked_id(agent_id, "agent"),
                                   now=timezone.now())
        return Response(self.OutputSerializer({"token": token}).data, status=201)


# --- pauses ---------------------------------------------------------------------------------------


class PauseSerializer(serializers.Serializer[JSONObject]):
    id = serializers.CharField()
    scope = serializers.CharField(help_text="`the tenant`, `contract O`, `agent A`, or "
                                            "`contract O of agent A`.")
    operation = serializers.CharField(allow_null=True)
    agent = serializers.CharField(allow_null=True, help_text="The agent's name.")
    reason = serializers.CharField(allow_blank=True)
    paused_by = serializers.CharField()
    paused_at = serializers.DateTimeField()


class PauseCreateApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        operation = StrictCharField(required=False, allow_blank=True, max_length=NAME_MAX,
                                    help_text="A contract's qualified name; omitted: every "
                                              "contract.")
        agent = IdField(required=False, max_length=NAME_MAX,
                        help_text="An agent's name; omitted: every agent.")
        reason = StrictCharField(required=False, allow_blank=True, max_length=500,
                                 help_text="Shown on the console's banner.")

    @extend_schema(operation_id="pauses_create", summary="Pause the tenant, a contract or an "
                                                         "agent",
                   description=(
                       "Admins only: what `manage.py pause` does. From this answer on every "
                       "claim and every attempt start in the scope is refused `paused`; pending "
                       "approvals stay. `{}` pauses the whole tenant. 201 the new pause; 200 "
                       "the pause already in force for exactly this scope."),
                   request=InputSerializer,
                   responses={200: PauseSerializer, 201: PauseSerializer, **error_responses(
                       C.ROLE_REQUIRED, C.NOT_FOUND, C.UNKNOWN_OPERATION, body=True)})
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        require_role(principal, Role.ADMIN)
        data = validated(self.InputSerializer, request)
        agent = None
        if "agent" in data:
            agent = principal_named(viewer=principal, name=data["agent"],
                                    kind=Principal.Kind.AGENT)
        pause, created = pause_set(actor=principal, tenant=principal.tenant,
                                   operation=data.get("operation", ""), agent=agent,
                                   reason=data.get("reason", ""), now=timezone.now())
        return Response(PauseSerializer(pause_view(pause)).data, status=201 if created else 200)


class PauseDetailApi(ApiView):
    @extend_schema(operation_id="pauses_delete", summary="Resume a pause",
                   description="Admins only: what `manage.py resume` does for this pause's "
                               "scope; the work it held back goes on. A pause already resumed "
                               "is `not_found`.",
                   parameters=[path_id("pause_id", "pause")],
                   responses={204: None, **error_responses(C.NOT_FOUND, C.ROLE_REQUIRED)})
    def delete(self, request: Request, pause_id: str) -> Response:
        principal = principal_of(request)
        require_role(principal, Role.ADMIN)
        pause = pause_get(viewer=principal, pause_id=checked_id(pause_id, "pause"))
        if pause is None:
            raise Denial(C.NOT_FOUND, kind="pause", id=pause_id)
        pause_lift(actor=principal, tenant=pause.tenant, operation=pause.operation,
                   agent=pause.agent, now=timezone.now())
        return Response(status=204)
