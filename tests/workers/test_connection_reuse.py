"""A worker keeps its database connection across tasks, with Django's per-request checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from celery.signals import task_postrun, task_prerun

from config.celery import app


def test_every_task_runs_between_djangos_connection_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr("config.celery.close_old_connections", lambda: calls.append("checked"))
    for signal in (task_prerun, task_postrun):
        signal.send(sender=None, task_id="t", task=None, args=(), kwargs={})
    assert calls == ["checked", "checked"]


def test_an_eager_task_leaves_its_callers_connection_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr("config.celery.close_old_connections", lambda: calls.append("checked"))
    eager = SimpleNamespace(request=SimpleNamespace(is_eager=True))
    for signal in (task_prerun, task_postrun):
        signal.send(sender=None, task_id="t", task=eager, args=(), kwargs={})
    assert calls == []


@pytest.mark.django_db
def test_an_eager_task_inside_a_test_transaction_keeps_the_connection_open() -> None:
    """The defect CI caught: with this module imported, an eager task closed the test's
    connection and the next query failed with 'Cannot operate on a closed database'."""
    from django.db import connection

    from dispatch.models import Principal

    result = app.tasks["dispatch.tasks.reconcile_operations"].apply()
    assert result.successful(), result.traceback
    assert Principal.objects.count() >= 0
    assert connection.connection is not None


def test_the_fixup_keeps_connections_across_tasks() -> None:
    from django.conf import settings

    assert settings.CELERY_DB_REUSE_MAX >= 100
    assert app.conf.get("CELERY_DB_REUSE_MAX") == settings.CELERY_DB_REUSE_MAX


