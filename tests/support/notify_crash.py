"""Child process for the notification crash tests, killed at the point named by
DISPATCH_CRASH_AT (docs/design.md#notifications).

    python -m tests.support.notify_crash propose AGENT_ID   # a transfer needing approval
    python -m tests.support.notify_crash deliver NOTIFICATION_ID
"""

from __future__ import annotations

import sys

import django


def main(what: str, target: str) -> None:
    django.setup()
    from django.utils import timezone

    from dispatch.models import Principal
    from dispatch.services.notifications import notification_deliver
    from dispatch.services.proposals import proposal_create

    if what == "propose":
        proposal_create(principal=Principal.objects.get(id=target),
                        operation="payments.transfer", arguments={
                            "from_account": "acct-001", "to_account": "acct-999",
                            "amount": "75.00", "currency": "EUR", "memo": "crash test"},
                        now=timezone.now())
    else:
        notification_deliver(notification_id=target, enqueue=False)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
