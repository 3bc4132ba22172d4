"""`POST executions/{id}/input/` (docs/rest-api.md#calls, docs/workflows.md#waiting-steps): the
answer of the `receive` or `approve` step a workflow execution is parked at. The run resumes on
a worker once the answer commits. An approval is never answered here: only the approval
resolver decides it (`POST approvals/{id}/decision/`).

`POST executions/{id}/cancel/` (docs/workflows.md#deadlines): end a run `cancelled` and stop its
actions."""

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
from dispatch.services.cancellation import REASON_MAX
from dispatch.services.run_stops import execution_cancel
from dispatch.workflows.resume import deliver_input
from protocols.jsontypes import JSONObject

INPUT_DESCRIPTION = (
    "The answer of the `receive` (any JSON, from the execution's own agent or an operator) or "
    "`approve` (true or false, from an operator other than the execution's agent) step the "
    "execution is parked at, once. `step` names the step when several are parked. The run "
    "resumes on a worker after the commit.")


class ExecutionInputApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        value = serializers.JSONField(help_text="The step's answer: JSON for `receive`, a "
                                                "bool for `approve`.")
        step = StrictCharField(required=False, max_length=80,
                               help_text="The parked step's key, e.g. `steps[0]`.")

    class OutputSerializer(serializers.Serializer[JSONObject]):
        execution_id = serializers.CharField()
        step = serializers.CharField()
        waits = serializers.CharField(help_text="`receive` or `approve`.")
        state = serializers.CharField(help_text="`parked` until the run resumes.")

    @extend_schema(operation_id="executions_input", summary="Answer a parked workflow step",
                   description=INPUT_DESCRIPTION, parameters=[path_id("execution_id", "execution")],
                   request=InputSerializer, responses={
                       200: OutputSerializer,
                       **error_responses(C.NOT_FOUND, C.PROTOCOL_STATE_INVALID, C.ROLE_REQUIRED,
                                         C.APPROVER_IS_REQUESTER, C.SCHEMA_INVALID, body=True)})
    def post(self, request: Request, execution_id: str) -> Response:
        principal = principal_of(request)
        checked = checked_id(execution_id, "execution")
        data = validated(self.InputSerializer, request)
        wait = deliver_input(principal=principal, execution_id=checked, value=data["value"],
                             step=data.get("step"), now=timezone.now())
        return Response(self.OutputSerializer({
            "execution_id": wait.execution_id, "step": wait.step, "waits": wait.kind,
            "state": wait.state}).data)


CANCEL_DESCRIPTION = (
    "By the principal that runs the execution, or an operator or admin of its tenant. The run "
    "ends `cancelled` at once (no further step runs) and each of its actions is stopped as "
    "`POST operations/{id}/cancel/` stops one: a pending proposal is withdrawn, an attempt in "
    "flight is cancelled through its handler's context and its outcome is what happened "
    "(`unknown` when the effect may have happened); a consumed permit is never freed. A run "
    "that has already ended is `protocol_state_invalid`.")


class ExecutionCancelApi(ApiView):
    class InputSerializer(StrictInputSerializer):
        reason = StrictCharField(required=False, allow_blank=True, max_length=REASON_MAX,
                                 help_text="Why; kept in the audit.")

    class OutputSerializer(serializers.Serializer[JSONObject]):
        execution_id = serializers.CharField()
        state = serializers.CharField(help_text="`cancelled`.")

    @extend_schema(operation_id="executions_cancel", summary="Cancel a run",
                   description=CANCEL_DESCRIPTION,
                   parameters=[path_id("execution_id", "execution")], request=InputSerializer,
                   responses={200: OutputSerializer,
                              **error_responses(C.NOT_FOUND, C.ROLE_REQUIRED,
                                                C.PROTOCOL_STATE_INVALID, body=True)})
    def post(self, request: Request, execution_id: str) -> Response:
        principal = principal_of(request)
        checked = checked_id(execution_id, "execution")
        data = validated(self.InputSerializer, request)
        execution = execution_cancel(actor=principal, execution_id=checked,
                                     reason=data.get("reason", ""), now=timezone.now())
        return Response(self.OutputSerializer({"execution_id": execution.id,
                                               "state": execution.state}).data)
