"""What a management command prints when a service refuses: one line, never a traceback."""

from __future__ import annotations

from django.core.management.base import CommandError

from dispatch.runtime import get_runtime
from protocols.denials import Denial, DenialCode


def command_error(denial: Denial) -> CommandError:
    """The refusal as a `CommandError`; an unregistered operation names what is registered."""
    if denial.code is DenialCode.UNKNOWN_OPERATION:
        known = ", ".join(sorted({c.qualified_name for c in get_runtime().registry}))
        return CommandError(f"no registered contract is named {denial.details['operation']!r}"
                            f" (registered: {known or 'none'})")
    return CommandError(f"{denial.code.value}: {denial.message}")
