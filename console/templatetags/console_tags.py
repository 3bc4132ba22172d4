"""Small display helpers for console templates: state badges, digests, counts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.presenters import reveal

register = template.Library()

# Every state the console shows, mapped to the label a person reads.
LABELS = {
    "failed_no_effect": "failed, no effect",
    "reconciled_completed": "reconciled: completed",
    "reconciled_no_effect": "reconciled: no effect",
    "uncertain": "uncertain",
    "not_yet": "not yet valid",
}


@register.simple_tag
def badge(state: str, label: str = "") -> SafeString:
    """A coloured badge whose text names the state (colour is never the only signal)."""
    slug = str(state).replace(".", "-").replace("_", "-") or "none"
    return format_html('<span class="badge badge-{}">{}</span>', slug,
                       label or LABELS.get(str(state), str(state) or "—"))


@register.filter
def short_digest(digest: str) -> str:
    """`sha256:1a2b3c4d…9f8e` — enough to recognise, the page shows the whole digest too."""
    if not digest:
        return ""
    algorithm, _, hexdigits = digest.partition(":")
    if len(hexdigits) <= 16:
        return digest
    return f"{algorithm}:{hexdigits[:8]}…{hexdigits[-4:]}"


@register.filter
def thousands(value: Any) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


@register.simple_tag
def grant_state(grant: Any, now: datetime) -> str:
    if grant.revoked_at is not None:
        return "revoked"
    if grant.expires_at is not None and grant.expires_at <= now:
        return "expired"
    if grant.not_before is not None and grant.not_before > now:
        return "not_yet"
    return "active"


@register.simple_tag
def revoke_question(node: Any) -> str:
    """What revoking a grant of the grants page does, asked before it is done: the grant and
    every live grant delegated from it, at any depth (revocation takes the whole subtree)."""
    delegated = _live_delegations(node)
    question = f"Revoke grant {node.grant.id} of {node.grant.subject.name}"
    if delegated:
        question += (f" and the {delegated} grant{'' if delegated == 1 else 's'} delegated "
                     f"from it")
    them = "them" if delegated else "it"
    return f"{question}? Unused permits resting on {them} are revoked too."


def _live_delegations(node: Any) -> int:
    return sum((child.grant.revoked_at is None) + _live_delegations(child)
               for child in node.children)


@register.filter
def scope_items(scope: Any) -> list[tuple[str, str]]:
    if not isinstance(scope, dict):
        return []
    return [(key, "any value" if value == "*" else ", ".join(map(str, value)))
            for key, value in sorted(scope.items())]


@register.filter
def visible(text: Any) -> str:
    """Text with its invisible format characters (bidi controls, zero-width) written as
    escapes, so nothing shown can be reordered or hidden (`console.presenters.reveal`)."""
    return reveal(str(text))
