"""Output shapes shared by several APIs (docs/rest-api.md#calls), and the error body
(docs/design.md#denials).

Views build plain dicts (see `dispatch.api.presenters`); these serializers only render them and
describe them in the OpenAPI schema.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from protocols.denials import MAX_ERRORS, WORKFLOW_ONLY, DenialCode
from protocols.jsontypes import JSONObject
from protocols.lifecycle import ApprovalState, OperationState


def enum_field(values: Iterable[str | None], **kwargs: Any) -> serializers.CharField:
    """A string limited to `values`, described inline (no shared enum component to clash)."""
    listed = list(values)
    schema: JSONObject = {"type": "string", "enum": listed}
    field_class: type[serializers.CharField] = extend_schema_field(schema)(
        type("EnumCharField", (serializers.CharField,), {}))
    return field_class(**kwargs)


def object_field(**kwargs: Any) -> serializers.JSONField:
    return _ObjectField(**kwargs)


@extend_schema_field({"type": "object", "additionalProperties": {}})
class _ObjectField(serializers.JSONField):
    pass


class ResourceStateField(serializers.CharField):
    """A resource's state: one of its kind's states. The schema lists those of the registered
    kinds (`dispatch.api.schema.ResourceStateScheme`), read when the schema is built."""


class ResourceOutputSerializer(serializers.Serializer[JSONObject]):
    id = serializers.CharField()
    kind = serializers.CharField()
    revision = serializers.IntegerField()
    digest = serializers.CharField()
    state = ResourceStateField()
    payload = object_field()


class VoteSerializer(serializers.Serializer[JSONObject]):
    by = serializers.CharField(help_text="The approver's name.")
    at = serializers.DateTimeField()


class ApprovalSummarySerializer(serializers.Serializer[JSONObject]):
    id = serializers.CharField()
    state = enum_field(ApprovalState)
    role = serializers.CharField()
    expires_at = serializers.DateTimeField()
    permit_id = serializers.CharField(allow_null=True)
    quorum = serializers.IntegerField(help_text="Distinct humans who must grant.")
    votes = VoteSerializer(many=True, help_text="The grants so far, oldest first.")
    url = serializers.CharField(allow_null=True, help_text=(
        "The console's page of this approval at its public address (`CONSOLE_PUBLIC_URL`); "
        "null when the deployment has not set it."))


class ProposalOutputSerializer(serializers.Serializer[JSONObject]):
    id = serializers.CharField()
    operation = serializers.CharField(help_text="The contract's qualified name.")
    digest = serializers.CharField(help_text="`sha256:` + hex SHA-256 of `canonical` (UTF-8).")
    canonical = serializers.CharField(help_text="The canonical snapshot, exactly the bytes "
                                                "that were hashed.")
    contract_fingerprint = serializers.CharField()
    execution_id = serializers.CharField()
    approval = ApprovalSummarySerializer(allow_null=True)
    operation_id = serializers.CharField(allow_null=True)
    operation_state = enum_field([*OperationState, None], allow_null=True)


class AttemptOutputSerializer(serializers.Serializer[JSONObject]):
    number = serializers.IntegerField()
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    outcome = enum_field(["completed", "failed_no_effect", "uncertain", None], allow_null=True)
    error = serializers.CharField(allow_null=True)


class OperationOutputSerializer(serializers.Serializer[JSONObject]):
    id = serializers.CharField()
    proposal_id = serializers.CharField()
    state = enum_field(OperationState)
    attempts = AttemptOutputSerializer(many=True)
    result = serializers.JSONField(allow_null=True, help_text="The handler's result, if any.")


class GrantOutputSerializer(serializers.Serializer[JSONObject]):
    id = serializers.CharField()
    issuer = serializers.CharField()
    subject = serializers.CharField(help_text="The subject principal's name.")
    operations = serializers.ListField(child=serializers.CharField())
    scope = object_field(help_text='Authority key to allowed values, or "*" for any.')
    not_before = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    parent_id = serializers.CharField(allow_null=True)
    budget = serializers.IntegerField(
        allow_null=True, help_text="Tool calls a delegated workflow step's grant may take "
                                   "(docs/design.md#evidence); null: no budget of its own.")


class PageLinksSerializer(serializers.Serializer[JSONObject]):
    next = serializers.URLField(allow_null=True, help_text="The next (older) page, if any.")
    previous = serializers.URLField(allow_null=True,
                                    help_text="The previous (newer) page, if any.")


class GrantPageSerializer(PageLinksSerializer):
    results = GrantOutputSerializer(many=True)


# --- errors ---------------------------------------------------------------------------------------

#: Statuses the API answers with that are not in the denial table.
METHOD_NOT_ALLOWED = 405


@functools.cache
def error_serializer(status: int) -> type[serializers.Serializer[JSONObject]]:
    """The error body for one HTTP status, its `code` limited to the codes of that status."""
    if status == METHOD_NOT_ALLOWED:
        codes = [DenialCode.MALFORMED_REQUEST.value]
    else:
        codes = [code.value for code in DenialCode
                 if code.status == status and code not in WORKFLOW_ONLY]
    details_schema: JSONObject = {"type": "object", "additionalProperties": {}}
    if DenialCode.SCHEMA_INVALID.value in codes:
        details_schema["properties"] = {
            "errors": {
                "type": "array",
                "maxItems": MAX_ERRORS,
                "description": f"For `schema_invalid`: the violations, each at its own pointer "
                               f"from the request body's root, sorted by pointer; at most the "
                               f"first {MAX_ERRORS}.",
                "items": {"type": "object", "required": ["pointer", "message"],
                          "properties": {"pointer": {"type": "string"},
                                         "message": {"type": "string"}}},
            },
            "error_count": {
                "type": "integer",
                "minimum": 1,
                "description": "For `schema_invalid`: how many violations there were in all; "
                               "more than the length of `errors` when the list was cut.",
            },
        }
    details = extend_schema_field(details_schema)(
        type(f"Error{status}DetailsField", (serializers.JSONField,), {}))
    inner = type(f"Error{status}BodySerializer", (serializers.Serializer,), {
        "code": enum_field(codes),
        "message": serializers.CharField(help_text="What went wrong and what to do next."),
        "details": details(),
    })
    return type(f"Error{status}Serializer", (serializers.Serializer,), {"error": inner()})
