"""The demo as a runtime extension: `settings.DISPATCH_EXTENSIONS` names this module by default.

It implements extension API version 1 (`EXTENSION_API`, docs/compatibility.md).
`register(runtime)` adds the demo's resource kinds (`email_draft`, `question`, `report`, each
with its table from `demo.tables`) and contracts, each with its handler from
`demo.handlers.HANDLERS` (read at registration, so a test that swaps a handler there and
rebuilds the runtime registers the contract under the new fingerprint) and, for the research
contracts, the outcome hook and admission checks of `demo.hooks`; and the validators the pure
core ships (`protocols.evidence.VALIDATORS`: `cited-sources@1`). Each contract comes with its
one-sentence summary and the email draft with its reading as an email (`demo.summaries`), for
the console.
"""

from __future__ import annotations

from demo.contracts import CONTRACTS, RESOURCE_KINDS
from demo.handlers import HANDLERS
from demo.hooks import attestation_check, evidence_check, evidence_issue
from demo.summaries import PRESENTATIONS, SUMMARIES
from dispatch.runtime import Runtime
from protocols.evidence import VALIDATORS

#: The extension API version this module implements (dispatch.runtime.EXTENSION_API_VERSION).
EXTENSION_API = 1


def register(runtime: Runtime) -> None:
    for kind in RESOURCE_KINDS:
        runtime.register_resource_kind(kind, presentation=PRESENTATIONS.get(kind.name))
    for name, factory in CONTRACTS.items():
        handler = HANDLERS[name]
        contract = factory(handler.implementation_fingerprint)
        research = contract.evidence is not None or contract.attestation is not None
        runtime.register(contract, handler,
                         on_outcome=evidence_issue if contract.evidence is not None else None,
                         admission=(attestation_check, evidence_check) if research else (),
                         summary=SUMMARIES[name])
    for spec in VALIDATORS:
        runtime.register_validator(spec.name, spec.version, spec.policy, spec.fn)
