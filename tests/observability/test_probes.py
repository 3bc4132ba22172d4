"""/healthz, /readyz and /metrics in-process (docs/design.md#running): answered before host
validation, the HTTPS redirect and sessions; /readyz names its failing check; /metrics is
guarded by METRICS_TOKEN when it is set; every request gets an id, echoed."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.conftest import World

pytestmark = pytest.mark.django_db


@pytest.fixture
def production(settings: Any) -> None:
    """Settings as outside DEBUG: HTTPS redirect on, only the configured hosts."""
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["console.example"]


def test_healthz_answers_over_plain_http_whatever_the_host(production: None) -> None:
    response = Client().get("/healthz", HTTP_HOST="10.0.0.7:8000")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    # The rest of the site still redirects to HTTPS and refuses an unknown host.
    assert Client().get("/console/", HTTP_HOST="console.example").status_code == 301
    assert Client().get("/console/", HTTP_HOST="10.0.0.7:8000").status_code == 400


def test_readyz_checks_the_database_the_migrations_and_the_broker(production: None) -> None:
    response = Client().get("/readyz", HTTP_HOST="10.0.0.7:8000")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok", "checks": {
        "database": "ok", "migrations": "ok", "broker": "ok"}}
    assert "Set-Cookie" not in response


def test_readyz_names_a_broker_that_does_not_answer(settings: Any) -> None:
    from celery import current_app

    dead = "redis://127.0.0.1:1/0"
    previous = current_app.conf.broker_url
    settings.CELERY_BROKER_URL = dead
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    current_app.conf.broker_url = dead
    try:
        response = Client().get("/readyz")
    finally:
        current_app.conf.broker_url = previous
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["broker"]
    assert body["checks"]["broker"] == "failed (OperationalError)"
    assert body["checks"]["database"] == "ok"


def test_probes_refuse_other_methods() -> None:
    response = Client().post("/healthz")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


def test_metrics_is_open_without_a_token_and_guarded_with_one(settings: Any) -> None:
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics").status_code == 200
    settings.METRICS_TOKEN = "scrape-secret-1"
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-1")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b"console_claims_total" in response.content


def test_a_request_id_is_taken_when_well_formed_and_made_otherwise(world: World) -> None:
    given = Client().get("/api/v1/contracts/", HTTP_X_REQUEST_ID="trace-42:a.b_c")
    assert given["X-Request-ID"] == "trace-42:a.b_c"
    made = Client().get("/api/v1/contracts/", HTTP_X_REQUEST_ID="bad id\n{}")
    assert re.fullmatch(r"[0-9a-f]{32}", made["X-Request-ID"])
    other = Client().get("/api/v1/contracts/")
    assert re.fullmatch(r"[0-9a-f]{32}", other["X-Request-ID"])
    assert other["X-Request-ID"] != made["X-Request-ID"]
