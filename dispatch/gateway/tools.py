"""The MCP gateway's tools (docs/mcp.md#tools): one per contract of the agent's tool set, plus
the gateway's own three.

A tool is described from its contract alone: its name is the contract's qualified name
(docs/mcp.md#tools), or with `MCP_TOOL_NAMES=model` that name with each `.` replaced by `_`
(`email_send`, a name every model API accepts: `protocols.tool_names`); its title the qualified
name, its input schema the contract's, its annotations follow the contract's
effects and idempotency, and its description says what approval it needs. The listing is a
convenience for the model, never the check: a call of a contract outside the tool set reaches
the dispatcher and is refused there (`tool_not_permitted`).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from dispatch.selectors.contracts import contracts_of_tool_set
from protocols.contracts import Effect, Idempotency, OperationContract
from protocols.jsontypes import JSONObject
from protocols.tool_names import GATEWAY_TOOLS as GATEWAY_TOOL_NAMES
from protocols.tool_names import tool_name

RESOURCE_CREATE, RESOURCE_REVISE, PROPOSAL_STATUS = GATEWAY_TOOL_NAMES

_ID = {"type": "string", "minLength": 1, "maxLength": 40}

#: The gateway's own tools: (description, input schema).
GATEWAY_TOOLS: dict[str, tuple[str, JSONObject]] = {
    RESOURCE_CREATE: (
        "Create a resource (a draft, a question, ...) that an action of yours will refer to. "
        "Answers the resource: its id, revision, digest, state and payload.",
        {"type": "object", "additionalProperties": False, "required": ["kind", "payload"],
         "properties": {"kind": {"type": "string", "minLength": 1, "maxLength": 50,
                                 "description": "A resource kind one of your tools takes."},
                        "payload": {"type": "object",
                                    "description": "Checked against the kind's schema."}}},
    ),
    RESOURCE_REVISE: (
        "Edit a resource you created: a new revision from the one you read "
        "(`base_revision`); refused `stale_revision` if someone edited it since.",
        {"type": "object", "additionalProperties": False,
         "required": ["id", "base_revision", "payload"],
         "properties": {"id": _ID,
                        "base_revision": {"type": "integer", "minimum": 1,
                                          "maximum": 2**31 - 1},
                        "payload": {"type": "object"}}},
    ),
    PROPOSAL_STATUS: (
        "Where an action you proposed stands: the proposal, its approval, and its operation "
        "(id, state, result) once it ran. Use it after an `approval_pending` answer.",
        {"type": "object", "additionalProperties": False, "required": ["proposal_id"],
         "properties": {"proposal_id": _ID}},
    ),
}

_WRITES = frozenset({Effect.EXTERNAL_WRITE, Effect.FINANCIAL_WRITE})


@dataclass(frozen=True)
class ToolSpec:
    """One tool as `tools/list` describes it (`mcp_tool` makes the SDK's type of it): `name`
    is the tool name a model calls, `title` the qualified name it stands for."""

    name: str
    title: str
    description: str
    input_schema: JSONObject
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    gated: bool = False  # needs an operator's approval: served as a task where the client can


def listed_name(qualified: str) -> str:
    """The name `tools/list` gives the tool of `qualified`: as it is, or its model-safe tool
    name where the deployment asks for those (`MCP_TOOL_NAMES=model`, docs/mcp.md#names). A
    call by either name works whatever the setting."""
    return tool_name(qualified) if settings.MCP_TOOL_NAMES == "model" else qualified


def contract_tool(contract: OperationContract) -> ToolSpec:
    approval = contract.approval_requirement
    effects = ", ".join(sorted(e.value for e in contract.possible_effects)) or "none"
    if approval is None:
        how = "Runs without an approval."
    else:
        how = (f"Needs an operator's approval (role {approval.role}) of these exact arguments "
               "before it runs; the call waits for the decision or answers `approval_pending` "
               f"with a proposal id for `{listed_name(PROPOSAL_STATUS)}`. Nothing you write in "
               "the arguments can approve it.")
    writes = bool(contract.possible_effects & _WRITES)
    return ToolSpec(
        name=listed_name(contract.qualified_name), title=contract.qualified_name,
        description=(f"{contract.qualified_name} (contract v{contract.contract_version}). "
                     f"Effects: {effects}. {how}"),
        input_schema=dict(contract.input_type),
        read_only=contract.possible_effects <= {Effect.READ},
        destructive=writes,
        idempotent=contract.idempotency_contract is Idempotency.IDEMPOTENT,
        gated=approval is not None,
    )


def tools_for(tool_set: list[str] | tuple[str, ...]) -> list[ToolSpec]:
    """The tools of a principal's tool set: its contracts (in the registry's order) that the
    runtime knows, then the gateway's own."""
    specs = [contract_tool(contract) for contract in contracts_of_tool_set(tool_set)]
    specs += [ToolSpec(name=listed_name(name), title=name, description=description,
                       input_schema=schema, read_only=name == PROPOSAL_STATUS, destructive=False,
                       idempotent=name == PROPOSAL_STATUS)
              for name, (description, schema) in GATEWAY_TOOLS.items()]
    return specs
