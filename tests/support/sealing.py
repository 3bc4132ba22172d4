"""The child side of the sealing race: each process writes audit events in its own transactions
and runs sealer passes in between, so writers and sealers interleave across processes."""

from __future__ import annotations

from typing import Any


def write_and_seal(env: dict[str, str], tenant_id: str, count: int, barrier: Any,
                   results: Any, index: int) -> None:
    from tests.support.processes import setup_child

    setup_child(env)
    from django.db import connection, transaction
    from django.utils import timezone

    from dispatch.services.audit import audit_record
    from dispatch.services.sealer import seal_tenant

    barrier.wait(timeout=60)
    try:
        for number in range(count):
            with transaction.atomic():
                audit_record(tenant_id=tenant_id, kind="test.event", actor=f"writer-{index}",
                             at=timezone.now(), details={"writer": index, "n": number})
            if number % 5 == index % 5:
                seal_tenant(tenant_id)
        results.put((index, "ok"))
    except Exception as exc:  # reported to the parent, which fails the test
        results.put((index, f"error: {type(exc).__name__}: {exc}"))
    connection.close()
