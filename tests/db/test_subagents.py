"""A delegated step's sub-agent is reachable by nobody else (docs/design.md#delegation): no grant
names it as subject but its step's, no command runs as it, no list offers it, and it acts only under
its own step's grant. Its existence does not leak: it is `not_found`, as a name naming nobody."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from dispatch.models import Grant, Principal
from dispatch.selectors.principals import principal_list
from dispatch.services.authority import grant_delegate, grant_issue
from dispatch.services.principals import agent_create
from dispatch.services.proposals import proposal_create
from dispatch.workflows import run_workflow
from protocols.denials import Denial
from tests.conftest import World
from tests.support.delegation import (
    checked,
    delegated_workflow,
    lookup,
    only_delegation,
    script,
    scripted,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def sub(world: World) -> Principal:
    """The sub-agent of a finished delegated step (its grant revoked when the step ended)."""
    result = run_workflow(checked(delegated_workflow(budget=1)), principal=world.owner,
                          agents=scripted(lookup()), now=world.now)
    assert result.state == "finished"
    principal = only_delegation().principal
    assert principal.subagent
    return principal


def refused(call: object) -> str:
    assert callable(call)
    with pytest.raises(Denial) as denial:
        call()
    return denial.value.code.value


def test_nobody_delegates_to_a_sub_agent(world: World, sub: Principal) -> None:
    other, _ = agent_create(name="other", tenant="acme", tools=["crm.lookup"])
    root = grant_issue(issuer="admin", subject=other, operations=["crm.lookup"],
                       scope={"customer": "*"}, now=world.now)
    assert refused(lambda: grant_delegate(
        actor=other, grant_id=root.id, subject_name=sub.name, operations=["crm.lookup"],
        scope={"customer": "*"}, expires_at=None, now=timezone.now())) == "not_found"
    assert not Grant.objects.filter(subject=sub, parent=root).exists()


def test_no_root_grant_names_a_sub_agent(world: World, sub: Principal) -> None:
    for issuer in ("manage.py", world.admin):
        assert refused(lambda issuer=issuer: grant_issue(  # type: ignore[misc]
            issuer=issuer, subject=sub, operations=["crm.lookup"], scope={"customer": "*"},
            now=world.now)) == "not_found"
    with pytest.raises(CommandError, match="no principal named"):
        call_command("grant", sub.name, "crm.lookup", "--scope", "customer=*",
                     stdout=io.StringIO())
    assert Grant.objects.filter(subject=sub).count() == 1  # its step's, alone


def test_a_sub_agent_is_listed_nowhere(world: World, sub: Principal) -> None:
    assert sub not in principal_list(viewer=world.admin)
    assert sub not in principal_list(viewer=world.admin, kind="agent")


def test_no_command_runs_as_a_sub_agent(
    world: World, sub: Principal, tmp_path: Path,
) -> None:
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps({**script(lookup()), "agent": sub.name}))
    with pytest.raises(CommandError, match="no agent named"):
        call_command("run_agent", str(script_file), "--inline", stdout=io.StringIO())
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text(delegated_workflow())
    with pytest.raises(CommandError, match="no agent named"):
        call_command("run_workflow", str(workflow), "--agent", sub.name, stdout=io.StringIO())


def test_a_sub_agent_acts_only_under_its_own_steps_grant(world: World, sub: Principal) -> None:
    # A grant naming it that did not come from its step (written before sub-agents were
    # refused as subjects, or by hand) gives it nothing: its step's grant, revoked, is all.
    Grant.objects.create(tenant_id=sub.tenant_id, issuer="manage.py", subject=sub,
                         operations=["crm.lookup"], scope={"customer": "*"},
                         not_before=world.now)
    for customer, code in (("cus-001", "authority_revoked"), ("cus-002", "scope_violation")):
        assert refused(lambda customer=customer: proposal_create(  # type: ignore[misc]
            principal=sub, operation="crm.lookup", arguments={"customer_id": customer},
            now=timezone.now())) == code
