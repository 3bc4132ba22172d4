"""The permit token of one attempt (docs/permit-tokens.md): minted by the worker as the attempt
starts, carried to the destination by the handler (`HandlerContext.permit_token`).

One Ed25519 signature and nothing else: no statement, no read (the operation's proposal is
already loaded with it). The digest it binds is the stored proposal's, the approved snapshot's,
never one recomputed from what the worker holds in memory.
"""

from __future__ import annotations

import json
import math
import secrets
import time

from django.conf import settings

from dispatch.models import Operation
from dispatch.signing import current_key
from protocols.contracts import OperationContract
from protocols.permit_tokens import mint_permit


def permit_token(operation: Operation, contract: OperationContract) -> str:
    """A fresh token for the attempt about to run: signed by the current key (its kid in the
    header), valid for the contract timeout and `PERMIT_TOKEN_MARGIN` seconds more."""
    proposal = operation.proposal
    key = current_key()
    now = int(time.time())
    lifetime = math.ceil(contract.scheduling_contract.timeout) + int(settings.PERMIT_TOKEN_MARGIN)
    destination = json.loads(proposal.canonical)["destination"]
    return mint_permit(kid=key.kid, key=key.private, operation_id=operation.id,
                       digest=proposal.digest, destination=str(destination.get("name", "")),
                       tenant=operation.tenant_id, issued_at=now, expires_at=now + lifetime,
                       token_id=secrets.token_urlsafe(16))
