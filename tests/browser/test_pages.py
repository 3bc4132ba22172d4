"""Pages around the console in Chromium: the API reference, the error pages, the favicon, and
the queue and an operation on a phone's screen."""

from __future__ import annotations

import os
from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the conftest's browser fixture says the same; under CI it is an error
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed", allow_module_level=True)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_api_reference_lists_the_operations(page: Any) -> None:
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    response = page.goto("/api/v1/docs/")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self';" in policy
    assert "unsafe" not in policy
    expect(page.get_by_text("Propose an exact action").first).to_be_visible()
    expect(page.locator("#operations-proposals-proposals_create")).to_be_visible()
    assert errors == []


def test_an_unknown_page_is_the_consoles_404(page: Any) -> None:
    response = page.goto("/console/no/such/page/")
    assert response.status == 404
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    page.get_by_role("link", name="Back to the console").click()
    page.wait_for_url("**/accounts/login/?next=/console/")


def test_the_favicon_is_answered_with_an_image(page: Any) -> None:
    page.goto("/accounts/login/")
    href = page.locator('link[rel="icon"]').get_attribute("href")
    for url in (href, "/favicon.ico"):
        response = page.request.get(url)
        assert response.status == 200, url
        assert response.headers["content-type"].startswith("image/"), url
