"""The demo's resource protocols (docs/design.md#concepts, #evidence): `email_draft`, `question` and
`report`.

Declared by the demo extension and registered with the pure core at import
(`protocols.lifecycle.resource_protocol_register`, which checks each table holds together), so
that a contract's fingerprint, built wherever `demo.contracts` is imported, pins the same tables
the runtime moves resources by. `demo.contracts` pairs each with its `ResourceKind`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from protocols.lifecycle import ResourceEvent as RE
from protocols.lifecycle import ResourceProtocol, resource_protocol_register
from protocols.lifecycle import ResourceState as R


class DemoState(StrEnum):
    """The demo kinds' own state names, beside the common ones (`ResourceState`): where an
    email is once sent, a question once answered, a report once attested and published."""

    SENT = "sent"
    OPEN = "open"
    ANSWERED = "answered"
    ATTESTED = "attested"
    PUBLISHED = "published"


D = DemoState

EMAIL_DRAFT: Final = resource_protocol_register(ResourceProtocol(
    name="email_draft",
    initial=R.DRAFT,
    transitions={
        # Editing makes a new revision in the initial state; never once the action may have run.
        (R.DRAFT, RE.EDIT): R.DRAFT,
        (R.PROPOSED, RE.EDIT): R.DRAFT,
        (R.AUTHORIZED, RE.EDIT): R.DRAFT,
        (R.DENIED, RE.EDIT): R.DRAFT,
        (R.FAILED_NO_EFFECT, RE.EDIT): R.DRAFT,
        # A revision may carry several proposals; each stays bound to this exact revision.
        (R.DRAFT, RE.PROPOSE): R.PROPOSED,
        (R.PROPOSED, RE.PROPOSE): R.PROPOSED,
        (R.AUTHORIZED, RE.PROPOSE): R.AUTHORIZED,
        (R.FAILED_NO_EFFECT, RE.PROPOSE): R.PROPOSED,
        (R.PROPOSED, RE.GRANT): R.AUTHORIZED,
        (R.AUTHORIZED, RE.GRANT): R.AUTHORIZED,
        (R.PROPOSED, RE.DENY): R.DENIED,
        # A denial of a second proposal leaves an already authorized revision authorized.
        (R.AUTHORIZED, RE.DENY): R.AUTHORIZED,
        # An approval or permit that lapses unused returns the revision to the draft state.
        (R.PROPOSED, RE.EXPIRE): R.DRAFT,
        (R.AUTHORIZED, RE.EXPIRE): R.DRAFT,
        (R.AUTHORIZED, RE.CLAIM): R.DISPATCHING,
        (R.DISPATCHING, RE.COMPLETE): D.SENT,
        (R.DISPATCHING, RE.FAIL_NO_EFFECT): R.FAILED_NO_EFFECT,
        (R.DISPATCHING, RE.UNCERTAIN): R.UNKNOWN,
        # A further attempt under the same key (a renewal, a retry after a proven absence):
        # back to dispatching, so that its outcome can be recorded; never to authorized.
        (R.UNKNOWN, RE.RETRY): R.DISPATCHING,
        # Reconciliation may establish the outcome; never back to a reusable authorized state.
        (R.UNKNOWN, RE.RECONCILE_COMPLETED): D.SENT,
        (R.UNKNOWN, RE.RECONCILE_NO_EFFECT): R.FAILED_NO_EFFECT,
    },
    final=frozenset({D.SENT}),
))

# A question is researched while open: fetches only read it (a
# contract's `reads`), so they neither move nor block it; it is answered once, when a report
# on it is published.
QUESTION: Final = resource_protocol_register(ResourceProtocol(
    name="question",
    initial=D.OPEN,
    transitions={
        (D.OPEN, RE.EDIT): D.OPEN,
        (D.OPEN, RE.ANSWER): D.ANSWERED,
    },
    final=frozenset({D.ANSWERED}),
))

# A report is attested, then proposed for publication. Editing makes a new revision in the
# draft state, so an attestation never covers bytes it did not judge; never once the
# publication may have run. A lapsed or denied approval leaves the attestation standing.
REPORT: Final = resource_protocol_register(ResourceProtocol(
    name="report",
    initial=R.DRAFT,
    transitions={
        (R.DRAFT, RE.EDIT): R.DRAFT,
        (D.ATTESTED, RE.EDIT): R.DRAFT,
        (R.PROPOSED, RE.EDIT): R.DRAFT,
        (R.AUTHORIZED, RE.EDIT): R.DRAFT,
        (R.DENIED, RE.EDIT): R.DRAFT,
        (R.FAILED_NO_EFFECT, RE.EDIT): R.DRAFT,
        (R.DRAFT, RE.ATTEST): D.ATTESTED,
        (D.ATTESTED, RE.PROPOSE): R.PROPOSED,
        (R.PROPOSED, RE.PROPOSE): R.PROPOSED,
        (R.AUTHORIZED, RE.PROPOSE): R.AUTHORIZED,
        (R.FAILED_NO_EFFECT, RE.PROPOSE): R.PROPOSED,
        (R.PROPOSED, RE.GRANT): R.AUTHORIZED,
        (R.AUTHORIZED, RE.GRANT): R.AUTHORIZED,
        (R.PROPOSED, RE.DENY): R.DENIED,
        (R.AUTHORIZED, RE.DENY): R.AUTHORIZED,
        (R.PROPOSED, RE.EXPIRE): D.ATTESTED,
        (R.AUTHORIZED, RE.EXPIRE): D.ATTESTED,
        (R.AUTHORIZED, RE.CLAIM): R.DISPATCHING,
        (R.DISPATCHING, RE.COMPLETE): D.PUBLISHED,
        (R.DISPATCHING, RE.FAIL_NO_EFFECT): R.FAILED_NO_EFFECT,
        (R.DISPATCHING, RE.UNCERTAIN): R.UNKNOWN,
        (R.UNKNOWN, RE.RETRY): R.DISPATCHING,
        (R.UNKNOWN, RE.RECONCILE_COMPLETED): D.PUBLISHED,
        (R.UNKNOWN, RE.RECONCILE_NO_EFFECT): R.FAILED_NO_EFFECT,
    },
    final=frozenset({D.PUBLISHED}),
))

