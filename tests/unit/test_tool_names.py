"""A contract's tool name is what every major model API accepts as a function's name
(docs/mcp.md#names): `email.send` is offered as `email_send`, one-to-one, so two contracts (or a
contract and one of the MCP gateway's own tools) that would share a tool name are refused when the
second registers, saying which."""

from __future__ import annotations

from dataclasses import replace

import pytest

from demo.contracts import email_send
from demo.handlers import EmailSendHandler
from dispatch.runtime import Runtime
from protocols.contracts import ContractRegistry
from protocols.grants import Policy
from protocols.tool_names import TOOL_NAME, tool_name, tool_name_problem


def fresh_runtime() -> Runtime:
    return Runtime(registry=ContractRegistry(), handlers={},
                   policy=Policy(allowed_effects=frozenset({"external_write"})))


def register(runtime: Runtime, name: str) -> None:
    class Named(EmailSendHandler):
        pass

    Named.name = name
    handler = Named()
    runtime.register(replace(email_send(handler.implementation_fingerprint),
                             qualified_name=name), handler)


@pytest.mark.parametrize(("qualified", "tool"), [
    ("email.send", "email_send"), ("crm.lookup", "crm_lookup"),
    ("tickets.create_ticket", "tickets_create_ticket"), ("a.b.c", "a_b_c")])
def test_a_dot_becomes_an_underscore(qualified: str, tool: str) -> None:
    assert tool_name(qualified) == tool
    assert TOOL_NAME.fullmatch(tool)
    assert tool_name_problem(qualified, {}) is None


def test_a_name_no_model_api_accepts_is_a_problem_saying_why() -> None:
    long = "a." + "b" * 63
    assert "at most 64 characters" in str(tool_name_problem(long, {}))
    assert "not one model APIs accept" in str(tool_name_problem("crm.look up", {}))


def test_the_same_contract_again_is_no_collision() -> None:
    assert tool_name_problem("email.send", {"email_send": "email.send"}) is None


def test_registration_maps_tool_names_both_ways() -> None:
    runtime = fresh_runtime()
    register(runtime, "email.send")
    register(runtime, "email.send")  # idempotent, as the contract's own registration is
    assert runtime.operation_of_tool("email_send") == "email.send"
    assert runtime.operation_of_tool("email.send") == "email.send"  # the dotted name stays
    assert runtime.operation_of_tool("proposal_status") == "proposal.status"
    assert runtime.operation_of_tool("nothing_here") == "nothing_here"


@pytest.mark.parametrize(("first", "second"), [
    ("email.send", "email_send"), ("a.b_c", "a_b.c")])
def test_two_contracts_sharing_a_tool_name_are_refused_at_the_second(first: str,
                                                                      second: str) -> None:
    runtime = fresh_runtime()
    register(runtime, first)
    with pytest.raises(ValueError) as refused:
        register(runtime, second)
    assert str(refused.value) == (
        f"{second}: its tool name {tool_name(second)!r} is already {first!r}'s (each '.' of a "
        "qualified name becomes '_'): rename one of the two")
    assert [c.qualified_name for c in runtime.registry] == [first]
    assert runtime.operation_of_tool(tool_name(first)) == first


def test_a_contract_taking_a_gateway_tools_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'resource_create' is already 'resource\.create''s"):
        register(fresh_runtime(), "resource_create")


def test_a_contract_whose_tool_name_is_too_long_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 64 characters"):
        register(fresh_runtime(), "tickets." + "x" * 60)
