"""Content-Security-Policy on every page once the middleware is installed; cursors fail safe."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from config import settings as project
from console import paging
from console.csp import POLICY

pytestmark = pytest.mark.django_db

MIDDLEWARE = "console.csp.ContentSecurityPolicyMiddleware"


def test_middleware_covers_the_login_page(client: Any, settings: Any) -> None:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert response["Content-Security-Policy"] == POLICY


def test_the_project_installs_the_middleware_before_the_views_answer() -> None:
    """Console views carry no per-view decorator: the middleware is the one place."""
    assert MIDDLEWARE in project.MIDDLEWARE
    assert project.MIDDLEWARE.index(MIDDLEWARE) < project.MIDDLEWARE.index(
        "django.middleware.csrf.CsrfViewMiddleware")


def test_policy_allows_nothing_inline_or_foreign() -> None:
    directives = dict(part.split(" ", 1) for part in POLICY.split("; "))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["form-action"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in POLICY


def test_login_form_carries_a_csrf_token(client: Any) -> None:
    assert 'name="csrfmiddlewaretoken"' in client.get("/accounts/login/").content.decode()


def test_logout_is_a_post_and_lands_on_a_page(admin: Any) -> None:
    response = admin.post("/accounts/logout/", {})
    assert response.status_code == 200
    assert "Logged out" in response.content.decode()
    assert admin.get("/console/").status_code == 302


@pytest.mark.parametrize("raw", [None, "", "!!!", "x" * 500, paging.encode((1, 2, 3))])
def test_bad_cursors_decode_to_nothing(raw: str | None) -> None:
    assert paging.decode_time_id(raw) is None


def test_cursors_round_trip() -> None:
    at = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert paging.decode_time_id(paging.encode((at, "apr_x"))) == (at, "apr_x")
    assert paging.decode_int(paging.encode((42,))) == 42
    assert paging.decode_int(paging.encode((at, "apr_x"))) is None
