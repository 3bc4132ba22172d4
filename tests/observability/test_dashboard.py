"""deploy/grafana-dashboard.json charts what /metrics exposes: every panel's queries name only
series a scrape has, and every series of docs/design.md#running has a panel."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.support.metrics import samples

pytestmark = pytest.mark.django_db

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"
SERIES = re.compile(r"\bconsole_[a-z_]+")
DESIGN = {"console_pending_approvals", "console_unknown_operations", "console_claims_total",
          "console_denials_total", "console_attempt_outcomes_total",
          "console_approval_to_dispatch_seconds_bucket", "console_celery_queue_depth",
          "console_audit_head_mismatch"}


#: The series each process counts of its own traffic (dispatch/observability/traffic.py).
TRAFFIC = {"console_http_requests_total", "console_http_request_duration_seconds_bucket",
           "console_celery_tasks_total", "console_celery_task_duration_seconds_bucket"}


def test_every_panel_charts_series_the_endpoint_exposes(settings: Any) -> None:
    from dispatch.tasks import approvals_expire_stale

    # A request and a task first: a per-process series shows once something was counted.
    settings.CELERY_TASK_ALWAYS_EAGER = True
    Client().get("/healthz")
    approvals_expire_stale.delay()
    exposed = {name for name, _ in samples(Client().get("/metrics").content.decode())}
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert panels
    charted: set[str] = set()
    for panel in panels:
        names = {name for target in panel["targets"] for name in SERIES.findall(target["expr"])}
        assert names, panel["title"]
        assert names <= exposed, (panel["title"], names - exposed)
        charted |= names
    assert charted >= DESIGN | TRAFFIC, (DESIGN | TRAFFIC) - charted
