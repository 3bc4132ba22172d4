"""`/api/v1/` (docs/rest-api.md#calls). Paths end with a slash; anything else under the prefix is a
JSON `not_found`. The OpenAPI schema is at `schema/`, a browsable page of it at `docs/`."""

from __future__ import annotations

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.negotiation import DefaultContentNegotiation

from dispatch.api import (
    admin,
    approvals,
    base,
    decisions,
    evidence,
    executions,
    intake,
    keys,
    records,
    webhooks,
)
from dispatch.api.docs import ApiDocsView

app_name = "api"
urlpatterns = [
    path("contracts/", intake.ContractListApi.as_view(), name="contract-list"),
    path("resources/", intake.ResourceCreateApi.as_view(), name="resource-create"),
    path("resources/<str:resource_id>/", intake.ResourceDetailApi.as_view(),
         name="resource-detail"),
    path("resources/<str:resource_id>/revisions/", intake.RevisionCreateApi.as_view(),
         name="revision-create"),
    path("proposals/", intake.ProposalCreateApi.as_view(), name="proposal-create"),
    path("proposals/<str:proposal_id>/", intake.ProposalDetailApi.as_view(),
         name="proposal-detail"),
    path("proposals/<str:proposal_id>/dispatch/", intake.ProposalDispatchApi.as_view(),
         name="proposal-dispatch"),
    path("proposals/<str:proposal_id>/cancel/", decisions.ProposalCancelApi.as_view(),
         name="proposal-cancel"),
    path("approvals/", approvals.ApprovalListApi.as_view(), name="approval-list"),
    path("approvals/<str:approval_id>/", approvals.ApprovalDetailApi.as_view(),
         name="approval-detail"),
    path("approvals/<str:approval_id>/decision/", decisions.ApprovalDecideApi.as_view(),
         name="approval-decide"),
    path("operations/<str:operation_id>/", decisions.OperationDetailApi.as_view(),
         name="operation-detail"),
    path("operations/<str:operation_id>/resolve/", decisions.OperationResolveApi.as_view(),
         name="operation-resolve"),
    path("operations/<str:operation_id>/cancel/", decisions.OperationCancelApi.as_view(),
         name="operation-cancel"),
    path("operations/<str:operation_id>/reauthorize/",
         decisions.OperationReauthorizeApi.as_view(), name="operation-reauthorize"),
    path("renewals/<str:renewal_id>/decision/", decisions.RenewalDecideApi.as_view(),
         name="renewal-decision"),
    path("executions/<str:execution_id>/input/", executions.ExecutionInputApi.as_view(),
         name="execution-input"),
    path("executions/<str:execution_id>/cancel/", executions.ExecutionCancelApi.as_view(),
         name="execution-cancel"),
    path("grants/", records.GrantListApi.as_view(), name="grant-list"),
    path("grants/<str:grant_id>/", records.GrantDetailApi.as_view(), name="grant-detail"),
    path("grants/<str:grant_id>/delegate/", records.GrantDelegateApi.as_view(),
         name="grant-delegate"),
    path("agents/", admin.AgentCreateApi.as_view(), name="agent-create"),
    path("agents/<str:agent_id>/token/", admin.AgentTokenApi.as_view(), name="agent-token"),
    path("pauses/", admin.PauseCreateApi.as_view(), name="pause-create"),
    path("pauses/<str:pause_id>/", admin.PauseDetailApi.as_view(), name="pause-detail"),
    path("keys/", keys.KeysApi.as_view(), name="keys"),
    path("audit/", records.AuditListApi.as_view(), name="audit-list"),
    path("audit/checkpoints/", records.AuditCheckpointListApi.as_view(),
         name="audit-checkpoint-list"),
    path("evidence/<str:receipt_id>/", evidence.ReceiptDetailApi.as_view(),
         name="evidence-detail"),
    path("attestations/<str:attestation_id>/", evidence.AttestationDetailApi.as_view(),
         name="attestation-detail"),
    path("webhooks/", webhooks.WebhookListApi.as_view(), name="webhook-list"),
    path("webhooks/<str:webhook_id>/", webhooks.WebhookDetailApi.as_view(),
         name="webhook-detail"),
    # The schema view offers YAML and JSON (`?format=json`), so it keeps DRF's negotiation.
    path("schema/", SpectacularAPIView.as_view(
        content_negotiation_class=DefaultContentNegotiation), name="schema"),
    path("docs/", ApiDocsView.as_view(url_name="api:schema"), name="docs"),
    re_path(r"^.*$", base.NotFoundApi.as_view(), name="not-found"),
]
