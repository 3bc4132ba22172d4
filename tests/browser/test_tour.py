"""A tour of the seeded demo, as its operator and its admin: every console page renders with no
error in Chromium's console (any message of type `error`, not only CSP reports), and none is
wider than a phone's screen. Each page's screenshot is kept (artifacts/screenshots/tour-*.png;
with UPDATE_SCREENSHOTS=1, as docs/screenshots/demo-*.png)."""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from demo.seed import ADMIN, APPROVAL_RULES_FILE, OPERATOR
from dispatch.models import ApprovalRequest, Operation, Proposal, Renewal
from tests.browser.conftest import README_SCREENSHOTS, SCREENSHOTS, signed_in
from tests.support.destinations import Destinations

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.slow]

DESKTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
#: scrollWidth may exceed the viewport by a rounding pixel.
SLACK = 1


def pages(kind: str) -> list[tuple[str, str]]:
    """(name, path) of every page the seeded demo has something on, for `kind` of user."""
    # The newest of each operation, and the large payment (four eyes) under its own name.
    pending = {a.proposal.operation: a for a in ApprovalRequest.objects.filter(
        state="pending").select_related("proposal").order_by("created_at")}
    large = ApprovalRequest.objects.filter(state="pending", quorum__gt=1).first()
    if large is not None:
        pending["four-eyes.payment"] = large
    stale = Proposal.objects.filter(approval__state="pending", operation="email.send").order_by(
        "created_at").first()
    unknown = Operation.objects.filter(state="unknown").first()
    common = [("queue", "/console/"), ("decided", "/console/decided/"),
              ("operations", "/console/operations/")]
    approvals = [(f"approval-{name.replace('.', '-')}", f"/console/approvals/{a.id}/")
                 for name, a in pending.items()]
    if stale is not None:
        approvals.append(("approval-oldest-email", f"/console/approvals/{stale.approval.id}/"))
    if kind == "operator":
        return common + approvals
    found = [("unknown-outcomes", "/console/operations/unknown/"),
             ("grants", "/console/grants/"), ("audit", "/console/audit/"),
             ("notifications", "/console/notifications/"), ("pauses", "/console/pauses/"),
             ("api-docs", "/api/v1/docs/")]
    if unknown is not None:
        found.append(("unknown-operation", f"/console/operations/{unknown.id}/"))
    renewal = Renewal.objects.first()
    if renewal is not None:
        found.append(("renewal", f"/console/renewals/{renewal.id}/"))
    return common + found


@pytest.fixture
def seeded(destinations: Destinations, tmp_path: Path, settings: Any) -> Iterator[None]:
    """The demo as scripts/run.sh makes it: its four-eyes rule deployed, then seeded."""
    from dispatch.runtime import get_runtime

    settings.APPROVAL_RULES = json.loads(APPROVAL_RULES_FILE.read_text())
    get_runtime.cache_clear()
    call_command("seed_demo", "--token-file", str(tmp_path / "token"), stdout=io.StringIO())
    yield
    settings.APPROVAL_RULES = []
    get_runtime.cache_clear()


def visit(browser: Any, base_url: str, who: tuple[str, str], kind: str,
          viewport: dict[str, int]) -> dict[str, list[str]]:
    """Log in as `who` and open each page; what went wrong on each, by page name."""
    context, tab = signed_in(browser, base_url, who, viewport)
    errors: list[str] = []
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    tab.on("pageerror", lambda error: errors.append(f"script error: {error}"))
    problems: dict[str, list[str]] = {}
    phone = viewport == PHONE
    for name, path in pages(kind):
        errors.clear()
        response = tab.goto(path)
        tab.wait_for_load_state("networkidle")
        found = [] if response is not None and response.ok else [
            f"status {response.status if response else 'none'}"]
        found += list(errors)
        if phone:
            wide = tab.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            if wide > SLACK:
                found.append(f"{wide}px wider than the phone")
        shot = SCREENSHOTS / f"tour-{name}{'-phone' if phone else ''}.png"
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(shot), full_page=False)
        if os.environ.get("UPDATE_SCREENSHOTS") == "1" and not phone:
            README_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, README_SCREENSHOTS / f"demo-{name}.png")
        if found:
            problems[f"{who[0]} {name} {path}"] = found
    context.close()
    return problems


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_every_page_of_the_demo_renders_clean(browser: Any, live_server: Any,
                                               viewport: dict[str, int]) -> None:
    assert Operation.objects.filter(state="unknown").exists()
    problems = {**visit(browser, live_server.url, OPERATOR, "operator", viewport),
                **visit(browser, live_server.url, ADMIN, "admin", viewport)}
    assert problems == {}
