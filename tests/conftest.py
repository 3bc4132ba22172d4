"""Shared fixtures: principals owner/approver/admin/outsider, a clock, real destinations."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.destinations import Destinations, running_destinations

ALL_TOOLS = ["email.send", "payments.transfer", "crm.lookup"]
MAILBOX = "support@acme.example"


@pytest.fixture
def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass
class World:
    """One tenant with an agent (owner), an operator (approver) and an admin; another tenant
    with its own agent and operator (outsider, outsider_operator)."""

    owner: Any
    owner_token: str
    approver: Any
    admin: Any
    outsider: Any
    outsider_operator: Any
    now: datetime

    def draft(self, *, to: list[str] | None = None, sender: str = MAILBOX,
              subject: str = "Your refund") -> Any:
        from dispatch.services.resources import resource_create

        resource, _ = resource_create(principal=self.owner, kind="email_draft", payload={
            "from": sender, "to": to or ["customer@example.com"], "subject": subject,
            "body": "We have refunded your order."}, now=self.now)
        return resource

    def propose_email(self, resource: Any, **extra: Any) -> Any:
        from dispatch.services.proposals import proposal_create

        return proposal_create(principal=self.owner, operation="email.send",
                               arguments={"draft": {"id": resource.id,
                                                    "revision": resource.current_revision}},
                               now=self.now, **extra)

    def propose_transfer(self, amount: str = "10.00", memo: str = "", currency: str = "EUR",
                         **extra: Any) -> Any:
        from dispatch.services.proposals import proposal_create

        return proposal_create(principal=self.owner, operation="payments.transfer", arguments={
            "from_account": "acct-001", "to_account": "acct-999", "amount": amount,
            "currency": currency, "memo": memo}, now=self.now, **extra)

    def grant(self, proposal: Any, approver: Any = None) -> Any:
        from dispatch.services.approvals import approval_decide

        _, permit = approval_decide(approver=approver or self.approver,
                                    approval_id=proposal.approval.id, decision="grant",
                                    digest=proposal.digest, now=self.now)
        return permit

    def approved_email(self, **draft: Any) -> tuple[Any, Any]:
        proposal = self.propose_email(self.draft(**draft))
        return proposal, self.grant(proposal)


def make_world(now: datetime, prefix: str = "") -> World:
    from dispatch.services.authority import grant_issue
    from dispatch.services.principals import agent_create, human_create

    owner, token = agent_create(name=f"{prefix}owner", tenant=f"{prefix}acme", tools=ALL_TOOLS)
    approver, _ = human_create(name=f"{prefix}approver", tenant=f"{prefix}acme",
                               role="operator", password="approver-pw")
    admin, _ = human_create(name=f"{prefix}admin", tenant=f"{prefix}acme", role="admin",
                            password="admin-pw")
    outsider, _ = agent_create(name=f"{prefix}outsider", tenant=f"{prefix}globex",
                               tools=ALL_TOOLS)
    outsider_operator, _ = human_create(name=f"{prefix}outsider-operator",
                                        tenant=f"{prefix}globex", role="operator",
                                        password="pw")
    start = now - timedelta(minutes=1)
    grant_issue(issuer="admin", subject=owner, operations=["email.send"],
                scope={"mailbox": [MAILBOX]}, now=start)
    grant_issue(issuer="admin", subject=owner, operations=["payments.transfer"],
                scope={"account": ["acct-001"]}, now=start)
    grant_issue(issuer="admin", subject=owner, operations=["crm.lookup"],
                scope={"customer": "*"}, now=start)
    grant_issue(issuer="admin", subject=outsider, operations=["email.send"],
                scope={"mailbox": ["ops@globex.example"]}, now=start)
    return World(owner, token, approver, admin, outsider, outsider_operator, now)


@pytest.fixture
def world(db: None, now: datetime) -> World:
    return make_world(now)


@pytest.fixture
def destinations(tmp_path: Path, settings: Any) -> Iterator[Destinations]:
    """The SMTP sink and the bank as a real subprocess; settings point the handlers at it. The
    bank and the publisher verify permit tokens against the deployment's keys, as the demo's
    do (`manage.py run_destinations`)."""
    from dispatch.signing import jwks

    keys = tmp_path / "console-keys.json"
    keys.write_text(json.dumps(jwks()), encoding="utf-8")
    with running_destinations(tmp_path / "destinations", hang_seconds=30, keys=keys) as found:
        settings.DESTINATIONS = found.settings()
        yield found


@pytest.fixture
def live(destinations: Destinations, world: World) -> World:
    """A world whose proposals bind the running destinations (set up first)."""
    return world


@pytest.fixture
def fresh_runtime() -> Iterator[None]:
    """The runtime is built anew from the settings of the test (its extensions, its policy)."""
    from dispatch.runtime import get_runtime

    get_runtime.cache_clear()
    yield
    get_runtime.cache_clear()


@pytest.fixture
def changed_handler() -> Iterator[Callable[[], None]]:
    """Call to re-register `email.send` with another handler, hence another fingerprint: the
    demo extension registers what `demo.handlers.HANDLERS` holds when the runtime is built."""
    from demo import handlers
    from dispatch.runtime import get_runtime
    from tests.support.runtime import ChangedEmailSendHandler

    original = handlers.HANDLERS["email.send"]

    def swap() -> None:
        handlers.HANDLERS["email.send"] = ChangedEmailSendHandler()
        get_runtime.cache_clear()

    get_runtime.cache_clear()
    try:
        yield swap
    finally:
        handlers.HANDLERS["email.send"] = original
        get_runtime.cache_clear()


@pytest.fixture
def policy(settings: Any) -> Iterator[Callable[[list[str]], None]]:
    """Call with the effects deployment policy allows; the runtime is rebuilt."""
    from dispatch.runtime import get_runtime

    def allow(effects: list[str]) -> None:
        settings.DEPLOYMENT_ALLOWED_EFFECTS = effects
        get_runtime.cache_clear()

    get_runtime.cache_clear()
    yield allow
    get_runtime.cache_clear()



@pytest.fixture(autouse=True)
def _audit_trace_is_safe(request: pytest.FixtureRequest) -> Iterator[None]:
    """At the end of every test that uses the database, its audit replays through the
    transition tables with no violation (docs/design.md#dispatcher, `manage.py audit_check`): every
    trace the suite makes the runtime write is checked, on SQLite and on PostgreSQL. A test that
    corrupts the audit on purpose says so with `@pytest.mark.audit_corrupted`."""
    marker = request.node.get_closest_marker("django_db")
    databases = marker.kwargs.get("databases") if marker is not None else None
    uses_db = (marker is not None or any(
        name in request.fixturenames for name in ("db", "transactional_db"))) and (
        databases is None or databases == "__all__" or "default" in databases)
    if not uses_db or request.node.get_closest_marker("audit_corrupted") is not None:
        yield
        return
    # Set up the database here, so that it is torn down (rolled back, flushed) after the check.
    request.getfixturevalue("_django_db_helper")
    yield
    from dispatch.services.audit import audit_replay

    found = audit_replay().violations
    assert not found, "the audit breaks the trace safety property:\n" + "\n".join(
        f"  event {v.event_id} {v.operation_id} {v.kind}: {v.code.value}: {v.message}"
        for v in found)


#: The fast lane (`bash scripts/test.sh --fast`, `TEST_LANE=1`) runs the tests that stay in their
#: process on SQLite; the others run in CI's lane only (marker `lane2`, applied here): the
#: folders whose tests spawn processes or drive a browser, tests marked slow, browser or
#: postgres, tests that start the demo destinations (processes of their own), and the tests
#: `LANE2_TESTS` names. In the fast lane a test that starts a process (but `git`) fails, naming
#: itself: mark it, or add it here.
LANE2_FOLDERS = frozenset({"browser", "concurrency", "workers", "faults", "deploy", "bench",
                           "peers", "destinations"})
LANE2_MARKERS = ("slow", "browser", "postgres")
LANE2_FIXTURES = frozenset({"destinations", "live"})
#: Tests (a node id, or the start of one: a module, a test and all its parameters) that start
#: processes of their own.
LANE2_TESTS = frozenset({
    "clients/python/tests/test_exact_console_install.py",
    "tests/agent/test_embedding_example.py",
    "tests/audit/test_export.py::test_an_export_verifies_with_only_the_public_keys",
    "tests/audit/test_head.py::test_an_export_verifies_offline_without_secret_key_or_database",
    "tests/db/test_ceilings.py::test_a_claim_counts_only_after_the_claim_before_it_committed",
    "tests/db/test_ceilings.py::test_a_killed_holders_scope_gives_back_exactly_what_it_did_not",
    "tests/db/test_ceilings.py::test_eight_processes_",
    "tests/db/test_revoke_in_a_fresh_process.py",
    "tests/observability/test_tracing.py::test_otel_variables_turn_tracing_on_with_the_named_exp",
    "tests/observability/test_tracing.py::test_without_otel_variables_no_sdk_is_loaded_and_nothi",
    "tests/permits/test_permit_tokens.py",
    "tests/unit/protocols/test_workflow_parse.py::test_importing_the_package_loads_no_django",
    "tests/unit/test_demo_is_an_extension.py::test_importing_the_whole_runtime_without_extensions",
    "tests/unit/test_handler_fingerprints.py::test_an_edit_of_the_handlers_module_is_a_new_finger",
    "tests/unit/test_purity.py::test_importing_every_protocols_module_loads_no_framework",
    "tests/unit/test_repository_hygiene.py::test_the_filesystem_broker_writes_only_under_its_fol",
})


#: In a shard, what a test is expected to cost, in-process tests counting 1: one of lane 2
#: (processes, a browser) takes about fifty times as long (CI's durations: 0.05 s and 2.3 s).
LANE2_WEIGHT = 50


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = set(item.path.relative_to(config.rootpath).parts[:2])
        if (parts & LANE2_FOLDERS
                or any(item.get_closest_marker(name) for name in LANE2_MARKERS)
                or LANE2_FIXTURES & set(getattr(item, "fixturenames", ()))
                or any(item.nodeid.startswith(named) for named in LANE2_TESTS)):
            item.add_marker(pytest.mark.lane2)
    _keep_shard(config, items)


def _keep_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`TEST_SHARD=K/N` (scripts/test.sh runs N passes per store at once) keeps the K-th of N
    shares of the modules, by weight: the heaviest module first into the lightest share, so
    the shares end together and a module's fixtures stay in one process. Every pass computes
    the same shares from the same collection, so each test runs in exactly one of them."""
    import os

    shard = os.environ.get("TEST_SHARD", "")
    if not shard:
        return
    number, _, count = shard.partition("/")
    k, n = int(number), int(count)
    if not 1 <= k <= n:
        raise pytest.UsageError(f"TEST_SHARD={shard}: K/N with 1 <= K <= N")
    weights: dict[Path, int] = {}
    for item in items:
        cost = LANE2_WEIGHT if item.get_closest_marker("lane2") else 1
        weights[item.path] = weights.get(item.path, 0) + cost
    loads = [0] * n
    share: dict[Path, int] = {}
    for path, weight in sorted(weights.items(), key=lambda entry: (-entry[1], str(entry[0]))):
        lightest = loads.index(min(loads))
        share[path] = lightest + 1
        loads[lightest] += weight
    kept = [item for item in items if share[item.path] == k]
    dropped = [item for item in items if share[item.path] != k]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(autouse=True)
def _fast_lane_starts_no_process(request: pytest.FixtureRequest,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A test of the fast lane that starts a process (but `git`) fails, naming itself: in the
    fast lane (`TEST_LANE=1`), and in the full SQLite pass (`TEST_LANE_CHECK=1`, set by
    scripts/test.sh), so that the rule is kept by CI too."""
    import os

    if "1" not in (os.environ.get("TEST_LANE"), os.environ.get("TEST_LANE_CHECK")) or \
            request.node.get_closest_marker("lane2") is not None:
        return
    import multiprocessing.process
    import subprocess

    def refuse(what: str) -> None:
        pytest.fail(f"{request.node.nodeid} {what} in the fast lane: mark it `lane2` or add it "
                    "to LANE2_TESTS (tests/conftest.py)", pytrace=False)

    started = subprocess.Popen.__init__

    def popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        program = args[0] if isinstance(args, (list, tuple)) else str(args).split()[0]
        if Path(str(program)).name != "git":
            refuse(f"starts {program}")
        started(self, args, *rest, **options)

    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start",
                        lambda self: refuse("starts a process"))
