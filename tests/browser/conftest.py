"""Browser tests: Playwright's sync API drives Debian's Chromium against `live_server`.

Playwright's sync API runs an event loop in the test thread, so Django's async-safety guard
would refuse the ORM there; DJANGO_ALLOW_ASYNC_UNSAFE lifts it for these tests only
(microsoft/playwright-pytest#29, #46). No `playwright install`: the browser is
/usr/bin/chromium. Every page is checked for Content-Security-Policy violations.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
ROOT = Path(__file__).resolve().parents[2]
# scripts/test.sh gives each of its concurrent passes its own folder.
SCREENSHOTS = Path(os.environ.get("TEST_SCREENSHOTS_DIR") or ROOT / "artifacts" / "screenshots")
README_SCREENSHOTS = ROOT / "docs" / "screenshots"


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is not installed (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = _missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests are required under CI: {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    """A fresh browser context on the live server; fails the test on any CSP violation or
    script error."""
    context = browser.new_context(base_url=live_server.url,
                                  viewport={"width": 1360, "height": 900})
    context.set_default_timeout(10_000)
    tab = context.new_page()
    problems: list[str] = []
    tab.on("console", lambda msg: problems.append(msg.text)
           if "Content Security Policy" in msg.text else None)
    tab.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    yield tab
    context.close()
    assert problems == [], problems


@pytest.fixture
def login(page: Any) -> Callable[[str, str], None]:
    def log_in(username: str, password: str) -> None:
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url("**/console/")
    return log_in


def signed_in(browser: Any, base_url: str, who: tuple[str, str],
              viewport: dict[str, int], **options: Any) -> tuple[Any, Any]:
    """A new context at `viewport` (and any other context `options`, a `timezone_id`) and its
    tab, signed in as `who` (username, password), on the queue; the caller closes the
    context."""
    context = browser.new_context(base_url=base_url, viewport=viewport, **options)
    context.set_default_timeout(15_000)
    tab = context.new_page()
    tab.goto("/accounts/login/")
    tab.get_by_label("Username").fill(who[0])
    tab.get_by_label("Password").fill(who[1])
    tab.get_by_role("button", name="Log in").click()
    tab.wait_for_url("**/console/")
    return context, tab


@pytest.fixture
def screenshot(page: Any) -> Callable[[str], None]:
    """Save the page to artifacts/screenshots/NAME.png (kept as a CI artifact; the folder is
    TEST_SCREENSHOTS_DIR when set); with UPDATE_SCREENSHOTS=1, also copy it beside the README.
    `full_page=False` keeps to the viewport, for a page whose top is what a reader needs at a
    glance."""
    def take(name: str, *, full_page: bool = True) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        target = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(target), full_page=full_page)
        if os.environ.get("UPDATE_SCREENSHOTS") == "1":
            README_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(target, README_SCREENSHOTS / f"{name}.png")
    return take


# The MCP gateway's stack, for the approval of an MCP task in the browser (tests/support/mcp.py).
from tests.support.mcp import gateway, stack  # noqa: E402, F401
