"""The sealer and `audit_verify` (docs/audit-seal.md): every committed event sealed exactly once
in a chain that verifies, and each tamper found and named."""

from __future__ import annotations

import multiprocessing
from datetime import datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from dispatch.models import AuditBlock, AuditEvent, AuditSeal
from dispatch.services.sealer import seal_all
from dispatch.services.seals import verify_tenant
from tests.audit.conftest import KEYS, add_events, verify_fails_naming
from tests.conftest import World, make_world
from tests.support.processes import child_env
from tests.support.sealing import write_and_seal

WRITERS = 8
PER_WRITER = 15


def sql(statement: str, *params: object) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def seal_of(world: World, seq: int) -> AuditSeal:
    return AuditSeal.objects.get(tenant_id=world.owner.tenant.id, seq=seq)


def test_blocks_chain_and_cover_events_in_at_id_order(sealed: World) -> None:
    blocks = list(AuditBlock.objects.filter(tenant_id=sealed.owner.tenant.id).order_by("number"))
    assert [(b.number, b.from_seq, b.to_seq) for b in blocks] == [(1, 1, 5), (2, 6, 10),
                                                                  (3, 11, 15)]
    events = AuditEvent.objects.filter(tenant_id=sealed.owner.tenant.id).order_by("at", "id")
    seqs = dict(AuditSeal.objects.values_list("event_id", "seq"))
    assert [seqs[e.pk] for e in events] == list(range(1, 16))
    assert verify_tenant(sealed.owner.tenant.id) is None


def test_the_lag_leaves_young_events_for_a_later_pass(db: None, now: datetime) -> None:
    world = make_world(now)
    with override_settings(AUDIT_SEAL_LAG=60):
        add_events(world, 2, timezone.now())
        before = AuditSeal.objects.count()
        seal_all()
        young = AuditEvent.objects.filter(tenant_id=world.owner.tenant.id, kind="test.event")
        assert not AuditSeal.objects.filter(event_id__in=young.values("id")).exists()
        assert AuditSeal.objects.count() >= before
        seal_all(now=timezone.now() + timedelta(seconds=61))
        assert AuditSeal.objects.filter(event_id__in=young.values("id")).count() == 2


def test_an_event_changed_by_raw_sql_is_named(sealed: World) -> None:
    target = seal_of(sealed, 7)
    sql(f"UPDATE {AuditEvent._meta.db_table} SET details = %s WHERE id = %s",
        '{"n": 99}', target.event_id)
    verify_fails_naming(sealed, f"event {target.event_id} (seq 7, block 2): changed")


def test_an_event_changed_with_its_seal_digest_is_caught_by_the_root(sealed: World) -> None:
    target = seal_of(sealed, 7)
    sql(f"UPDATE {AuditEvent._meta.db_table} SET actor = %s WHERE id = %s", "x", target.event_id)
    event = AuditEvent.objects.get(pk=target.event_id)
    from dispatch.services.sealer import event_record
    from protocols.auditseal import event_digest
    sql(f"UPDATE {AuditSeal._meta.db_table} SET digest = %s WHERE event_id = %s",
        event_digest(event_record(event, 7)), target.event_id)
    verify_fails_naming(sealed, "block 2: root does not match")


def test_a_deleted_event_is_named(sealed: World) -> None:
    target = seal_of(sealed, 3)
    sql(f"DELETE FROM {AuditEvent._meta.db_table} WHERE id = %s", target.event_id)
    verify_fails_naming(sealed, f"event {target.event_id} (seq 3, block 1): removed")


def test_a_deleted_event_and_its_seal_are_named_by_seq(sealed: World) -> None:
    target = seal_of(sealed, 3)
    sql(f"DELETE FROM {AuditEvent._meta.db_table} WHERE id = %s", target.event_id)
    sql(f"DELETE FROM {AuditSeal._meta.db_table} WHERE event_id = %s", target.event_id)
    verify_fails_naming(sealed, "block 1: event seq 3 is missing (removed)")


def test_an_inserted_backdated_event_is_named(sealed: World, now: datetime) -> None:
    add_events(sealed, 1, now - timedelta(minutes=9, seconds=30))
    inserted = AuditEvent.objects.order_by("-id").first()
    assert inserted is not None
    verify_fails_naming(sealed, f"event {inserted.pk}: inserted")


def test_a_changed_block_root_is_named(sealed: World) -> None:
    sql(f"UPDATE {AuditBlock._meta.db_table} SET root = %s WHERE tenant_id = %s AND number = 2",
        "sha256:" + "ab" * 32, sealed.owner.tenant.id)
    verify_fails_naming(sealed, "block 2: bad signature")


def test_a_removed_block_is_named(sealed: World) -> None:
    sql(f"DELETE FROM {AuditBlock._meta.db_table} WHERE tenant_id = %s AND number = 2",
        sealed.owner.tenant.id)
    verify_fails_naming(sealed, "block 2: removed")


def test_a_removed_block_with_its_seals_breaks_the_chain(sealed: World) -> None:
    sql(f"DELETE FROM {AuditBlock._meta.db_table} WHERE tenant_id = %s AND number = 2",
        sealed.owner.tenant.id)
    sql(f"DELETE FROM {AuditSeal._meta.db_table} WHERE tenant_id = %s AND block = 2",
        sealed.owner.tenant.id)
    verify_fails_naming(sealed, "block 2: missing")


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_events_of_eight_concurrent_processes_are_sealed_once_in_a_verified_chain(
        now: datetime) -> None:
    world = make_world(now)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WRITERS)
    results = ctx.Queue()
    env = child_env(AUDIT_SEAL_LAG="0", SIGNING_KEYS=KEYS)
    procs = [ctx.Process(target=write_and_seal,
                         args=(env, world.owner.tenant.id, PER_WRITER, barrier, results, index))
             for index in range(WRITERS)]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=300) for _ in range(WRITERS)]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    assert sorted(outcomes) == [(i, "ok") for i in range(WRITERS)]
    seal_all()
    tenant_id = world.owner.tenant.id
    events = set(AuditEvent.objects.filter(tenant_id=tenant_id).values_list("id", flat=True))
    assert len(events) >= WRITERS * PER_WRITER
    seals = list(AuditSeal.objects.filter(tenant_id=world.owner.tenant.id).order_by("seq"))
    assert sorted(s.event_id for s in seals) == sorted(events)  # each exactly once (pk)
    assert [s.seq for s in seals] == list(range(1, len(events) + 1))
    assert AuditBlock.objects.filter(tenant_id=world.owner.tenant.id).count() > 1
    assert verify_tenant(world.owner.tenant.id) is None
    call_command("audit_verify")


def test_the_beat_task_runs_a_sealing_pass(db: None, now: datetime) -> None:
    from dispatch.tasks import audit_seal

    world = make_world(now)
    add_events(world, 3, now - timedelta(minutes=1))
    assert audit_seal.apply().get() >= 3
    assert verify_tenant(world.owner.tenant.id) is None
    assert audit_seal.apply().get() == 0
