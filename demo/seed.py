"""The demo's data (`python manage.py seed_demo`, README "What you see"): the tenant `acme`, its
people and agents, and something on every page of the console.

Made once, through the services as any caller would make it: the first run creates the agent
`support-bot` with its grants, the operator `olive` and the admin `adam`, and leaves

- two refunds waiting for approval (an email and a small payment), which the worker sends
  and pays as soon as an operator approves them (`dispatch_on_approval`);
- a large payment waiting (two approvers under the demo's rule, flagged on the queue), made
  by the worker once both have approved;
- a stale proposal: an email proposed for a draft that the agent edited afterwards, so the
  approval page says it can no longer run;
- an unknown outcome for the admin: an email approved by `olive` and dispatched to the SMTP sink,
  which takes the message and answers 451 without recording it (`no-record.test`). The
  dispatcher records the attempt as uncertain; email is never retried blindly, and the sink's
  lookup finds no trace, which for a mail system proves nothing, so it stays `unknown` until an
  admin decides. It needs the destinations running (`run_destinations`).

A later run changes nothing of that: it finds the agent, and reuses the bearer token kept in the
token file (under `VAR_DIR`, never in the repository) while that token still authenticates the
agent; only a missing or dead one is replaced. With `agents`, the scripted agents'
executions (`demo/agent_script.json`, `demo/research_example.py`) are opened once and found
again, so that a restarted `scripts/run.sh` resumes them instead of proposing anew.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import transaction

from demo import research_example
from dispatch.agent import ScriptedAdapter, execution_open
from dispatch.agent.loop import adapter_fingerprint
from dispatch.models import Execution, Operation, Principal
from dispatch.selectors.contracts import operation_names
from dispatch.services.approvals import approval_decide
from dispatch.services.authority import grant_issue
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.principals import (
    agent_create,
    human_create,
    token_authenticate,
    token_issue,
)
from dispatch.services.proposals import proposal_create
from dispatch.services.resources import resource_create, revision_create
from dispatch.services.worker import operation_execute

__all__ = ["ADMIN", "AGENT", "AGENT_SCRIPT", "APPROVAL_RULES_FILE", "LARGE_AMOUNT", "OPERATOR",
           "PEOPLE", "SECOND_OPERATOR", "TENANT", "Seeded", "seed"]

TENANT = "acme"
AGENT = "support-bot"
OPERATOR = ("olive", "olive-demo-pw")
#: The second pair of eyes: a transfer of 10,000.00 or more needs both operators when the
#: demo's rule is deployed (APPROVAL_RULES from demo/approval_rules.json, as scripts/run.sh does).
SECOND_OPERATOR = ("otto", "otto-demo-pw")
ADMIN = ("adam", "adam-demo-pw")
#: The demo's humans and their roles.
PEOPLE = ((OPERATOR, "operator"), (SECOND_OPERATOR, "operator"), (ADMIN, "admin"))
#: The demo's deployment rule (docs/design.md#approval-policies), for APPROVAL_RULES.
APPROVAL_RULES_FILE = Path(__file__).resolve().parent / "approval_rules.json"
MAILBOX = "support@acme.example"
AGENT_SCRIPT = Path(__file__).resolve().parent / "agent_script.json"
#: The large payment's amount, in euros: far above the demo rule's 10,000.00 EUR
#: (approval_rules.json).
LARGE_AMOUNT = "48500.00"


@dataclass(frozen=True)
class Seeded:
    token: str
    #: Whether this run made the demo (False: it was there and is left as it was).
    created: bool
    #: The email left `unknown` for the admin, when this run made it.
    unknown: Operation | None = None
    #: The scripted agents' executions (with `agents`): support-bot's, then the researcher's.
    executions: tuple[str, str] | None = None


def seed(*, token_file: Path, proposals: bool, agents: bool, sources_url: str,
         now: datetime) -> Seeded:
    """Make the demo once; on a later run find it, and keep the agent's token."""
    with transaction.atomic():
        agent = Principal.objects.filter(name=AGENT, kind=Principal.Kind.AGENT).first()
        created = agent is None
        if agent is None:
            agent, token = _people(now)
        else:
            token = _kept_token(token_file, agent) or token_issue(principal=agent)
    _keep_token(token_file, token)
    unknown = _proposals(agent, now) if created and proposals else None
    executions = (_execution(agent, json.loads(AGENT_SCRIPT.read_text()), now),
                  _execution(research_example.enrol(), research_example.script(sources_url),
                             now)) if agents else None
    return Seeded(token=token, created=created, unknown=unknown, executions=executions)


#: The demo's HTTP action (demo/actions/helpdesk.yaml), when `ACTIONS_DIR` loads it.
TICKETS = "tickets.create"


def _people(now: datetime) -> tuple[Principal, str]:
    tickets = TICKETS in operation_names()
    agent, token = agent_create(name=AGENT, tenant=TENANT,
                                tools=["email.send", "payments.transfer", "crm.lookup",
                                       *([TICKETS] if tickets else [])])
    if tickets:
        grant_issue(issuer="seed_demo", subject=agent, operations=[TICKETS],
                    scope={"queue": ["billing", "support"]}, now=now)
    grant_issue(issuer="seed_demo", subject=agent, operations=["email.send"],
                scope={"mailbox": [MAILBOX]}, now=now)
    grant_issue(issuer="seed_demo", subject=agent, operations=["payments.transfer"],
                scope={"account": ["acct-001", "acct-002"]}, now=now)
    grant_issue(issuer="seed_demo", subject=agent, operations=["crm.lookup"],
                scope={"customer": "*"}, now=now)
    for (name, password), role in PEOPLE:
        # Their approval requests arrive in the demo's SMTP sink
        # (`manage.py destinations --json`).
        human_create(name=name, tenant=TENANT, role=role, password=password,
                     email=f"{name}@acme.example")
    return agent, token



def _kept_token(token_file: Path, agent: Principal) -> str | None:
    """The token the file keeps, if it still authenticates this agent."""
    try:
        token = token_file.read_text().strip()
    except OSError:
        return None
    found = token_authenticate(token) if token else None
    return token if found is not None and found.id == agent.id else None


def _keep_token(token_file: Path, token: str) -> None:
    """Write the token for the next run, readable by its owner only."""
    token_file.parent.mkdir(parents=True, exist_ok=True)
    partial = token_file.with_name(token_file.name + ".partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(token + "\n")
    partial.replace(token_file)


def _email(agent: Principal, now: datetime, *, to: str, subject: str, body: str,
           dispatch_on_approval: bool = False) -> Any:
    draft, _ = resource_create(principal=agent, kind="email_draft", now=now, payload={
        "from": MAILBOX, "to": [to], "subject": subject, "body": body})
    return draft, proposal_create(principal=agent, operation="email.send", now=now,
                                  arguments={"draft": {"id": draft.id, "revision": 1}},
                                  dispatch_on_approval=dispatch_on_approval)


def _transfer(agent: Principal, now: datetime, **arguments: str) -> None:
    """A payment the worker makes once approved (by two operators when it is large)."""
    proposal_create(principal=agent, operation="payments.transfer", now=now,
                    arguments={"currency": "EUR", **arguments}, dispatch_on_approval=True)


def _proposals(agent: Principal, now: datetime) -> Operation:
    _email(agent, now, to="customer@example.com", subject="Your refund of order #1042",
           body="Hello,\n\nWe have refunded EUR 49.90 to your card.\n\nAcme support",
           dispatch_on_approval=True)
    _transfer(agent, now, from_account="acct-001", to_account="acct-778", amount="49.9",
              memo="refund order 1042")
    _transfer(agent, now, from_account="acct-002", to_account="acct-supplier-17",
              amount=LARGE_AMOUNT, memo="invoice 2291, annual support contract")
    _stale(agent, now)
    return _unknown(agent, now)


def _stale(agent: Principal, now: datetime) -> None:
    """A proposal bound to revision 1 of a draft the agent then edited: approving it is
    refused (`stale_revision`), and its page says so."""
    subject = "Your replacement for order #1043"
    body = "Hello,\n\nYour replacement ships on Monday.\n\nAcme support"
    draft, _ = _email(agent, now, to="grace@example.com", subject=subject, body=body)
    revision_create(principal=agent, resource_id=draft.id, base_revision=1, now=now, payload={
        "from": MAILBOX, "to": ["grace@example.com"], "subject": subject,
        "body": body.replace("on Monday", "on Tuesday, a day late")})


def _unknown(agent: Principal, now: datetime) -> Operation:
    """An email approved by the operator and run by the dispatcher, here and now (as
    `run_agent --inline` runs a call), to a recipient whose sink answers 451 and keeps no
    record: its outcome is `unknown`, and no lookup can settle it."""
    _, proposal = _email(agent, now, to="accounts@no-record.test",
                         subject="Copy of invoice 2291",
                         body="Hello,\n\nPlease find the copy of invoice 2291 you asked for."
                              "\n\nAcme support")
    operator = Principal.objects.get(name=OPERATOR[0], kind=Principal.Kind.HUMAN)
    approval_decide(approver=operator, approval_id=proposal.approval.id, decision="grant",
                    digest=proposal.digest, reason="copy of an invoice the customer asked for",
                    now=now)
    operation = proposal_dispatch(principal=agent, proposal_id=proposal.id, now=now,
                                  enqueue=False)
    operation_execute(operation_id=operation.id)
    return Operation.objects.get(id=operation.id)


def _execution(agent: Principal, script: dict[str, Any], now: datetime) -> str:
    """The agent's execution of `script`: the latest one opened with it, or a new one."""
    adapter = ScriptedAdapter(script)
    found = Execution.objects.filter(
        principal=agent, adapter_fingerprint=adapter_fingerprint(adapter),
    ).order_by("-created_at", "-id").values_list("id", flat=True).first()
    return found or execution_open(principal=agent, adapter=adapter, now=now).id
