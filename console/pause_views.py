"""The emergency stop in the console (docs/design.md#approval-policies), for admins: pause the
tenant, one contract or one agent, and resume it. Thin: the form parses, `dispatch.services.pauses`
decides and writes, and every console page shows a banner while anything is paused."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from console.roles import page, refused, role_required
from dispatch.models import Principal
from dispatch.selectors.contracts import operation_names
from dispatch.selectors.pauses import pause_get, pauses_lifted
from dispatch.selectors.principals import principal_get, principal_list
from dispatch.services.pauses import pause_lift, pause_scope, pause_set
from protocols.roles import Role


class PauseForm(forms.Form):
    operation = forms.ChoiceField(required=False, label="Contract")
    agent = forms.ChoiceField(required=False, label="Agent")
    reason = forms.CharField(required=False, max_length=500, label="Reason",
                             help_text="Shown on every console page while it is paused.")

    def __init__(self, data: Any = None, *, operations: list[str],
                 agents: list[tuple[str, str]]) -> None:
        super().__init__(data)
        operation, agent = self.fields["operation"], self.fields["agent"]
        assert isinstance(operation, forms.ChoiceField)
        assert isinstance(agent, forms.ChoiceField)
        operation.choices = [("", "Every contract"), *((name, name) for name in operations)]
        agent.choices = [("", "Every agent"), *agents]


def _form(principal: Principal, data: Any = None) -> PauseForm:
    agents = principal_list(viewer=principal, kind=Principal.Kind.AGENT)
    return PauseForm(data, operations=operation_names(),
                     agents=[(agent.id, agent.name) for agent in agents])


def _pauses_page(request: HttpRequest, principal: Principal, form: PauseForm,
                 status: int = 200) -> HttpResponse:
    return page(request, "console/pause_list.html", {
        "form": form, "lifted": pauses_lifted(tenant_id=principal.tenant_id),
    }, principal=principal, status=status)


@require_GET
@role_required(Role.ADMIN)
def pause_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    return _pauses_page(request, principal, _form(principal))


@require_POST
@role_required(Role.ADMIN)
def pause_create(request: HttpRequest, principal: Principal) -> HttpResponse:
    form = _form(principal, request.POST)
    if not form.is_valid():
        return _pauses_page(request, principal, form, status=400)
    data = form.cleaned_data
    agent = (principal_get(viewer=principal, principal_id=data["agent"])
             if data["agent"] else None)
    pause, created = pause_set(actor=principal, tenant=principal.tenant,
                               operation=data["operation"], agent=agent,
                               reason=data["reason"], now=timezone.now())
    if created:
        messages.success(request, f"Paused {pause_scope(pause)}: no claim or attempt starts "
                                  "there until it is resumed.")
    else:
        messages.info(request, f"{pause_scope(pause).capitalize()} was already paused.")
    return redirect("console:pause-list")


@require_POST
@role_required(Role.ADMIN)
def pause_resume(request: HttpRequest, principal: Principal, pause_id: str) -> HttpResponse:
    pause = pause_get(viewer=principal, pause_id=pause_id)
    if pause is None:
        return refused(request, status=404, title="Not found",
                       message="No pause in force has that id here; it may have been resumed "
                               "meanwhile.", principal=principal)
    lifted = pause_lift(actor=principal, tenant=pause.tenant, operation=pause.operation,
                        agent=pause.agent, now=timezone.now())
    messages.success(request, f"Resumed {pause_scope(lifted)}: the work it held back goes on.")
    return redirect("console:pause-list")
