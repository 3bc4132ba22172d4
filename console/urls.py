from __future__ import annotations

from django.urls import path

from console import audit_views as audit
from console import evidence_views as evidence
from console import grant_views as grants
from console import notification_views as notifications
from console import operation_views as operations
from console import pause_views as pauses
from console import renewal_views as renewals
from console import views

app_name = "console"
urlpatterns = [
    path("", views.approval_list, name="approval-list"),
    path("approvals/<str:approval_id>/", views.approval_detail, name="approval-detail"),
    path("decided/", views.decided_list, name="decided-list"),
    path("approvals/<str:approval_id>/follow/", views.approval_follow, name="approval-follow"),
    path("approvals/<str:approval_id>/watch/", views.approval_watch, name="approval-watch"),
    path("approvals/<str:approval_id>/decide/", views.approval_decide, name="approval-decide"),
    path("approvals/<str:approval_id>/cancel/", views.approval_cancel, name="approval-cancel"),
    path("operations/", operations.operation_list, name="operation-list"),
    path("operations/unknown/", operations.operation_list_unknown, name="operation-unknown-list"),
    path("operations/<str:operation_id>/", operations.operation_detail, name="operation-detail"),
    path("operations/<str:operation_id>/resolve/", operations.operation_resolve,
         name="operation-resolve"),
    path("operations/<str:operation_id>/cancel/", operations.operation_cancel,
         name="operation-cancel"),
    path("operations/<str:operation_id>/reauthorize/", operations.operation_reauthorize,
         name="operation-reauthorize"),
    path("renewals/<str:renewal_id>/", renewals.renewal_detail, name="renewal-detail"),
    path("renewals/<str:renewal_id>/decide/", renewals.renewal_decide, name="renewal-decide"),
    path("questions/<str:question_id>/", evidence.question_detail, name="question-detail"),
    path("grants/", grants.grant_list, name="grant-list"),
    path("grants/issue/", grants.grant_issue, name="grant-issue"),
    path("grants/<str:grant_id>/revoke/", grants.grant_revoke, name="grant-revoke"),
    path("audit/", audit.audit_list, name="audit-list"),
    path("audit/verify/", audit.audit_verify, name="audit-verify"),
    path("notifications/", notifications.notification_list, name="notification-list"),
    path("pauses/", pauses.pause_list, name="pause-list"),
    path("pauses/pause/", pauses.pause_create, name="pause-create"),
    path("pauses/<str:pause_id>/resume/", pauses.pause_resume, name="pause-resume"),
]
