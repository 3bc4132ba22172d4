"""The chaos soak's principals, made in the private stack's database through the services
(run as a child with the stack's environment: `python -m bench.chaos_world setup N` prints them
as JSON; `python -m bench.chaos_world revoke AGENT` revokes every grant of one agent and prints
the instant of the revocation).

Setup is the host's side (the authorization service issues root grants); everything after it
goes through the REST API, except a revocation, which is the host's too (`manage.py revoke`).
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from typing import Any

TENANT = "chaos"
MAILBOX = "support@acme.example"
ACCOUNT = "acct-001"
TOPIC = "bees"
AGENT_TOOLS = ["email.send", "payments.transfer", "crm.lookup", "research.fetch",
               "evidence.attest", "report.publish"]
PASSWORD = "chaos-operator-pw"


def _grants(agent: Any, now: Any) -> list[str]:
    from dispatch.services.authority import grant_issue

    start = now - timedelta(minutes=1)
    scopes: list[tuple[list[str], dict[str, Any]]] = [
        (["email.send"], {"mailbox": [MAILBOX]}),
        (["payments.transfer"], {"account": [ACCOUNT]}),
        (["crm.lookup"], {"customer": "*"}),
        (["research.fetch", "evidence.attest", "report.publish"], {"topic": [TOPIC]}),
    ]
    return [grant_issue(issuer="admin", subject=agent, operations=ops, scope=scope,
                        now=start).id for ops, scope in scopes]


def setup(agents: int) -> dict[str, Any]:
    from django.utils import timezone

    from dispatch.services.principals import agent_create, human_create

    now = timezone.now()
    made: dict[str, Any] = {"agents": [], "operators": [], "admin": None, "prober": None}
    for n in range(agents):
        agent, token = agent_create(name=f"agent{n}", tenant=TENANT, tools=AGENT_TOOLS)
        made["agents"].append({"name": agent.name, "id": agent.id, "token": token,
                               "grants": _grants(agent, now)})
    prober, token = agent_create(name="prober", tenant=TENANT, tools=AGENT_TOOLS)
    made["prober"] = {"name": "prober", "id": prober.id, "token": token,
                      "grants": _grants(prober, now)}
    for name in ("olive", "otto"):
        human, token = human_create(name=name, tenant=TENANT, role="operator",
                                    password=PASSWORD)
        made["operators"].append({"name": name, "id": human.id, "token": token})
    admin, token = human_create(name="ada", tenant=TENANT, role="admin", password=PASSWORD)
    made["admin"] = {"name": "ada", "id": admin.id, "token": token}
    return made


def revoke(agent_name: str) -> dict[str, Any]:
    from django.utils import timezone

    from dispatch.models import Grant
    from dispatch.services.authority import grant_revoke_tree

    revoked = []
    at = timezone.now()
    for grant in Grant.objects.filter(subject__name=agent_name, parent__isnull=True,
                                      revoked_at__isnull=True):
        at = timezone.now()
        revoked.append(grant_revoke_tree(grant=grant, actor_name="chaos", now=at).id)
    return {"agent": agent_name, "revoked": revoked, "at": at.isoformat()}


def main(argv: list[str]) -> int:
    import django

    django.setup()
    if argv[0] == "setup":
        print(json.dumps(setup(int(argv[1]))))
    elif argv[0] == "revoke":
        print(json.dumps(revoke(argv[1])))
    else:
        raise SystemExit(f"unknown command {argv[0]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
