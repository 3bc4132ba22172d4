"""After `seed_demo` the console shows every page with something on it: one unknown outcome for
the admin that no lookup can settle, one stale proposal, one large payment; a second run adds
nothing and keeps the agent's token."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from demo.destinations.runner import list_all
from demo.seed import (
    ADMIN,
    APPROVAL_RULES_FILE,
    LARGE_AMOUNT,
    OPERATOR,
    PEOPLE,
    SECOND_OPERATOR,
)
from dispatch.models import ApprovalRequest, Execution, Operation, Principal
from dispatch.services.notifications import notifications_due
from dispatch.services.principals import token_authenticate
from dispatch.services.reconciliation import reconcile_operations
from tests.console.conftest import Browser, text
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db
TOKEN = re.compile(r"^Agent 'support-bot' bearer token: (\S+)$", re.M)
APPROVAL_LINK = re.compile(r'href="/console/approvals/(apr_[A-Za-z0-9]+)/"')


def seed_demo(token_file: Path, *extra: str) -> str:
    out = io.StringIO()
    call_command("seed_demo", "--token-file", str(token_file), *extra, stdout=out)
    return out.getvalue()


def token_of(printed: str) -> str:
    found = TOKEN.search(printed)
    assert found, printed
    return found.group(1)


@pytest.mark.usefixtures("demo_rules")  # the large payment is large by the demo's rule
def test_the_seeded_console_shows_an_unknown_a_stale_proposal_and_a_large_payment(
    destinations: Destinations, tmp_path: Path, as_user: Callable[[str, str], Browser],
) -> None:
    seed_demo(tmp_path / "token")
    [unknown] = Operation.objects.filter(state="unknown")
    # The sink took the message and kept no record: the lookup cannot tell, so reconciliation
    # leaves it for a person, however often it runs.
    for _ in range(2):
        reconcile_operations(now=timezone.now(), enqueue=False)
    unknown.refresh_from_db()
    assert unknown.state == "unknown"
    assert "SMTP sink holds no message" in unknown.evidence
    assert [a.outcome for a in unknown.attempts.all()] == ["uncertain"]

    admin = as_user(*ADMIN)
    unknown_page = text(admin.get("/console/operations/unknown/"))
    assert re.findall(r'id="op-(op_[A-Za-z0-9]+)"', unknown_page) == [unknown.id]

    operator = as_user(*OPERATOR)
    queue = text(operator.get("/console/"))
    approvals = list(dict.fromkeys(APPROVAL_LINK.findall(queue)))
    pending = ApprovalRequest.objects.filter(state="pending")
    assert sorted(approvals) == sorted(pending.values_list("id", flat=True))
    assert len(approvals) == 4
    assert queue.count("badge-large") == 1
    pages = {approval: text(operator.get(f"/console/approvals/{approval}/"))
             for approval in approvals}
    large = [a for a, page in pages.items() if "badge-large" in page]
    stale = [a for a, page in pages.items() if "can no longer run" in page]
    assert len(large) == 1
    assert pending.get(id=large[0]).proposal.operation == "payments.transfer"
    assert len(stale) == 1
    assert pending.get(id=stale[0]).proposal.operation == "email.send"


def test_a_second_run_adds_nothing_and_keeps_the_token(
    destinations: Destinations, tmp_path: Path,
) -> None:
    token_file = tmp_path / "demo" / "agent-token"
    first = seed_demo(token_file, "--agents")
    counts = (ApprovalRequest.objects.count(), Operation.objects.count(),
              Execution.objects.count(), Principal.objects.count())
    second = seed_demo(token_file, "--agents")
    assert token_of(second) == token_of(first) == token_file.read_text().strip()
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert (ApprovalRequest.objects.count(), Operation.objects.count(),
            Execution.objects.count(), Principal.objects.count()) == counts
    executions: Any = re.findall(r"execution: (exe_\S+)$", first, re.M)
    assert len(executions) == 2
    assert re.findall(r"execution: (exe_\S+)$", second, re.M) == executions
    agent = token_authenticate(token_of(second))
    assert agent is not None
    assert agent.name == "support-bot"


def test_a_lost_token_file_gets_a_new_token(destinations: Destinations, tmp_path: Path) -> None:
    token_file = tmp_path / "agent-token"
    first = token_of(seed_demo(token_file, "--no-proposals"))
    token_file.unlink()
    second = token_of(seed_demo(token_file, "--no-proposals"))
    assert second != first
    assert token_file.read_text().strip() == second


@pytest.fixture
def demo_rules(settings: Any) -> Iterator[None]:
    """The demo's deployment rule, as scripts/run.sh exports it (demo/approval_rules.json)."""
    from dispatch.runtime import get_runtime

    settings.APPROVAL_RULES = json.loads(APPROVAL_RULES_FILE.read_text())
    get_runtime.cache_clear()
    yield
    settings.APPROVAL_RULES = []
    get_runtime.cache_clear()


@pytest.mark.usefixtures("demo_rules")
def test_the_demo_shows_a_four_eyes_payment_mails_its_approvers_and_pays_after_two_votes(
    destinations: Destinations, tmp_path: Path, as_user: Callable[[str, str], Browser],
    django_capture_on_commit_callbacks: Any, settings: Any,
) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the worker's run, in process
    printed = seed_demo(tmp_path / "token")
    assert f"{SECOND_OPERATOR[0]} / {SECOND_OPERATOR[1]}" in printed
    large = ApprovalRequest.objects.get(proposal__operation="payments.transfer",
                                        proposal__arguments__amount=LARGE_AMOUNT)
    assert large.quorum == 2
    # Every demo human of the approving roles hears of every approval the seed asked for.
    notifications_due(now=timezone.now(), enqueue=False)
    mailed = list_all(destinations.directory)["email"]
    to_people = [m for m in mailed if m["to"] and m["to"][0].endswith("@acme.example")]
    asked = ApprovalRequest.objects.count()
    assert sorted(to["to"][0] for to in to_people) == sorted(
        f"{name}@acme.example" for (name, _), _ in PEOPLE for _ in range(asked))
    assert any(f"/console/approvals/{large.id}/" in m["body"] for m in to_people)

    first = as_user(*OPERATOR)
    page = text(first.get(f"/console/approvals/{large.id}/"))
    assert 'id="vote-progress">0 of 2 approvals<' in page
    decide(first, large)
    large.refresh_from_db()
    assert large.state == "pending"  # one of two: no permit, nothing runs
    assert 'id="vote-progress">1 of 2 approvals<' in text(
        first.get(f"/console/approvals/{large.id}/"))
    assert not list_all(destinations.directory)["bank"]
    # The seed proposed it with dispatch_on_approval: the second vote's commit hands it to the
    # worker, which pays it; nobody has to dispatch it by hand.
    with django_capture_on_commit_callbacks(execute=True):
        decide(as_user(*SECOND_OPERATOR), large)
    large.refresh_from_db()
    assert large.state == "granted"
    [operation] = Operation.objects.filter(proposal=large.proposal)
    assert operation.state == "completed"
    [paid] = list_all(destinations.directory)["bank"]
    assert (paid["to_account"], paid["amount"]) == ("acct-supplier-17", LARGE_AMOUNT)


def decide(browser: Browser, approval: ApprovalRequest) -> None:
    response = browser.post(f"/console/approvals/{approval.id}/decide/", {
        "decision": "grant", "digest": approval.proposal.digest})
    assert response.status_code in (200, 302), response.status_code
