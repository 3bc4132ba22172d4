from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django.utils import timezone

from dispatch.models import Principal
from dispatch.services.authority import grant_issue
from dispatch.services.principals import agent_create, human_create, token_issue
from dispatch.services.proposals import proposal_create
from dispatch.services.resources import resource_create

TENANT = "acme"
AGENT = "support-bot"
OPERATOR = ("olive", "olive-demo-pw")
ADMIN = ("adam", "adam-demo-pw")


class Command(BaseCommand):
    help = ("Create the demo tenant 'acme': an agent with grants for the three demo "
            "contracts, an operator and an admin login, and a few proposals waiting for "
            "approval. Safe to run again: existing principals are kept and the agent gets a "
            "fresh token. Prints the logins and the agent token.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000/console/")
        parser.add_argument("--no-proposals", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        now = timezone.now()
        with transaction.atomic():
            agent = Principal.objects.filter(name=AGENT).first()
            if agent is None:
                agent, token = agent_create(
                    name=AGENT, tenant=TENANT,
                    tools=["email.send", "payments.transfer", "crm.lookup"])
                grant_issue(issuer="seed_demo", subject=agent, operations=["email.send"],
                            scope={"mailbox": ["support@acme.example"]}, now=now)
                grant_issue(issuer="seed_demo", subject=agent, operations=["payments.transfer"],
                            scope={"account": ["acct-001", "acct-002"]}, now=now)
                grant_issue(issuer="seed_demo", subject=agent, operations=["crm.lookup"],
                            scope={"customer": "*"}, now=now)
                for (name, password), role in ((OPERATOR, "operator"), (ADMIN, "admin")):
                    human_create(name=name, tenant=TENANT, role=role, password=password)
            else:
                token = token_issue(principal=agent)
        if not opts["no_proposals"]:
            self._proposals(agent)
        self.stdout.write(
            f"Console: {opts['url']}\n"
            f"Operator login: {OPERATOR[0]} / {OPERATOR[1]}\n"
            f"Admin login:    {ADMIN[0]} / {ADMIN[1]}\n"
            f"Agent '{AGENT}' bearer token: {token}\n"
        )

    def _proposals(self, agent: Principal) -> None:
        now = timezone.now()
        draft, _ = resource_create(principal=agent, kind="email_draft", now=now, payload={
            "from": "support@acme.example", "to": ["customer@example.com"],
            "subject": "Your refund of order #1042",
            "body": "Hello,\n\nWe have refunded EUR 49.90 to your card.\n\nAcme support"})
        proposal_create(principal=agent, operation="email.send", now=now,
                        arguments={"draft": {"id": draft.id, "revision": 1}})
        proposal_create(principal=agent, operation="payments.transfer", now=now, arguments={
            "from_account": "acct-001", "to_account": "acct-778", "amount": "49.9",
            "currency": "EUR", "memo": "refund order 1042"})
