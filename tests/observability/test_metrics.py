"""The /metrics series counted from the store (docs/design.md#running): what a scrape says is
what the operation store holds, on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from dispatch.models import ApprovalRequest, Attempt
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.worker import operation_execute
from protocols.denials import Denial, DenialCode
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.metrics import Samples, samples, value

pytestmark = pytest.mark.django_db


def scrape() -> Samples:
    response = Client().get("/metrics")
    assert response.status_code == 200, response.content
    return samples(response.content.decode())


@pytest.fixture
def empty_broker(settings: Any, tmp_path: Path) -> None:
    """The embedded broker on empty folders of its own: the shared `var/broker` may hold
    messages other tests published (a notification enqueued on commit, with no worker)."""
    assert settings.CELERY_BROKER_URL.startswith("filesystem://")
    folders = {name: tmp_path / name for name in ("queue", "processed", "control")}
    for folder in folders.values():
        folder.mkdir()
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {
        **settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        "control_folder": str(folders["control"]), "data_folder_in": str(folders["queue"]),
        "data_folder_out": str(folders["queue"]), "processed_folder": str(folders["processed"])}


@pytest.mark.usefixtures("empty_broker")
def test_an_empty_store_exposes_every_series_at_zero() -> None:
    found = scrape()
    for bucket in ("under_5m", "5m_to_1h", "1h_to_24h", "over_24h"):
        assert value(found, "console_pending_approvals", age_bucket=bucket) == 0
    assert value(found, "console_unknown_operations") == 0
    assert value(found, "console_claims_total") == 0
    for code in DenialCode:
        assert value(found, "console_denials_total", code=code.value) == 0
    for outcome in ("completed", "failed_no_effect", "uncertain"):
        assert value(found, "console_attempt_outcomes_total", outcome=outcome) == 0
    assert value(found, "console_approval_to_dispatch_seconds_count") == 0
    assert value(found, "console_approval_to_dispatch_seconds_bucket", le="+Inf") == 0
    assert value(found, "console_celery_queue_depth", queue="dispatch") == 0
    assert value(found, "console_broker_up") == 1


def test_pending_approvals_are_counted_by_age(world: World) -> None:
    for age in (timedelta(0), timedelta(minutes=1), timedelta(minutes=30), timedelta(hours=3),
                timedelta(days=2)):
        proposal = world.propose_email(world.draft())
        ApprovalRequest.objects.filter(id=proposal.approval.id).update(
            created_at=world.now - age)
    decided = world.propose_transfer()
    world.grant(decided)  # granted: no longer pending
    found = scrape()
    assert {bucket: value(found, "console_pending_approvals", age_bucket=bucket)
            for bucket in ("under_5m", "5m_to_1h", "1h_to_24h", "over_24h")} == {
        "under_5m": 2, "5m_to_1h": 1, "1h_to_24h": 1, "over_24h": 1}


def test_claims_denials_outcomes_and_latency_follow_the_store(
    live: World, destinations: Destinations, settings: Any,
) -> None:
    outcomes = {}
    for to in ("customer@example.com", "x@fail-before.test", "x@lose-response.test"):
        proposal, _ = live.approved_email(to=[to])
        claimed = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                    now=live.now, enqueue=False)
        outcomes[to] = operation_execute(operation_id=claimed.id).state
    assert outcomes == {"customer@example.com": "completed",
                        "x@fail-before.test": "failed_no_effect",
                        "x@lose-response.test": "unknown"}
    pending = live.propose_email(live.draft())
    with pytest.raises(Denial):
        proposal_dispatch(principal=live.owner, proposal_id=pending.id, now=live.now)
    with pytest.raises(Denial):
        proposal_dispatch(principal=live.owner, proposal_id=pending.id, now=live.now)

    found = scrape()
    assert value(found, "console_claims_total") == 3
    assert value(found, "console_unknown_operations") == 1
    assert value(found, "console_denials_total", code="approval_pending") == 2
    assert value(found, "console_denials_total", code="permit_claimed") == 0
    assert {o: value(found, "console_attempt_outcomes_total", outcome=o)
            for o in ("completed", "failed_no_effect", "uncertain")} == {
        "completed": 1, "failed_no_effect": 1, "uncertain": 1}
    # Approved at `live.now` (whole seconds), first attempt started just after, on the clock.
    latencies = [
        (a.started_at - a.operation.permit.issued_at).total_seconds()
        for a in Attempt.objects.select_related("operation__permit").filter(number=1)]
    assert value(found, "console_approval_to_dispatch_seconds_count") == 3
    assert value(found, "console_approval_to_dispatch_seconds_sum") == pytest.approx(
        sum(latencies), abs=0.01)
    for bound in ("0.1", "0.5", "1.0", "2.5", "5.0", "10.0", "3600.0", "+Inf"):
        expected = len(latencies) if bound == "+Inf" else sum(
            1 for s in latencies if s <= float(bound))
        assert value(found, "console_approval_to_dispatch_seconds_bucket", le=bound) == expected


def test_denials_at_intake_are_counted(world: World) -> None:
    """A proposal refused when it is made is a denial like one refused at dispatch."""
    before = scrape()
    client = Client(HTTP_AUTHORIZATION=f"Bearer {world.owner_token}")
    for body, status in (
            ({"operation": "payments.transfer", "arguments": {"amount": "a lot"}}, 422),
            ({"operation": "nothing.here", "arguments": {}}, 404)):
        response = client.post("/api/v1/proposals/", body, content_type="application/json")
        assert response.status_code == status, response.content
    after = scrape()
    for code in ("schema_invalid", "unknown_operation"):
        assert value(after, "console_denials_total", code=code) \
            == value(before, "console_denials_total", code=code) + 1, code
