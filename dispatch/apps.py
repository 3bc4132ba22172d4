from __future__ import annotations

import sqlite3
import sys

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

# The claim's budget upsert uses INSERT .. ON CONFLICT .. DO UPDATE .. RETURNING.
SQLITE_MINIMUM = (3, 35)
# Seconds a delegated step's lease must outlast its longest handler call by: the renewal
# itself, the claim and the journal writes around the call.
LEASE_MARGIN = 15.0


class DispatchConfig(AppConfig):
    name = "dispatch"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from dispatch.signing import missing_shared_keys

        # Production fails closed: every process (web, worker, beat, the MCP gateway, every
        # command) refuses to start where machines would sign with keys of their own, except
        # `manage.py check --deploy`, which reports it (check_signing_keys).
        refusal = missing_shared_keys()
        if refusal and not reporting_deploy_checks(sys.argv):
            raise ImproperlyConfigured(refusal)
        # Traces, when the standard OTEL_* variables ask for them (docs/design.md#tracing):
        # before any request or task, in every process.
        from dispatch.observability.tracing import configure

        configure()
        checks.register(check_sqlite_version)
        checks.register(check_delegation_lease)
        checks.register(check_approval_rules)
        checks.register(check_actions)
        checks.register(check_signing_keys, checks.Tags.security, deploy=True)
        # Register the tasks in every process (web included), so that `dispatch.queue` finds
        # them by name: services hand work to a worker without importing the tasks module.
        import dispatch.tasks  # noqa: F401


def reporting_deploy_checks(argv: list[str]) -> bool:
    """Whether this process is `manage.py check --deploy` (Django's subcommand is argv[1])."""
    return argv[1:2] == ["check"] and "--deploy" in argv[2:]


def check_signing_keys(**_: object) -> list[checks.CheckMessage]:
    """A deployment that can span machines has its signing keys (`missing_shared_keys`)."""
    from dispatch.signing import missing_shared_keys

    refusal = missing_shared_keys()
    if refusal is None:
        return []
    return [checks.Error(
        refusal, hint="Generate one: python -c 'import json; from dispatch.signing import "
        "generate_entry; print(json.dumps([generate_entry()]))' (docs/audit-seal.md#keys).",
        id="dispatch.E011")]


def check_sqlite_version(**_: object) -> list[checks.CheckMessage]:
    engine = settings.DATABASES["default"]["ENGINE"]
    if engine.endswith("sqlite3") and sqlite3.sqlite_version_info < SQLITE_MINIMUM:
        return [checks.Error(
            f"SQLite {sqlite3.sqlite_version} is too old: the dispatcher needs "
            f"{'.'.join(map(str, SQLITE_MINIMUM))} or newer (upsert with RETURNING).",
            hint="Use a Python built against a newer SQLite, or PostgreSQL.",
            id="dispatch.E001")]
    return []


def check_delegation_lease(**_: object) -> list[checks.CheckMessage]:
    """`DELEGATION_LEASE_SECONDS` outlasts every registered handler call (its contract's
    `timeout` x `max_attempts`, plus `LEASE_MARGIN`): a delegated step renews its lease
    between its sub-agent's turns only, so a turn longer than the lease would have
    reconciliation revoke a live step (docs/design.md#evidence). A model call has no declared bound;
    its adapter's own timeout must stay under the lease too (docs/workflows.md)."""
    from dispatch.http_actions import ActionsError
    from dispatch.runtime import ApprovalRulesError, get_runtime

    try:
        runtime = get_runtime()
    except (ApprovalRulesError, ActionsError):
        return []  # check_approval_rules and check_actions say what
    lease = float(settings.DELEGATION_LEASE_SECONDS)
    longest = max(((c.scheduling_contract.timeout * c.scheduling_contract.max_attempts,
                    c.qualified_name) for c in runtime.registry), default=None)
    if longest is None or lease > longest[0] + LEASE_MARGIN:
        return []
    return [checks.Error(
        f"DELEGATION_LEASE_SECONDS ({lease:g}) is too short: {longest[1]} may run "
        f"{longest[0]:g} s (timeout x max_attempts), and a delegated step renews its lease "
        "only between its sub-agent's turns, so reconciliation would revoke a live step.",
        hint=f"Set DELEGATION_LEASE_SECONDS above {longest[0] + LEASE_MARGIN:g}.",
        id="dispatch.E003")]


def check_approval_rules(**_: object) -> list[checks.CheckMessage]:
    """Each rule of `APPROVAL_RULES` applies as written to a registered contract
    (docs/design.md#approval-policies): one error per problem, naming the rule by its position
    and operation. The runtime refuses the same rules, so no process runs on them."""
    from dispatch.http_actions import ActionsError
    from dispatch.runtime import ApprovalRulesError, get_runtime

    try:
        get_runtime()
    except ActionsError:
        return []  # check_actions says what
    except ApprovalRulesError as error:
        return [checks.Error(
            problem, hint="Correct the rule in APPROVAL_RULES (docs/design.md#approval-policies): "
                          "a rule that would never apply is never deployed.",
            id="dispatch.E010") for problem in error.problems]
    return []


def check_actions(**_: object) -> list[checks.CheckMessage]:
    """The files of `ACTIONS_DIR` (docs/actions.md): one error per diagnostic, each naming its
    file, line and key. The runtime refuses the same files, so no process runs on them."""
    from dispatch.http_actions import ActionsError
    from dispatch.runtime import ApprovalRulesError, get_runtime

    try:
        get_runtime()
    except ApprovalRulesError:
        return []  # check_approval_rules says what
    except ActionsError as error:
        return [checks.Error(diagnostic.render(),
                             hint="Correct the action file (docs/actions.md); `manage.py "
                                  "check_actions` lists every problem.",
                             id="dispatch.E011") for diagnostic in error.diagnostics]
    return []
