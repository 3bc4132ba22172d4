"""What the console reads of the registered contracts: their names, the contract a proposal
was made under, the sentence on top of an approval, how its resource arguments read, and the
grant scope keys each one's authority requires. None of these touches the database.
"""

from __future__ import annotations

from dispatch.presentation import MessagePresentation, Summary, summarize
from dispatch.runtime import get_runtime
from protocols.contracts import OperationContract
from protocols.jsontypes import JSONObject


def operation_names(*, approval_only: bool = False) -> list[str]:
    """Qualified names of the registered contracts (those needing approval, if asked)."""
    names = {c.qualified_name for c in get_runtime().registry
             if not approval_only or c.requires_approval}
    return sorted(names)


def contracts_of_tool_set(tool_set: list[str] | tuple[str, ...]) -> list[OperationContract]:
    """The contracts a principal may propose: the newest version of each contract of its tool
    set, in the registry's order. What the MCP gateway lists as tools and `GET
    contracts/?permitted=true` answers (docs/rest-api.md#calls), so that every agent framework
    is offered the same tools; the dispatcher still decides each call (`tool_not_permitted`)."""
    allowed = set(tool_set)
    newest = {contract.qualified_name: contract for contract in get_runtime().registry
              if contract.qualified_name in allowed}
    return list(newest.values())


def contract_for_fingerprint(fingerprint: str) -> OperationContract | None:
    """The registered contract a proposal was made under, or None if it is gone."""
    return get_runtime().registry.by_fingerprint(fingerprint)


def action_summary(operation: str, contract: OperationContract | None,
                   arguments: JSONObject) -> Summary:
    """The sentence on top of an approval (`dispatch.presentation.summarize`): the one its
    contract's extension declared, or `<operation> with N arguments`."""
    summarizer = None if contract is None else get_runtime().summaries.get(
        (contract.qualified_name, contract.contract_version))
    return summarize(summarizer, operation, arguments)


def resource_presentations(
    contract: OperationContract | None,
) -> dict[str, tuple[str, MessagePresentation]]:
    """For each resource argument of `contract` whose kind declares how its payload reads:
    the kind and its presentation, by argument name."""
    if contract is None:
        return {}
    declared = get_runtime().presentations
    return {argument: (kind, declared[kind])
            for argument, kind in sorted(contract.protocol_preconditions.items())
            if kind in declared}


def operation_authority_keys() -> dict[str, list[str]]:
    """For each registered operation, the grant scope keys its authority requirements name."""
    keys: dict[str, list[str]] = {}
    for contract in get_runtime().registry:
        keys[contract.qualified_name] = sorted({r.key for r in contract.authority_requirements})
    return keys
