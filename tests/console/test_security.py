"""Content-Security-Policy on every page from django-csp's middleware; cursors fail safe."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from config import settings as project
from console import paging

pytestmark = pytest.mark.django_db

MIDDLEWARE = "csp.middleware.CSPMiddleware"


def directives(header: str) -> dict[str, str]:
    return dict(part.split(" ", 1) for part in header.split("; "))


def test_the_login_page_carries_the_policy(client: Any) -> None:
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert directives(response["Content-Security-Policy"]) == {
        "default-src": "'none'",
        "script-src": "'self'",
        "style-src": "'self'",
        "img-src": "'self'",
        "font-src": "'self'",
        "connect-src": "'self'",
        "form-action": "'self'",
        "frame-ancestors": "'none'",
        "base-uri": "'none'",
    }


def test_an_unknown_page_carries_the_policy_too(client: Any) -> None:
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    assert directives(response["Content-Security-Policy"])["script-src"] == "'self'"


def test_the_project_installs_the_middleware_before_the_views_answer() -> None:
    """Console views carry no per-view decorator: the middleware is the one place."""
    assert MIDDLEWARE in project.MIDDLEWARE
    assert project.MIDDLEWARE.index(MIDDLEWARE) < project.MIDDLEWARE.index(
        "django.middleware.csrf.CsrfViewMiddleware")


def test_policy_allows_nothing_inline_or_foreign(client: Any) -> None:
    header = client.get("/accounts/login/")["Content-Security-Policy"]
    policy = directives(header)
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"
    assert policy["style-src"] == "'self'"
    assert policy["form-action"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in header
    assert "nonce" not in header


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
