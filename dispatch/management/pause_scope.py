"""The scope `manage.py pause` and `manage.py resume` name (docs/design.md#approval-policies):
`--tenant T [--operation O] [--agent A]`, each resolved by name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.management.base import CommandError, CommandParser

from dispatch.models import Principal, Tenant


@dataclass(frozen=True)
class Scope:
    tenant: Tenant
    operation: str
    agent: Principal | None


def add_scope_arguments(parser: CommandParser) -> None:
    parser.add_argument("--tenant", required=True, help="tenant name")
    parser.add_argument("--operation", default="",
                        help="qualified contract name, e.g. tickets.reply")
    parser.add_argument("--agent", default=None, help="agent name")


def scope_from(opts: dict[str, Any]) -> Scope:
    tenant = Tenant.objects.filter(name=opts["tenant"]).first()
    if tenant is None:
        raise CommandError(f"no tenant named {opts['tenant']!r}")
    agent = None
    if opts["agent"] is not None:
        agent = Principal.objects.filter(tenant=tenant, name=opts["agent"],
                                         kind=Principal.Kind.AGENT).first()
        if agent is None:
            raise CommandError(f"no agent named {opts['agent']!r} in tenant {tenant.name!r}")
    return Scope(tenant=tenant, operation=opts["operation"], agent=agent)
