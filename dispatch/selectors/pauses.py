"""What the console reads of pauses (docs/design.md#approval-policies): the pauses in force in
the viewer's tenant, for its banner and its Pauses page."""

from __future__ import annotations

from dataclasses import dataclass

from dispatch.models import Pause, Principal
from dispatch.services.pauses import pause_scope


@dataclass(frozen=True)
class PauseView:
    """A pause in force, as the banner says it."""

    pause: Pause
    scope: str  # `the tenant`, `contract payments.transfer`, `agent support-bot`, ...


def pauses_in_force(*, tenant_id: str) -> list[PauseView]:
    """The tenant's pauses in force, oldest first."""
    found = Pause.objects.filter(tenant_id=tenant_id, lifted_at__isnull=True).select_related(
        "agent").order_by("paused_at", "id")
    return [PauseView(pause=pause, scope=pause_scope(pause)) for pause in found]


def pause_get(*, viewer: Principal, pause_id: object) -> Pause | None:
    """A pause in force of the viewer's tenant, or None (missing, lifted, or another tenant's)."""
    if not isinstance(pause_id, str):
        return None
    return Pause.objects.select_related("agent", "tenant").filter(
        id=pause_id, tenant_id=viewer.tenant_id, lifted_at__isnull=True).first()


def pauses_lifted(*, tenant_id: str, limit: int = 20) -> list[PauseView]:
    """The tenant's latest resumed pauses, newest first."""
    found = Pause.objects.filter(tenant_id=tenant_id, lifted_at__isnull=False).select_related(
        "agent").order_by("-lifted_at", "-id")[:limit]
    return [PauseView(pause=pause, scope=pause_scope(pause)) for pause in found]
