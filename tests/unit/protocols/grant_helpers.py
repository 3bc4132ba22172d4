"""What the grant tests share: a fixed instant and clock, grants drawn with defaults, and
`authorize` called with the owner's usual request."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from protocols.denials import Denial
from protocols.grants import (
    Grant,
    Policy,
    authorize,
    parse_scope,
)

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SUPPORT = "support@acme.example"
SALES = "sales@acme.example"
TOOLS = frozenset({"email.send", "payments.transfer", "crm.lookup"})
SEND_EFFECTS = frozenset({"external_write"})


def at(minutes: int) -> datetime:
    return NOW + timedelta(minutes=minutes)


@dataclass
class FixedClock:
    """An injectable clock: it only moves when told to."""

    now: datetime = NOW

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


def make_grant(
    *,
    id: str = "grt_owner",
    issuer: str = "admin",
    subject: str = "owner",
    operations: Iterable[str] = ("email.send",),
    scope: Mapping[str, Any] | None = None,
    not_before: datetime | None = None,
    expires_at: datetime | None = None,
    revoked_at: datetime | None = None,
    parent_id: str | None = None,
) -> Grant:
    return Grant(
        id=id,
        issuer=issuer,
        subject=subject,
        operations=frozenset(operations),
        scope=parse_scope({"mailbox": [SUPPORT]} if scope is None else scope),
        not_before=not_before,
        expires_at=expires_at,
        revoked_at=revoked_at,
        parent_id=parent_id,
    )


def check(
    grants: Iterable[Grant],
    *,
    subject: str = "owner",
    operation: str = "email.send",
    effects: frozenset[str] = SEND_EFFECTS,
    selected: Mapping[str, str] | None = None,
    tool_set: frozenset[str] = TOOLS,
    policy: Policy | None = None,
    now: datetime = NOW,
) -> Grant:
    return authorize(
        grants=grants,
        subject=subject,
        operation=operation,
        effects=effects,
        selected={"mailbox": SUPPORT} if selected is None else selected,
        tool_set=tool_set,
        policy=Policy.permissive() if policy is None else policy,
        now=now,
    )


def denial_of(grants: Iterable[Grant], **kwargs: Any) -> Denial:
    with pytest.raises(Denial) as caught:
        check(grants, **kwargs)
    return caught.value
