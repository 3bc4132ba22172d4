"""A pending v1 action runs with v1's handler after v2 is registered (docs/design.md#extensions)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import pytest

from demo.contracts import email_send
from demo.destinations.runner import list_all
from dispatch.handlers import HandlerContext
from dispatch.runtime import get_runtime
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.runtime import ChangedEmailSendHandler

pytestmark = pytest.mark.django_db


class V2Handler(ChangedEmailSendHandler):
    ran: ClassVar[list[str]] = []

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        self.ran.append(ctx.operation_id)
        return super().perform(ctx)


def test_a_v1_approval_dispatches_and_runs_v1_after_v2_is_registered(
    live: World, destinations: Destinations,
) -> None:
    proposal, _ = live.approved_email()
    get_runtime.cache_clear()
    runtime = get_runtime()
    handler = V2Handler()
    V2Handler.ran = []
    runtime.register(replace(email_send(handler.implementation_fingerprint),
                             contract_version=2), handler)
    try:
        assert runtime.contract("email.send").contract_version == 2
        operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                      now=live.now, enqueue=False)
        assert operation_execute(operation_id=operation.id).state == "completed"
        assert V2Handler.ran == []
        assert len(list_all(destinations.directory)["email"]) == 1
        # A new proposal is made under v2, and v2's handler runs it.
        newer, _ = live.approved_email(to=["second@example.com"])
        assert newer.contract_fingerprint == runtime.contract("email.send").fingerprint
        operation = proposal_dispatch(principal=live.owner, proposal_id=newer.id,
                                      now=live.now, enqueue=False)
        assert operation_execute(operation_id=operation.id).state == "completed"
        assert V2Handler.ran == [operation.id]
    finally:
        get_runtime.cache_clear()
