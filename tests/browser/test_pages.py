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
