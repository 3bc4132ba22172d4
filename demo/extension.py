"""The demo as a runtime extension: `settings.DISPATCH_EXTENSIONS` names this module by default.

It implements extension API version 1 (`EXTENSION_API`, docs/compatibility.md).
`register(runtime)` adds the `email_draft` resource kind and the three demo contracts, each with
its handler from `demo.handlers.HANDLERS` (read at registration, so a test that swaps a handler
there and rebuilds the runtime registers the contract under the new fingerprint), and the
validators the pure core ships (`protocols.evidence.VALIDATORS`: `cited-sources@1`).
"""

from __future__ import annotations

from demo.contracts import CONTRACTS, RESOURCE_KINDS
from demo.handlers import HANDLERS
from dispatch.runtime import Runtime
from protocols.evidence import VALIDATORS

#: The extension API version this module implements (dispatch.runtime.EXTENSION_API_VERSION).
EXTENSION_API = 1


def register(runtime: Runtime) -> None:
    for kind in RESOURCE_KINDS:
        runtime.register_resource_kind(kind)
    for name, contract in CONTRACTS.items():
        handler = HANDLERS[name]
        runtime.register(contract(handler.implementation_fingerprint), handler)
    for spec in VALIDATORS:
        runtime.register_validator(spec.name, spec.version, spec.policy, spec.fn)
