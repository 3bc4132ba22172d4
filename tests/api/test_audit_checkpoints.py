"""`GET /api/v1/audit/checkpoints/` (docs/audit-seal.md#checkpoints): a tenant's signed
checkpoints, latest first, for its admins only: what an outside witness keeps."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dispatch.services.audit import audit_record
from dispatch.services.sealer import seal_all
from tests.api.conftest import Caller, assert_error
from tests.audit.test_keys import KEYS
from tests.conftest import World


@pytest.fixture
def sealing(settings: Any, tmp_path: Path) -> Path:
    settings.SIGNING_KEYS = KEYS
    settings.AUDIT_SEAL_LAG = 0
    settings.AUDIT_CHECKPOINT_DIR = str(tmp_path / "checkpoints")
    return tmp_path / "checkpoints"


@pytest.mark.usefixtures("tokens")  # every principal exists before the passes
def test_checkpoints_are_for_the_tenants_admins_latest_first(
        caller: Callable[[str | None], Caller], world: World, sealing: Path) -> None:
    tenant = world.owner.tenant_id
    for n in range(3):  # after the world's own events, each sealed in a pass of its own
        audit_record(tenant_id=tenant, kind="test.event", actor="tester",
                     at=world.now + timedelta(seconds=n + 1), details={"n": n})
        assert seal_all(now=world.now + timedelta(seconds=n + 2)) > 0
    logged = [json.loads(line) for line in
              (sealing / f"{tenant}.jsonl").read_text().splitlines()]
    assert len(logged) >= 3
    answer = caller("admin").get("audit/checkpoints/")
    assert answer.status_code == 200, answer.content
    assert answer.json()["results"] == logged[::-1]
    paged = caller("admin").get("audit/checkpoints/", page_size=1).json()
    assert paged["results"] == logged[-1:]
    assert paged["next"]
    for who in ("owner", "approver", "outsider", "outsider_operator"):
        assert_error(caller(who).get("audit/checkpoints/"), 403, "role_required")
    assert_error(caller(None).get("audit/checkpoints/"), 401, "unauthenticated")
    theirs = caller("outsider_admin").get("audit/checkpoints/").json()["results"]
    assert all(c["tenant"] == world.outsider.tenant_id for c in theirs)
    assert not [c for c in theirs if c["tenant"] == tenant]


def test_the_schema_describes_the_checkpoints(caller: Callable[[str | None], Caller]) -> None:
    schema = caller(None).client.get("/api/v1/schema/?format=json").json()
    get = schema["paths"]["/api/v1/audit/checkpoints/"]["get"]
    assert get["operationId"] == "audit_checkpoints_list"
    assert {"200", "403"} <= set(get["responses"])
