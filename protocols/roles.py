"""Roles (docs/design.md#concepts, docs/rest-api.md#calls): what a human may do besides proposing.
Pure."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """The roles a human holds; an admin holds every right of an operator."""

    OPERATOR = "operator"
    ADMIN = "admin"


def role_allows(held: str, required: str) -> bool:
    """Whether a human holding `held` ("" for none) may act where `required` is needed."""
    if held == Role.ADMIN:
        return True
    return bool(required) and held == required


def roles_allowing(required: str) -> tuple[str, ...]:
    """The roles whose holders may act where `required` is needed (`role_allows`)."""
    return tuple(dict.fromkeys(role for role in (Role.ADMIN.value, required) if role))
