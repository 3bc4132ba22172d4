"""Child process for fault injection: dispatch one proposal and run its handler, crashing at
the point named by DISPATCH_CRASH_AT. Usage: python -m tests.support.crash PRINCIPAL PROPOSAL"""

from __future__ import annotations

import sys

import django


def main(principal_id: str, proposal_id: str) -> None:
    django.setup()
    from django.utils import timezone

    from dispatch.models import Principal
    from dispatch.services.dispatcher import proposal_dispatch
    from dispatch.services.worker import operation_execute

    principal = Principal.objects.get(id=principal_id)
    operation = proposal_dispatch(principal=principal, proposal_id=proposal_id,
                                  now=timezone.now(), enqueue=False)
    operation_execute(operation_id=operation.id)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
