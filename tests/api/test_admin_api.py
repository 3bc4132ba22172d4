"""The admin API (docs/rest-api.md#admin): what `manage.py` does for a tenant, an admin does with
a personal token, through the same services and audited as the commands are; operators and
agents cannot provision, and another tenant's ids are `not_found`."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from dispatch.models import AuditEvent, Grant, Pause, Principal
from tests.api.conftest import API, Caller, assert_error, schema_errors
from tests.conftest import World

pytestmark = pytest.mark.django_db


def delete(who: Caller, path: str) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {who.token}"} if who.token else {}
    return who.client.delete(API + path, **headers)


def as_token(token: str) -> Caller:
    return Caller(Client(), token)


def new_kinds(since: int) -> list[tuple[str, str]]:
    """(kind, actor) of the audit events written after event `since`."""
    return list(AuditEvent.objects.filter(id__gt=since).order_by("id").values_list(
        "kind", "actor"))


def last_event() -> int:
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()


def lookup(agent: Caller, customer: str = "cus-002") -> Any:
    return agent.post("proposals/", {"operation": "crm.lookup",
                                     "arguments": {"customer_id": customer}})


# --- roles -----------------------------------------------------------------------------------

PROVISIONING = [
    ("POST", "agents/", {"name": "bot", "tools": ["crm.lookup"]}),
    ("POST", "agents/{agent}/token/", None),
    ("POST", "grants/", {"subject": "owner", "operation": "crm.lookup",
                         "scope": {"customer": "*"}}),
    ("DELETE", "grants/{grant}/", None),
    ("POST", "pauses/", {}),
    ("DELETE", "pauses/{pause}/", None),
]


@pytest.mark.parametrize("who", ["owner", "approver", "outsider", "outsider_operator"])
@pytest.mark.parametrize(("method", "path", "body"), PROVISIONING,
                         ids=[f"{m} {p}" for m, p, _ in PROVISIONING])
def test_only_an_admin_provisions(
    caller: Any, world: World, who: str, method: str, path: str, body: Any,
) -> None:
    from dispatch.services.pauses import pause_set

    grant = Grant.objects.filter(subject=world.owner).first()
    assert grant is not None
    pause, _ = pause_set(actor="manage.py", tenant=world.admin.tenant, operation="crm.lookup",
                         now=world.now)
    before = (Principal.objects.count(), Grant.objects.filter(revoked_at=None).count(),
              Pause.objects.filter(lifted_at=None).count(), last_event())
    target = path.format(agent=world.owner.id, grant=grant.id, pause=pause.id)
    someone: Caller = caller(who)
    response = delete(someone, target) if method == "DELETE" else someone.post(target, body)
    assert assert_error(response, 403, "role_required") == {"role": "admin"}
    assert (Principal.objects.count(), Grant.objects.filter(revoked_at=None).count(),
            Pause.objects.filter(lifted_at=None).count(), last_event()) == before


@pytest.mark.parametrize(("method", "path", "body"), PROVISIONING,
                         ids=[f"{m} {p}" for m, p, _ in PROVISIONING])
def test_anonymous_provisioning_is_401(caller: Any, method: str, path: str, body: Any) -> None:
    target = path.format(agent="prn_x", grant="grt_x", pause="pau_x")
    anonymous: Caller = caller(None)
    response = delete(anonymous, target) if method == "DELETE" else anonymous.post(target, body)
    assert_error(response, 401, "unauthenticated")


def test_another_tenants_ids_are_not_found(caller: Any, world: World) -> None:
    from dispatch.services.pauses import pause_set

    admin: Caller = caller("outsider_admin")
    grant = Grant.objects.filter(subject=world.owner).first()
    assert grant is not None
    pause, _ = pause_set(actor="manage.py", tenant=world.admin.tenant, now=world.now)
    for real, forged, path in ((world.owner.id, "prn_" + "Q" * 22, "agents/{}/token/"),):
        seen, made_up = admin.post(path.format(real)), admin.post(path.format(forged))
        assert assert_error(seen, 404, "not_found")["kind"] == "agent"
        assert seen.json()["error"]["message"] == made_up.json()["error"]["message"]
    for real, forged, path in ((grant.id, "grt_" + "Q" * 22, "grants/{}/"),
                               (pause.id, "pau_" + "Q" * 22, "pauses/{}/")):
        seen, made_up = delete(admin, path.format(real)), delete(admin, path.format(forged))
        kind = assert_error(seen, 404, "not_found")["kind"]
        assert assert_error(made_up, 404, "not_found")["kind"] == kind
        assert seen.json()["error"]["message"] == made_up.json()["error"]["message"]
    # A grant to another tenant's principal, a pause of another tenant's agent: nobody there.
    assert_error(admin.post("grants/", {"subject": "owner", "operation": "crm.lookup",
                                        "scope": {"customer": "*"}}), 404, "not_found")
    assert_error(admin.post("pauses/", {"agent": "owner"}), 404, "not_found")
    assert Grant.objects.get(id=grant.id).revoked_at is None
    assert Pause.objects.get(id=pause.id).lifted_at is None


# --- agents and their tokens -------------------------------------------------------------------


def test_an_admin_creates_an_agent_whose_token_works_once_shown(caller: Any,
                                                                world: World) -> None:
    admin: Caller = caller("admin")
    response = admin.post("agents/", {"name": "support-bot", "tools": ["crm.lookup"]})
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == {"id", "name", "token"}
    agent = Principal.objects.get(id=body["id"])
    assert (agent.name, agent.kind, agent.tenant_id, agent.tools) == (
        "support-bot", "agent", world.admin.tenant_id, ["crm.lookup"])
    contracts = as_token(body["token"]).get("contracts/")
    assert contracts.status_code == 200
    assert body["token"] not in str(list(AuditEvent.objects.values_list("details", flat=True)))


def test_agent_creation_refusals(caller: Any, world: World) -> None:
    admin: Caller = caller("admin")
    assert_error(admin.post("agents/", {"name": "bot", "tools": ["no.such"]}), 404,
                 "unknown_operation")
    taken = admin.post("agents/", {"name": "approver", "tools": []})
    assert [e["pointer"] for e in schema_errors(taken)] == ["/name"]
    bad = admin.post("agents/", {"name": "", "tools": "crm.lookup", "extra": 1})
    assert [e["pointer"] for e in schema_errors(bad)] == ["/extra", "/name", "/tools"]
    assert_error(admin.post("agents/", raw=b""), 400, "malformed_request")
    assert not Principal.objects.filter(name="bot").exists()
    with pytest.raises(CommandError, match="schema_invalid: A principal named 'approver' exists"):
        command("create_agent", "approver", "--tenant", "acme")


def test_a_rotated_token_stops_at_once(caller: Any, world: World) -> None:
    admin: Caller = caller("admin")
    created = admin.post("agents/", {"name": "rotating", "tools": ["crm.lookup"]}).json()
    old = as_token(created["token"])
    assert old.get("contracts/").status_code == 200
    rotated = admin.post(f"agents/{created['id']}/token/")
    assert rotated.status_code == 201, rotated.content
    assert set(rotated.json()) == {"token"}
    assert_error(old.get("contracts/"), 401, "unauthenticated")
    assert as_token(rotated.json()["token"]).get("contracts/").status_code == 200
    # A human's id is no agent's: not found, as a forged one.
    assert assert_error(admin.post(f"agents/{world.approver.id}/token/"), 404,
                        "not_found")["kind"] == "agent"


# --- grants ------------------------------------------------------------------------------------


def test_a_grant_made_over_the_api_lets_the_agent_through_until_it_is_revoked(
    caller: Any, world: World,
) -> None:
    admin: Caller = caller("admin")
    created = admin.post("agents/", {"name": "lookup-bot", "tools": ["crm.lookup"]}).json()
    agent = as_token(created["token"])
    assert_error(lookup(agent), 403, "authority_missing")

    response = admin.post("grants/", {"subject": "lookup-bot", "operation": "crm.lookup",
                                      "scope": {"customer": ["cus-002"]},
                                      "expires_at": (world.now.replace(year=2999)).isoformat()})
    assert response.status_code == 201, response.content
    grant = response.json()
    assert set(grant) == {"id", "issuer", "subject", "operations", "scope", "not_before",
                          "expires_at", "revoked_at", "parent_id", "budget"}
    assert (grant["issuer"], grant["subject"], grant["operations"], grant["scope"]) == (
        "admin", "lookup-bot", ["crm.lookup"], {"customer": ["cus-002"]})
    assert grant["expires_at"].startswith("2999-")
    assert lookup(agent).status_code == 201
    assert_error(lookup(agent, "cus-003"), 403, "scope_violation")

    revoked = delete(admin, f"grants/{grant['id']}/")
    assert revoked.status_code == 204, revoked.content
    assert revoked.content == b""
    assert_error(lookup(agent), 403, "authority_revoked")


def test_the_api_revokes_as_manage_py_revoke_does(caller: Any, world: World) -> None:
    """The same refusal for the agent, whichever way the grant was revoked."""
    admin: Caller = caller("admin")
    refusals = []
    for name, via_api in (("by-api", True), ("by-command", False)):
        token = admin.post("agents/", {"name": name, "tools": ["crm.lookup"]}).json()["token"]
        grant = admin.post("grants/", {"subject": name, "operation": "crm.lookup",
                                       "scope": {"customer": "*"}}).json()
        assert lookup(as_token(token)).status_code == 201
        if via_api:
            assert delete(admin, f"grants/{grant['id']}/").status_code == 204
        else:
            assert command("revoke", grant["id"]) == f"revoked {grant['id']}"
        refusals.append(lookup(as_token(token)).json()["error"]["code"])
    assert refusals == ["authority_revoked", "authority_revoked"]


def test_grant_refusals(caller: Any, world: World) -> None:
    admin: Caller = caller("admin")
    assert_error(admin.post("grants/", {"subject": "nobody", "operation": "crm.lookup",
                                        "scope": {}}), 404, "not_found")
    assert_error(admin.post("grants/", {"subject": "owner", "operation": "no.such",
                                        "scope": {}}), 404, "unknown_operation")
    scope = admin.post("grants/", {"subject": "owner", "operation": "crm.lookup",
                                   "scope": {"customer": 7}})
    assert [e["pointer"] for e in schema_errors(scope)] == ["/scope"]
    past = admin.post("grants/", {"subject": "owner", "operation": "crm.lookup",
                                  "scope": {}, "expires_at": "2001-01-01T00:00:00Z"})
    assert schema_errors(past) == [{"pointer": "/expires_at",
                                    "message": "must be in the future"}]
    missing = admin.post("grants/", {"scope": {}})
    assert [e["pointer"] for e in schema_errors(missing)] == ["/operation", "/subject"]


# --- pauses ------------------------------------------------------------------------------------


def test_a_pause_made_over_the_api_blocks_claims_until_it_is_deleted(
    caller: Any, owner: Caller, world: World,
) -> None:
    admin: Caller = caller("admin")
    proposal = lookup(owner).json()
    response = admin.post("pauses/", {"operation": "crm.lookup", "agent": "owner",
                                      "reason": "checking the CRM"})
    assert response.status_code == 201, response.content
    pause = response.json()
    assert set(pause) == {"id", "scope", "operation", "agent", "reason", "paused_by",
                          "paused_at"}
    assert (pause["scope"], pause["operation"], pause["agent"], pause["reason"],
            pause["paused_by"]) == ("contract crm.lookup of agent owner", "crm.lookup", "owner",
                                    "checking the CRM", "admin")
    again = admin.post("pauses/", {"operation": "crm.lookup", "agent": "owner"})
    assert again.status_code == 200  # already paused: the pause in force, unchanged
    assert again.json() == pause

    details = assert_error(owner.post(f"proposals/{proposal['id']}/dispatch/", {}), 403,
                           "paused")
    assert details["pause_id"] == pause["id"]

    resumed = delete(admin, f"pauses/{pause['id']}/")
    assert resumed.status_code == 204, resumed.content
    assert owner.post(f"proposals/{proposal['id']}/dispatch/", {}).status_code == 202
    assert_error(delete(admin, f"pauses/{pause['id']}/"), 404, "not_found")  # lifted


def test_a_whole_tenant_pause_and_its_refusals(caller: Any, world: World) -> None:
    admin: Caller = caller("admin")
    tenant = admin.post("pauses/", {})
    assert tenant.status_code == 201, tenant.content
    assert (tenant.json()["scope"], tenant.json()["operation"], tenant.json()["agent"]) == (
        "the tenant", None, None)
    assert_error(admin.post("pauses/", {"operation": "no.such"}), 404, "unknown_operation")
    assert_error(admin.post("pauses/", {"agent": "approver"}), 404, "not_found")  # no agent
    assert [e["pointer"] for e in schema_errors(admin.post("pauses/", {"agent": 3}))] == [
        "/agent"]


# --- the audit ---------------------------------------------------------------------------------


def test_every_write_is_audited_as_the_command_audits_it(caller: Any, world: World) -> None:
    """Each API write leaves the event kinds its command leaves, under the admin's name where
    the command's say `manage.py`."""
    admin: Caller = caller("admin")

    def by_command(*args: str) -> list[str]:
        since = last_event()
        command(*args)
        return [kind for kind, _ in new_kinds(since)]

    def by_api(send: Any) -> tuple[Any, list[str]]:
        since = last_event()
        response = send()
        assert response.status_code in {200, 201, 204}, response.content
        events = new_kinds(since)
        assert {actor for _, actor in events} <= {"admin"}
        return response, [kind for kind, _ in events]

    agent_kinds = by_command("create_agent", "cmd-bot", "--tenant", "acme", "--tools",
                             "crm.lookup")
    assert agent_kinds == ["agent.created"]
    created, kinds = by_api(lambda: admin.post("agents/", {"name": "api-bot",
                                                           "tools": ["crm.lookup"]}))
    assert kinds == agent_kinds
    # No command rotates a token (a new agent's is its first): the rotation is audited alone,
    # naming the agent, never the token.
    rotated, kinds = by_api(lambda: admin.post(f"agents/{created.json()['id']}/token/"))
    assert kinds == ["agent.token_rotated"]
    rotation = AuditEvent.objects.get(kind="agent.token_rotated")
    assert rotation.details == {"agent_id": created.json()["id"], "name": "api-bot"}
    assert rotated.json()["token"] not in str(rotation.details)

    grant_kinds = by_command("grant", "cmd-bot", "crm.lookup", "--scope", "customer=*")
    assert grant_kinds == ["grant.issued"]
    grant, kinds = by_api(lambda: admin.post("grants/", {
        "subject": "api-bot", "operation": "crm.lookup", "scope": {"customer": "*"}}))
    assert kinds == grant_kinds

    revoke_kinds = by_command("revoke", Grant.objects.get(subject__name="cmd-bot").id)
    assert revoke_kinds == ["grant.revoked"]
    _, kinds = by_api(lambda: delete(admin, f"grants/{grant.json()['id']}/"))
    assert kinds == revoke_kinds

    pause_kinds = by_command("pause", "--tenant", "acme", "--agent", "cmd-bot")
    assert pause_kinds == ["pause.set"]
    paused, kinds = by_api(lambda: admin.post("pauses/", {"agent": "api-bot"}))
    assert kinds == pause_kinds

    resume_kinds = by_command("resume", "--tenant", "acme", "--agent", "cmd-bot")
    assert resume_kinds == ["pause.lifted"]
    _, kinds = by_api(lambda: delete(admin, f"pauses/{paused.json()['id']}/"))
    assert kinds == resume_kinds
    assert created.status_code == 201
