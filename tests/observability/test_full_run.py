"""A full run as production runs it (docs/design.md#running): gunicorn and a real Celery worker
on Redis, the real destinations, an agent proposing an email and a payment over HTTP, a human
logging in to the console and approving both with a personal token, the worker sending them.

Afterwards every line either process wrote is a JSON object with its fields, the lines of a
request carry its id (and the caller's tenant and principal once authenticated), the worker's
lines of an operation carry its proposal and operation ids; and no token, permit id, password or
argument value used anywhere in the run appears in any line. /metrics then shows each series of
docs/design.md#running with the run's values."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dispatch.services.principals import token_issue
from exact_console import Client, Denied
from tests.conftest import MAILBOX, World
from tests.support.destinations import Destinations
from tests.support.metrics import samples, value
from tests.support.processes import child_env
from tests.support.web import WebServer
from tests.support.workers import WorkerPool, worker_pool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.slow]

METRICS_TOKEN = "metrics-token-Vx81qPz"
WRONG_PASSWORD = "not-the-password-Kq3"
EMAIL = {"from": MAILBOX, "to": ["quokka.recipient@example.com"],
         "subject": "Refund-subject-Zb71", "body": "Refund body narwhal-9931 for you."}
TRANSFER = {"from_account": "acct-001", "to_account": "acct-999", "amount": "1234.56",
            "currency": "EUR", "memo": "memo-zebra-7781"}
#: Argument values looked for in the logs: all of them but the currency, whose three capital
#: letters can occur by chance inside a random id.
VALUES = [*EMAIL["to"], EMAIL["from"], EMAIL["subject"], "narwhal-9931",
          TRANSFER["from_account"], TRANSFER["to_account"], TRANSFER["amount"], TRANSFER["memo"]]
SETTLE = 60


@dataclass
class Run:
    web: WebServer
    pool: WorkerPool
    secrets: list[str]
    operations: list[str]
    proposals: list[str]


@pytest.fixture
def run(live: World, destinations: Destinations, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    monkeypatch.setenv("LOG_FORMAT", "json")  # the test settings' DEBUG would choose console
    with worker_pool(tmp_path) as pool:
        pool.start()
        env = child_env(CELERY_BROKER_URL=pool.broker, CELERY_QUEUE=pool.queue,
                        LOG_FORMAT="json", LOG_LEVEL="INFO", METRICS_TOKEN=METRICS_TOKEN)
        web = WebServer(env=env, log=tmp_path / "web.log")
        web.start()
        try:
            yield act(live, web, pool)
        finally:
            web.stop()
            pool.stop_all()


def act(world: World, web: WebServer, pool: WorkerPool) -> Run:
    operator_token = token_issue(principal=world.approver)
    secrets = [world.owner_token, operator_token, "approver-pw", WRONG_PASSWORD, METRICS_TOKEN]
    operations, proposals = [], []
    with Client(web.url, world.owner_token, timeout=60) as agent, \
            Client(web.url, operator_token, timeout=60) as operator:
        draft = agent.create_resource("email_draft", EMAIL)
        email = agent.propose("email.send", {"draft": {"id": draft["id"], "revision": 1}})
        payment = agent.propose("payments.transfer", TRANSFER)

        # The human logs in to the console (a wrong password first) and reads the queue.
        with httpx.Client(base_url=web.url, timeout=60) as browser:
            for password in (WRONG_PASSWORD, "approver-pw"):
                form = browser.get("/accounts/login/")
                csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
                assert csrf is not None
                browser.post("/accounts/login/", data={
                    "csrfmiddlewaretoken": csrf.group(1), "username": "approver",
                    "password": password})
            queue = browser.get("/console/")
            assert queue.status_code == 200
            assert email["approval"]["id"] in queue.text

        for proposal in (email, payment):
            decision = operator.decide(proposal["approval"]["id"], decision="grant",
                                       digest=proposal["digest"], reason="checked")
            secrets.append(decision["permit_id"])
            dispatched = agent.dispatch(proposal["id"], permit=decision["permit_id"])
            done = agent.wait_for_outcome(dispatched["operation_id"], timeout=SETTLE)
            assert done["state"] == "completed", done
            operations.append(done["id"])
            proposals.append(proposal["id"])
            with pytest.raises(Denied) as again:
                agent.dispatch(proposal["id"], permit=decision["permit_id"])
            assert again.value.code == "permit_claimed"
    return Run(web, pool, secrets, operations, proposals)


def lines_of(text: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"a line that is not JSON: {line!r}")
        assert isinstance(record, dict), line
        assert {"timestamp", "level", "logger", "event"} <= set(record), record
        found.append(record)
    return found


def test_a_full_run_logs_json_lines_with_ids_and_never_a_secret_or_a_value(run: Run) -> None:
    status, scraped = run.web.get("/metrics", {"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert status == 200
    run.web.stop()
    run.pool.stop_all()
    web_text = run.web.log.read_text()
    worker_text = "".join(worker.output() for worker in run.pool.workers)

    for secret in [*run.secrets, *VALUES]:
        assert secret not in web_text, f"{secret!r} is in the web log"
        assert secret not in worker_text, f"{secret!r} is in the worker log"

    web, worker = lines_of(web_text), lines_of(worker_text)
    served = [r for r in web if not r["logger"].startswith(("gunicorn.", "py.warnings"))]
    assert all(r.get("request_id") for r in served), served  # Django's own lines too
    assert any(r["logger"] == "django.request" for r in served)  # the 409s
    requests = [r for r in web if r["logger"] == "console.request"]
    assert len(requests) > 10
    assert all(re.fullmatch(r"[0-9a-f]{32}", r["request_id"]) for r in requests)
    assert len({r["request_id"] for r in requests}) == len(requests)
    assert all("?" not in r["path"] for r in requests)
    api = [r for r in requests if r["path"].startswith("/api/v1/") and r["status"] < 400]
    assert api and all(r["tenant"].startswith("ten_") and r["principal"].startswith("prn_")
                       for r in api)
    console = [r for r in requests if r["path"] == "/console/" and r["status"] == 200]
    assert console and all(r["principal"].startswith("prn_") for r in console)
    claims = [r for r in web if r["event"] == "claimed"]
    assert sorted(r["operation_id"] for r in claims) == sorted(run.operations)
    assert all(r["proposal_id"] in run.proposals and r["request_id"] for r in claims)

    attempts = [r for r in worker if r["event"].startswith("attempt 1 of ")]
    assert sorted(r["operation_id"] for r in attempts) == sorted(run.operations)
    assert sorted(r["proposal_id"] for r in attempts) == sorted(run.proposals)
    # The request that dispatched it is named on the worker's lines too.
    claim_requests = {r["operation_id"]: r["request_id"] for r in claims}
    assert all(r["request_id"] == claim_requests[r["operation_id"]] for r in attempts)

    found = samples(scraped.decode())
    assert value(found, "console_claims_total") == 2
    assert value(found, "console_attempt_outcomes_total", outcome="completed") == 2
    assert value(found, "console_denials_total", code="permit_claimed") == 2
    assert value(found, "console_unknown_operations") == 0
    assert value(found, "console_pending_approvals", age_bucket="under_5m") == 0
    assert value(found, "console_approval_to_dispatch_seconds_count") == 2
    assert value(found, "console_approval_to_dispatch_seconds_bucket", le="+Inf") == 2
    assert value(found, "console_approval_to_dispatch_seconds_sum") > 0
    assert value(found, "console_celery_queue_depth", queue=run.pool.queue) == 0
