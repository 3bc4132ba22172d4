"""REST calls over an agent's webhooks (docs/rest-api.md#webhooks): register one for its own
proposals' decisions and outcomes, list them, delete one. The signing secret is in the answer
that creates the endpoint, and never again."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from dispatch.api.authentication import principal_of
from dispatch.api.base import ApiView, C, checked_id, validated
from dispatch.api.fields import StrictCharField, StrictInputSerializer
from dispatch.api.schema import error_responses, path_id
from dispatch.models import WebhookEndpoint
from dispatch.services.webhooks import (
    AGENT_EVENTS,
    webhook_delete,
    webhook_list,
    webhook_register,
)
from protocols.jsontypes import JSONObject


class WebhookSerializer(serializers.Serializer[JSONObject]):
    id = serializers.CharField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.ChoiceField(choices=list(AGENT_EVENTS)))
    created_at = serializers.DateTimeField()


class WebhookCreatedSerializer(WebhookSerializer):
    secret = serializers.CharField(help_text=(
        "The Standard Webhooks signing key (`whsec_…`), shown in this answer only: keep it to "
        "verify each delivery's `webhook-signature`."))


class WebhookListSerializer(serializers.Serializer[JSONObject]):
    results = WebhookSerializer(many=True)


def webhook_view(endpoint: WebhookEndpoint) -> JSONObject:
    return {"id": endpoint.id, "url": endpoint.url, "events": list(endpoint.events),
            "created_at": endpoint.created_at.isoformat()}


class WebhookListApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        url = StrictCharField(max_length=2000, help_text=(
            "An http or https URL. Deliveries go where it says; a deployment refuses loopback "
            "and private addresses unless `WEBHOOK_ALLOW_PRIVATE` is on."))
        events = serializers.ListField(
            child=StrictCharField(max_length=100), min_length=1, max_length=len(AGENT_EVENTS),
            help_text="Which events of the caller's own proposals to hear: "
                      + ", ".join(f"`{event}`" for event in AGENT_EVENTS) + ".")

    @extend_schema(operation_id="webhooks_list", summary="List the caller's webhooks",
                   description="Oldest first; never their secrets.",
                   responses={200: WebhookListSerializer, **error_responses()})
    def get(self, request: Request) -> Response:
        endpoints = webhook_list(principal=principal_of(request))
        return Response({"results": [webhook_view(e) for e in endpoints]})

    @extend_schema(operation_id="webhooks_create", summary="Register a webhook",
                   description=(
                       "The caller hears its own proposals' decisions and outcomes, in the "
                       "Standard Webhooks format (`webhook-id`, `webhook-timestamp`, "
                       "`webhook-signature` headers; body `{\"type\",\"timestamp\",\"data\"}` "
                       "with ids, the state and the action's summary, never a permit or a "
                       "secret). The answer holds the signing `secret`, once."),
                   request=InputSerializer,
                   responses={201: WebhookCreatedSerializer, **error_responses(body=True)})
    def post(self, request: Request) -> Response:
        data = validated(self.InputSerializer, request)
        registered = webhook_register(principal=principal_of(request), url=data["url"],
                                      events=data["events"], now=timezone.now())
        return Response({**webhook_view(registered.endpoint), "secret": registered.secret},
                        status=201)


class WebhookDetailApi(ApiView):
    @extend_schema(operation_id="webhooks_delete", summary="Delete a webhook",
                   description="Nothing more is sent to it, retries included. Answers the "
                               "endpoint deleted.",
                   parameters=[path_id("webhook_id", "webhook")],
                   responses={200: WebhookSerializer, **error_responses(C.NOT_FOUND)})
    def delete(self, request: Request, webhook_id: str) -> Response:
        endpoint = webhook_delete(principal=principal_of(request),
                                  endpoint_id=checked_id(webhook_id, "webhook"),
                                  now=timezone.now())
        return Response(webhook_view(endpoint))
