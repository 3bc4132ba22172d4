"""Operations claimed the way the dispatcher claims them, for tests of what happens after, and
the refusal a call raises."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from dispatch.models import Operation
from dispatch.services.dispatcher import proposal_dispatch
from protocols.denials import Denial
from tests.conftest import World

LATER = timedelta(seconds=16)  # past the demo contracts' 15 s timeout


def claimed_transfer(world: World, **extra: Any) -> Operation:
    """A granted transfer, dispatched: its operation claimed, nothing enqueued."""
    proposal = world.propose_transfer(**extra)
    world.grant(proposal)
    return proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                             enqueue=False)


def refused(call: Callable[..., Any], **kwargs: Any) -> Denial:
    """The denial `call(**kwargs)` raises (the test fails if it raises none)."""
    with pytest.raises(Denial) as caught:
        call(**kwargs)
    return caught.value
