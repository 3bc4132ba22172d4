"""Pages around the console: the navigation and the breadcrumb name one section, the error
pages (JSON under /api/), the favicon."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client, RequestFactory

from config import errors, urls
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.console.conftest import Browser, text
from tests.console.test_admin_pages import unknown_operation
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db

CURRENT = re.compile(r'<a href="([^"]+)" aria-current="page">([^<]+)</a>')
CRUMB = re.compile(r'<nav class="crumbs" aria-label="Breadcrumb"><a href="([^"]+)">([^<]+)</a>')


def current(body: str) -> tuple[str, str] | None:
    found = CURRENT.findall(body)
    assert len(found) <= 1, found
    return found[0] if found else None


def crumb(body: str) -> tuple[str, str]:
    found = CRUMB.search(body)
    assert found, "the page has no breadcrumb"
    return found.group(1), found.group(2)


def completed_operation(world: World) -> Any:
    proposal, _ = world.approved_email()
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                                  enqueue=False)
    operation = operation_execute(operation_id=operation.id)
    assert operation.state == "completed"
    return operation


def test_an_unknown_outcome_is_in_the_unknown_outcomes_section(
    live: World, destinations: Destinations, admin: Browser,
) -> None:
    body = text(admin.get(f"/console/operations/{unknown_operation(live).id}/"))
    assert crumb(body) == current(body) == ("/console/operations/unknown/", "Unknown outcomes")


def test_a_settled_operation_is_in_the_operations_section_for_an_admin(
    live: World, destinations: Destinations, admin: Browser,
) -> None:
    body = text(admin.get(f"/console/operations/{completed_operation(live).id}/"))
    assert crumb(body) == current(body) == ("/console/operations/", "Operations")


def test_an_operation_is_in_the_operations_section_for_an_operator(
    live: World, destinations: Destinations, operator: Browser,
) -> None:
    body = text(operator.get(f"/console/operations/{completed_operation(live).id}/"))
    assert crumb(body) == current(body) == ("/console/operations/", "Operations")


def test_an_approval_is_in_the_approvals_section(world: World, operator: Browser) -> None:
    proposal = world.propose_transfer()
    body = text(operator.get(f"/console/approvals/{proposal.approval.id}/"))
    assert crumb(body) == current(body) == ("/console/", "Approvals")


@pytest.mark.parametrize(("url", "label"), [
    ("/console/", "Approvals"),
    ("/console/operations/unknown/", "Unknown outcomes"),
    ("/console/grants/", "Grants"),
    ("/console/audit/", "Audit"),
])
def test_each_list_marks_its_own_section(
    world: World, admin: Browser, url: str, label: str,
) -> None:
    assert current(text(admin.get(url))) == (url, label)


@pytest.mark.parametrize("url", ["/no/such/page/", "/console/no/such/page/"])
def test_an_unknown_page_is_the_consoles_404(client: Client, url: str) -> None:
    response = client.get(url)
    body = text(response)
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assert "<h1 id=\"refused-title\">Page not found</h1>" in body
    assert url in body
    assert '<a href="/console/">Back to the console</a>' in body
    assert "console/console.css" in body


@pytest.mark.parametrize("url", ["/api/", "/api/v2/proposals/", "/api"])
def test_an_unknown_api_path_keeps_the_json_envelope(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content)["error"]["code"] == "not_found"


def test_the_project_routes_its_errors_through_config_errors() -> None:
    assert urls.handler404 == "config.errors.page_not_found"
    assert urls.handler500 == "config.errors.server_error"


def test_a_server_error_in_the_console_is_the_consoles_500() -> None:
    response = errors.server_error(RequestFactory().get("/console/"))
    body = text(response)
    assert response.status_code == 500
    assert "Something went wrong" in body
    assert '<a href="/console/">Back to the console</a>' in body


def test_a_server_error_under_the_api_is_the_json_envelope() -> None:
    response = errors.server_error(RequestFactory().post("/api/v1/proposals/"))
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    error = json.loads(response.content)["error"]
    assert error["code"] == "internal_error"
    assert error["details"] == {}


def test_favicon_ico_leads_to_the_static_icon(client: Client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"] == "/static/console/favicon.svg"
    login = text(client.get("/accounts/login/"))
    assert '<link rel="icon" href="/static/console/favicon.svg" type="image/svg+xml">' in login
