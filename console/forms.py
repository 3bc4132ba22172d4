"""Console forms: they parse and check input; the services decide and write."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django import forms

from dispatch.selectors.approvals import QueueFilter
from dispatch.selectors.audit import AuditFilter
from dispatch.services.cancellation import REASON_MAX
from protocols.expiry import expiry_after
from protocols.grants import parse_scope

AGE_CHOICES = [
    ("", "Any age"),
    ("5m", "Newer than 5 minutes"),
    ("1h", "Newer than 1 hour"),
    ("gt30m", "Waiting over 30 minutes"),
    ("gt1d", "Waiting over 1 day"),
]
_AGE_BOUNDS: Mapping[str, tuple[str, timedelta]] = {
    "5m": ("after", timedelta(minutes=5)),
    "1h": ("after", timedelta(hours=1)),
    "gt30m": ("before", timedelta(minutes=30)),
    "gt1d": ("before", timedelta(days=1)),
}


def _choice_field(form: forms.Form, name: str) -> forms.ChoiceField:
    """The form's own copy of a declared choice field, whose choices are set per request."""
    field = form.fields[name]
    assert isinstance(field, forms.ChoiceField)  # declared so on the form class
    return field


class QueueFilterForm(forms.Form):
    operation = forms.ChoiceField(required=False, label="Operation")
    principal = forms.ChoiceField(required=False, label="Requested by")
    age = forms.ChoiceField(required=False, choices=AGE_CHOICES, label="Age")

    def __init__(
        self, data: Any, *, operations: Iterable[str], principals: Iterable[tuple[str, str]],
    ) -> None:
        super().__init__(data)
        _choice_field(self, "operation").choices = [("", "All operations"),
                                                    *((name, name) for name in operations)]
        _choice_field(self, "principal").choices = [("", "Anyone"), *principals]

    def filters(self, now: datetime) -> QueueFilter:
        if not self.is_valid():
            return QueueFilter()
        data = self.cleaned_data
        after = before = None
        bound = _AGE_BOUNDS.get(data["age"])
        if bound is not None:
            side, delta = bound
            if side == "after":
                after = now - delta
            else:
                before = now - delta
        return QueueFilter(operation=data["operation"], principal_id=data["principal"],
                           created_after=after, created_before=before)

    @property
    def active(self) -> bool:
        return self.is_valid() and any(self.cleaned_data.values())


class DecisionForm(forms.Form):
    """Approve or deny; the digest is the one shown on the page, sent back to be confirmed."""

    digest = forms.CharField(widget=forms.HiddenInput, max_length=71)
    decision = forms.ChoiceField(choices=[("grant", "Approve"), ("deny", "Deny")])
    reason = forms.CharField(
        required=False, max_length=2000, label="Reason",
        help_text="Required to deny; recorded in the audit with your decision.",
        widget=forms.Textarea(attrs={"rows": 3}),
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        data["reason"] = (data.get("reason") or "").strip()
        if data.get("decision") == "deny" and not data["reason"]:
            self.add_error("reason", "Give a reason to deny this action.")
        return data


class ResolveForm(forms.Form):
    outcome = forms.ChoiceField(choices=[("completed", "Mark completed"),
                                         ("no_effect", "Mark no effect")])
    evidence = forms.CharField(
        max_length=4000, label="Evidence note",
        help_text="What you checked at the destination, and what it showed.",
        widget=forms.Textarea(attrs={"rows": 3}),
        error_messages={"required": "Write a note of the evidence before resolving."},
    )

    def clean_evidence(self) -> str:
        evidence: str = self.cleaned_data["evidence"]
        note = evidence.strip()
        if not note:
            raise forms.ValidationError("Write a note of the evidence before resolving.")
        return note


class CancelForm(forms.Form):
    """Cancel an action; the reason is optional, and audited with the action's values
    masked."""

    reason = forms.CharField(
        required=False, max_length=REASON_MAX, strip=True, label="Reason",
        help_text="Optional; recorded in the audit with your cancellation.",
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class GrantIssueForm(forms.Form):
    subject = forms.ChoiceField(label="Subject")
    operations = forms.MultipleChoiceField(label="Operations",
                                           widget=forms.CheckboxSelectMultiple)
    scope = forms.CharField(
        label="Scope",
        help_text="One key per line: key=value,value or key=* (for example "
                  "mailbox=support@acme.example).",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
    )
    expires_in = forms.IntegerField(required=False, min_value=1, label="Expires in (seconds)",
                                    help_text="Leave empty for no expiry.")

    def __init__(
        self, data: Any = None, *, principals: Iterable[tuple[str, str]],
        authority_keys: Mapping[str, list[str]], now: datetime,
    ) -> None:
        super().__init__(data)
        self.authority_keys = authority_keys
        self.now = now  # the service issues the grant at this same instant
        _choice_field(self, "subject").choices = [("", "Choose a principal"), *principals]
        _choice_field(self, "operations").choices = [(name, name)
                                                     for name in sorted(authority_keys)]

    def clean_expires_in(self) -> int | None:
        seconds: int | None = self.cleaned_data["expires_in"]
        if seconds is not None:
            try:
                expiry_after(self.now, seconds)
            except ValueError as exc:
                raise forms.ValidationError(f"That expiry {exc}.") from None
        return seconds

    def clean_scope(self) -> dict[str, Any]:
        scope: dict[str, Any] = {}
        for number, line in enumerate(self.cleaned_data["scope"].splitlines(), start=1):
            if not line.strip():
                continue
            key, sep, values = line.partition("=")
            key = key.strip()
            if not sep or not key or not values.strip():
                raise forms.ValidationError(f"Line {number}: write key=value,value or key=*.")
            if key in scope:
                raise forms.ValidationError(f"Line {number}: '{key}' appears twice.")
            items = [v.strip() for v in values.split(",") if v.strip()]
            scope[key] = "*" if items == ["*"] else items
        if not scope:
            raise forms.ValidationError("Give at least one scope key.")
        try:
            parse_scope(scope)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return scope

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        scope, operations = data.get("scope"), data.get("operations")
        if scope and operations:
            for operation in operations:
                missing = [k for k in self.authority_keys.get(operation, []) if k not in scope]
                if missing:
                    self.add_error("scope", f"{operation} needs a scope for "
                                            f"{', '.join(repr(k) for k in missing)}.")
        return data


class AuditFilterForm(forms.Form):
    kind = forms.ChoiceField(required=False, label="Kind")
    operation = forms.CharField(required=False, max_length=40, label="Operation id")
    proposal = forms.CharField(required=False, max_length=40, label="Proposal id")

    def __init__(self, data: Any, *, kinds: Iterable[str]) -> None:
        super().__init__(data)
        _choice_field(self, "kind").choices = [("", "All kinds"), *((k, k) for k in kinds)]

    def filters(self) -> AuditFilter:
        if not self.is_valid():
            return AuditFilter()
        data = self.cleaned_data
        return AuditFilter(kind=data["kind"], operation_id=data["operation"].strip(),
                           proposal_id=data["proposal"].strip())
