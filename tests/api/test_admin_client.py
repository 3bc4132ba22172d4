"""The approvals list and the admin API with the Python client (`exact_console`), sync and async,
over HTTP against a live server; and the chat approver of docs/rest-api.md#admin, run as
written."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dispatch.models import ApprovalRequest
from dispatch.services.principals import token_issue
from exact_console import AsyncClient, Client, Denied
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def chat_approver() -> Callable[[Client, Callable[[str], str | None]], None]:
    """`approve_in_chat` as docs/rest-api.md#admin writes it."""
    text = (ROOT / "docs" / "rest-api.md").read_text(encoding="utf-8")
    section = text[text.index('<a id="admin"></a>'):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), "docs/rest-api.md", "exec"), namespace)
    found: Callable[[Client, Callable[[str], str | None]], None] = namespace["approve_in_chat"]
    return found


def test_the_documented_chat_approver_decides_from_the_list(
    live_server: Any, world: World, capsys: pytest.CaptureFixture[str],
) -> None:
    proposals = [world.propose_email(world.draft(subject=subject))
                 for subject in ("Grant me", "Deny me", "Ask me later")]
    answers = {"Grant me": "grant", "Deny me": "deny"}
    asked: list[str] = []

    def ask(text: str) -> str | None:
        asked.append(text)
        return next((said for subject, said in answers.items() if subject in text), None)

    with Client(live_server.url, token_issue(principal=world.approver)) as console:
        chat_approver()(console, ask)
    assert len(asked) == 3
    assert asked[0].startswith("owner: Email customer@example.com")
    assert asked[0].endswith("(0 of 1 approvals)")
    states = [ApprovalRequest.objects.get(id=p.approval.id).state for p in proposals]
    assert states == ["granted", "denied", "pending"]
    assert capsys.readouterr().out == ""  # nothing was refused


def test_an_admin_provisions_with_the_client(live_server: Any, world: World,
                                             eager: None) -> None:
    with Client(live_server.url, token_issue(principal=world.admin)) as admin:
        created = admin.create_agent("lookup-bot", tools=["crm.lookup"])
        assert set(created) == {"id", "name", "token"}
        with Client(live_server.url, created["token"]) as agent:
            with pytest.raises(Denied) as missing:
                agent.propose("crm.lookup", {"customer_id": "cus-002"})
            assert missing.value.code == "authority_missing"

            grant = admin.create_grant("lookup-bot", "crm.lookup", scope={"customer": "*"})
            assert (grant["subject"], grant["operations"]) == ("lookup-bot", ["crm.lookup"])
            proposal = agent.propose("crm.lookup", {"customer_id": "cus-002"})

            pause = admin.pause(operation="crm.lookup", agent="lookup-bot", reason="checking")
            assert pause["scope"] == "contract crm.lookup of agent lookup-bot"
            with pytest.raises(Denied) as paused:
                agent.dispatch(proposal["id"])
            assert paused.value.code == "paused"
            assert admin.resume(pause["id"]) is None
            dispatched = agent.dispatch(proposal["id"])
            assert agent.wait_for_outcome(dispatched["operation_id"],
                                          timeout=30)["state"] == "completed"

            rotated = admin.rotate_agent_token(created["id"])
            with pytest.raises(Denied) as stopped:
                agent.contracts()
            assert stopped.value.code == "unauthenticated"
        with Client(live_server.url, rotated["token"]) as agent:
            assert agent.contracts()["results"]
            assert admin.revoke_grant(grant["id"]) is None
            with pytest.raises(Denied) as revoked:
                agent.propose("crm.lookup", {"customer_id": "cus-002"})
            assert revoked.value.code == "authority_revoked"


def test_the_async_client_lists_reads_and_provisions(live_server: Any, world: World) -> None:
    proposal = world.propose_email(world.draft())
    admin_token = token_issue(principal=world.admin)
    operator_token = token_issue(principal=world.approver)

    async def main() -> None:
        async with AsyncClient(live_server.url, operator_token) as operator:
            page = await operator.approvals(page_size=1)
            assert [item["id"] for item in page["results"]] == [proposal.approval.id]
            assert await operator.next_page(page) is None
            one = await operator.approval(proposal.approval.id)
            assert one["canonical"] == proposal.canonical
            with pytest.raises(Denied) as refused:
                await operator.create_agent("nope", tools=[])
            assert refused.value.code == "role_required"
        async with AsyncClient(live_server.url, admin_token) as admin:
            created = await admin.create_agent("async-bot", tools=["crm.lookup"])
            rotated = await admin.rotate_agent_token(created["id"])
            assert rotated["token"] != created["token"]
            grant = await admin.create_grant("async-bot", "crm.lookup",
                                             scope={"customer": ["cus-002"]},
                                             expires_at="2999-01-01T00:00:00Z")
            assert grant["expires_at"] is not None
            assert await admin.revoke_grant(grant["id"]) is None
            pause = await admin.pause()
            assert pause["scope"] == "the tenant"
            assert await admin.resume(pause["id"]) is None
        async with AsyncClient(live_server.url, world.owner_token) as agent:
            with pytest.raises(Denied) as agents_cannot:
                await agent.approvals()
            assert agents_cannot.value.code == "role_required"

    asyncio.run(main())
