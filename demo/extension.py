"""The demo as a runtime extension: `settings.DISPATCH_EXTENSIONS` names this module by default.

It implements extension API version 1 (`EXTENSION_API`, docs/compatibility.md).
`register(runtime)` adds the demo's resource kinds (`email_draft`, `question`, `report`, each
with its table from `demo.tables`) and contracts, each with its handler from
`demo.handlers.HANDLERS` (read at registration, so a test that swaps a handler there and
rebuilds the runtime registers the contract under the new fingerprint) and, for the research
contracts, the outcome hook and admission checks of `demo.hooks`; and the validators the pure
core ships (`protocols.evidence.VALIDATORS`: `cited-sources@1`). Each contract comes with its
one-sentence summary and the email draft with its reading as an email (`demo.summaries`), and
with the words that say how to check its destination for an effect (`HOW_TO_CHECK`), for the
console.
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

#: How an admin looks at each demo destination for an operation's effect (`{key}`: the
#: operation id, which the destinations record as their key).
HOW_TO_CHECK = {
    "email.send": "Search the SMTP sink for the message id {key}@console.invalid: "
                  "`python manage.py destinations --json` lists every message it holds "
                  "under \"email\", with its message_id. A message there means it was sent; "
                  "none there does not prove it was not (mail may be on its way).",
    "payments.transfer": "Ask the bank for the transfer with key {key}: "
                         "`python manage.py destinations --json` lists every transfer it "
                         "holds under \"bank\", each with its key. The bank deduplicates on "
                         "the key, so its answer is authoritative both ways.",
    "report.publish": "Ask the publisher for the publication with key {key}: "
                      "`python manage.py destinations --json` lists them under "
                      "\"publications\", each with its key.",
}


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
                         summary=SUMMARIES[name], how_to_check=HOW_TO_CHECK.get(name, ""))
    for spec in VALIDATORS:
        runtime.register_validator(spec.name, spec.version, spec.policy, spec.fn)
