"""The sealed audit's fixtures: fixed signing keys, no sealing lag, a checkpoint log of the test's
own, a tenant with three sealed blocks of five events each."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from dispatch import signing
from dispatch.models import AuditEvent
from dispatch.services.audit import audit_record
from dispatch.services.sealer import seal_tenant
from tests.audit.test_keys import KEYS
from tests.conftest import World, make_world

__all__ = ["KEYS", "add_events", "verify_fails_naming"]


@pytest.fixture(autouse=True)
def _seal_keys(tmp_path: Path) -> Iterator[None]:
    signing.signing_keys.cache_clear()
    with override_settings(SIGNING_KEYS=KEYS, AUDIT_SEAL_LAG=0,
                           AUDIT_CHECKPOINT_DIR=str(tmp_path / "checkpoints")):
        yield
    signing.signing_keys.cache_clear()


def add_events(world: World, count: int, at: datetime) -> None:
    for n in range(count):
        audit_record(tenant_id=world.owner.tenant.id, kind="test.event", actor="tester",
                     at=at + timedelta(microseconds=n), details={"n": n, "note": "é"})


def verify_fails_naming(world: World, words: str) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("audit_verify", "--tenant", world.owner.tenant.name)
    assert raised.value.returncode == 1
    assert words in str(raised.value), str(raised.value)


@pytest.fixture
def sealed(db: None, now: datetime) -> World:
    """A tenant with three sealed blocks of 5 events each."""
    world = make_world(now)
    AuditEvent.objects.all().delete()  # the world's own events are sealed like any other
    for block in range(3):
        add_events(world, 5, now - timedelta(minutes=10 - block))
        assert seal_tenant(world.owner.tenant.id) == 5
    call_command("audit_verify", "--tenant", world.owner.tenant.name)
    return world


