"""Registering a resource kind checks its table holds together, and refuses one that does not,
saying what; nothing refused is left registered."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from jsonschema.exceptions import SchemaError

from dispatch.runtime import Runtime
from protocols.contracts import ContractRegistry, ResourceKind
from protocols.grants import Policy
from protocols.lifecycle import (
    RESOURCE_PROTOCOLS,
    ProtocolTableError,
    ResourceProtocol,
    protocol_problems,
    resource_protocol_register,
)

GOOD = {
    ("open", "propose"): "pending",
    ("pending", "grant"): "approved",
    ("pending", "deny"): "open",
    ("approved", "claim"): "resolving",
    ("resolving", "complete"): "resolved",
    ("resolving", "fail_no_effect"): "open",
    ("resolving", "uncertain"): "unknown",
    ("unknown", "retry"): "resolving",
    ("unknown", "reconcile_completed"): "resolved",
    ("unknown", "reconcile_no_effect"): "open",
}


def table(transitions: dict[tuple[str, str], str], *, final: frozenset[str] = frozenset(
        {"resolved"}), initial: str = "open") -> ResourceProtocol:
    return ResourceProtocol(name="ticket", initial=initial, transitions=transitions,
                            final=final)


def fresh_runtime() -> Runtime:
    return Runtime(registry=ContractRegistry(), handlers={},
                   policy=Policy(allowed_effects=frozenset()))


@pytest.fixture(autouse=True)
def _unregistered() -> Iterator[None]:
    RESOURCE_PROTOCOLS.pop("ticket", None)
    yield
    RESOURCE_PROTOCOLS.pop("ticket", None)


def test_a_table_that_holds_together_has_no_problem() -> None:
    assert protocol_problems(table(GOOD)) == []


@pytest.mark.parametrize(("transitions", "final", "says"), [
    ({**GOOD, ("archived", "edit"): "archived"}, {"resolved"},
     "states unreachable from 'open': ['archived']"),
    ({**GOOD, ("resolved", "edit"): "open"}, {"resolved"},
     "final state 'resolved' has outgoing transitions: ['edit']"),
    (GOOD, {"closed"}, "final state 'closed' is not a state of the table"),
    ({**GOOD, ("open", "edit"): None}, {"resolved"},
     "transition ('open', 'edit') -> None: a state or event that is not a non-empty string"),
    ({**GOOD, ("open", "edit"): ""}, {"resolved"}, "transition ('open', 'edit') -> ''"),
    ({**GOOD, ("open", ""): "open"}, {"resolved"}, "transition ('open', '') -> 'open'"),
])
def test_a_bad_table_is_refused_saying_what(
    transitions: dict[tuple[str, str], str], final: set[str], says: str,
) -> None:
    bad = table(transitions, final=frozenset(final))
    assert any(says in problem for problem in protocol_problems(bad))
    with pytest.raises(ProtocolTableError, match="resource protocol 'ticket'") as refused:
        resource_protocol_register(bad)
    assert says in str(refused.value)
    assert "ticket" not in RESOURCE_PROTOCOLS
    kind = ResourceKind(name="ticket", protocol=bad, payload_schema={"type": "object"})
    runtime = fresh_runtime()
    with pytest.raises(ValueError, match="resource protocol 'ticket'"):
        runtime.register_resource_kind(kind)
    assert runtime.resource_kinds == {}
    assert "ticket" not in RESOURCE_PROTOCOLS


def test_a_good_kind_registers_its_table_once() -> None:
    kind = ResourceKind(name="ticket", protocol=table(GOOD), payload_schema={"type": "object"})
    runtime = fresh_runtime()
    assert runtime.register_resource_kind(kind) is kind
    assert RESOURCE_PROTOCOLS["ticket"] is kind.protocol
    # The same table again is no change; another under the name is refused.
    assert resource_protocol_register(table(GOOD)) is kind.protocol
    with pytest.raises(ProtocolTableError, match="already registered with another table"):
        resource_protocol_register(table({**GOOD, ("open", "edit"): "open"}))


def test_a_kind_is_refused_for_a_table_named_otherwise_a_bad_schema_or_an_unknown_link(
) -> None:
    runtime = fresh_runtime()
    with pytest.raises(ValueError, match="its protocol is named 'ticket', not after the kind"):
        runtime.register_resource_kind(
            ResourceKind(name="invoice", protocol=table(GOOD), payload_schema={}))
    with pytest.raises(ValueError, match="link 'customer' names 'customer'"):
        runtime.register_resource_kind(ResourceKind(
            name="ticket", protocol=table(GOOD), payload_schema={},
            links={"customer": "customer"}))
    with pytest.raises(SchemaError, match="is not valid"):
        runtime.register_resource_kind(ResourceKind(
            name="ticket", protocol=table(GOOD), payload_schema={"type": "nothing"}))
    long = {**GOOD, ("resolving", "complete"): "resolved-and-closed-for-good"}
    with pytest.raises(ValueError, match=r"longer than the store's 20 characters: "
                                         r"\['resolved-and-closed-for-good'\]"):
        runtime.register_resource_kind(ResourceKind(
            name="ticket", protocol=table(long, final=frozenset()), payload_schema={}))
    assert runtime.resource_kinds == {}
    assert "ticket" not in RESOURCE_PROTOCOLS


def test_a_contract_on_a_kind_not_registered_yet_is_refused() -> None:
    from tests.db.test_new_resource_kind import TicketResolveHandler, ticket_resolve

    handler = TicketResolveHandler()
    contract = ticket_resolve(handler.implementation_fingerprint)
    with pytest.raises(ValueError, match=r"no resource kind is registered as \['ticket'\]"):
        fresh_runtime().register(contract, handler)
