"""REST reads of the evidence chain (docs/design.md#evidence): receipts and attestations,
tenant-scoped.

There is no call that creates either: only the dispatcher issues them, when a `research.fetch`
or `evidence.attest` operation completes (`dispatch.services.evidence`). A `POST` here is 405.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from dispatch.api.authentication import principal_of
from dispatch.api.base import ApiView, C, checked_id
from dispatch.api.schema import error_responses, path_id
from dispatch.services.access import access_attestation_by_id, access_receipt_by_id
from dispatch.services.evidence import attestation_json, receipt_json
from protocols.jsontypes import JSONObject


class _Bound(serializers.Serializer[JSONObject]):
    id = serializers.CharField()
    revision = serializers.IntegerField()


class ReceiptOutputSerializer(serializers.Serializer[JSONObject]):
    id = serializers.CharField(help_text="`evr_…`")
    question = _Bound(help_text="The question revision the source was retrieved for.")
    # the wire name docs/design.md#evidence gives; DRF stubs type `Field.source` as the attribute
    # path
    source = serializers.CharField(help_text="The URL retrieved.")  # type: ignore[assignment]
    content_digest = serializers.CharField(help_text="`sha256:` of the exact bytes retrieved.")
    retrieved_at = serializers.DateTimeField()
    operation_id = serializers.CharField(help_text="The `research.fetch` that retrieved it.")


class AttestationOutputSerializer(serializers.Serializer[JSONObject]):
    class Report(_Bound):
        digest = serializers.CharField()

    class FindingSerializer(serializers.Serializer[JSONObject]):
        citation = serializers.IntegerField(allow_null=True,
                                            help_text="0-based; null for the whole report.")
        message = serializers.CharField()

    id = serializers.CharField(help_text="`att_…`")
    validator = serializers.CharField(help_text="`<name>@<version>`")
    policy = serializers.CharField(help_text="`<name>/<version>`")
    report = Report(help_text="The exact report revision judged.")
    evidence = serializers.ListField(child=serializers.CharField(),
                                     help_text="The receipt ids inspected.")
    result = serializers.ChoiceField(choices=["pass", "fail"],
                                     help_text="One validator's recorded judgement, never a "
                                               "universal 'verified'.")
    findings = FindingSerializer(many=True)
    issued_at = serializers.DateTimeField()


class ReceiptDetailApi(ApiView):
    @extend_schema(operation_id="evidence_retrieve", summary="Read an evidence receipt",
                   description="Of the caller's tenant; any other id is `not_found`.",
                   parameters=[path_id("receipt_id", "receipt")],
                   responses={200: ReceiptOutputSerializer, **error_responses(C.NOT_FOUND)})
    def get(self, request: Request, receipt_id: str) -> Response:
        receipt = access_receipt_by_id(principal_of(request), checked_id(receipt_id, "receipt"))
        return Response(ReceiptOutputSerializer(receipt_json(receipt)).data)


class AttestationDetailApi(ApiView):
    @extend_schema(operation_id="attestations_retrieve", summary="Read an attestation",
                   description="Of the caller's tenant; any other id is `not_found`.",
                   parameters=[path_id("attestation_id", "attestation")],
                   responses={200: AttestationOutputSerializer, **error_responses(C.NOT_FOUND)})
    def get(self, request: Request, attestation_id: str) -> Response:
        attestation = access_attestation_by_id(principal_of(request),
                                               checked_id(attestation_id, "attestation"))
        return Response(AttestationOutputSerializer(attestation_json(attestation)).data)
