"""An HTTP action file read by the pure core (docs/design.md#http-actions,
`protocols.http_actions`): a valid file is one contract whose fingerprint pins the file's
canonical content; every problem is a diagnostic naming the file, the line and the key; an
answer's status means what the design says."""

from __future__ import annotations

import json

import pytest

from protocols.contracts import Effect, Idempotency, Reconciliation
from protocols.http_action_files import action_parse
from protocols.http_actions import (
    ActionSpec,
    action_contract,
    answer_outcome,
    lookup_url,
    lookup_verdict,
)

VALID = """\
name: tickets.create
version: 1
description: Open a helpdesk ticket.
input_schema:
  type: object
  required: [queue, subject]
  properties:
    queue: {type: string}
    subject: {type: string}
effects: [external_write]
approval: {role: operator}
authority:
  queue: queue
destination:
  name: helpdesk
  url: https://helpdesk.example/tickets
  method: POST
  timeout_s: 10
idempotency: receiver_dedup
retries: 3
lookup:
  url: https://helpdesk.example/tickets/{operation_id}
  present: [200]
  absent: [404]
"""


def parsed(text: str, filename: str = "helpdesk.yaml") -> ActionSpec:
    spec = action_parse(text, filename)
    assert isinstance(spec, ActionSpec), spec
    return spec


def problems(text: str, filename: str = "helpdesk.yaml") -> list[str]:
    found = action_parse(text, filename)
    assert isinstance(found, list), found
    return [d.render() for d in found]


def test_a_valid_file_is_the_contract_it_declares() -> None:
    contract = action_contract(parsed(VALID), "sha256:" + "0" * 64)
    assert (contract.qualified_name, contract.contract_version) == ("tickets.create", 1)
    assert contract.possible_effects == {Effect.EXTERNAL_WRITE}
    assert contract.approval_requirement is not None
    assert contract.approval_requirement.role == "operator"
    assert [(r.key, r.pointer) for r in contract.authority_requirements] == [("queue", "/queue")]
    assert contract.idempotency_contract is Idempotency.RECEIVER_DEDUP
    assert contract.scheduling_contract.max_attempts == 3
    assert contract.scheduling_contract.timeout == 10.0
    assert contract.destination == "helpdesk"
    assert contract.reconciliation is Reconciliation.PRESENCE_AND_ABSENCE


def test_the_same_file_as_json_is_the_same_content() -> None:
    spec = parsed(VALID)
    as_json = json.dumps({**spec.content, "approval": {"role": "operator"}}, indent=2)
    assert parsed(as_json, "helpdesk.json").content_digest == spec.content_digest


def test_any_change_of_the_file_changes_its_content_digest() -> None:
    base = parsed(VALID).content_digest
    assert parsed(VALID.replace("a helpdesk ticket", "a ticket")).content_digest != base
    assert parsed(VALID.replace("present: [200]", "present: [200, 204]")).content_digest != base


@pytest.mark.parametrize(("change", "expected"), [
    (("version: 1", "version: one"), "helpdesk.yaml:2:10: version: must be an integer"),
    (("[external_write]", "[external_write, spend]"),
     "helpdesk.yaml:10:27: effects[1]: must be one of read, external_write, financial_write"),
    (("approval: {role: operator}", "approval: none"),
     "helpdesk.yaml:11:11: approval: none is for a read only"),
    (("  queue: queue\ndest", "  queue: team\ndest"),
     "helpdesk.yaml:13:10: authority.queue: names 'team', which input_schema does not declare"),
    (("url: https://helpdesk.example/tickets\n", "url: ftp://helpdesk.example/tickets\n"),
     "helpdesk.yaml:16:8: destination.url: must be an http or https URL"),
    (("method: POST", "method: GET"), "helpdesk.yaml:17:11: destination.method: must be one of"),
    (("idempotency: receiver_dedup", "idempotency: none"),
     "helpdesk.yaml:20:10: retries: more than one attempt needs idempotency receiver_dedup"),
    (("{operation_id}", "{id}"), "helpdesk.yaml:22:8: lookup.url: must hold {operation_id}"),
    (("absent: [404]", "absent: [200]"), "helpdesk.yaml:24:11: lookup.absent: shares [200]"),
    (("name: tickets.create", "name: Tickets"), "helpdesk.yaml:1:7: name: must be a qualified"),
])
def test_each_problem_names_the_file_the_line_and_the_key(
        change: tuple[str, str], expected: str) -> None:
    assert VALID.count(change[0]) == 1
    found = problems(VALID.replace(*change))
    assert any(line.startswith(expected) for line in found), found


def test_a_missing_key_an_unknown_key_and_a_syntax_error_are_located() -> None:
    found = problems(VALID.replace("description: Open a helpdesk ticket.\n", "") + "colour: red\n")
    assert "helpdesk.yaml:1:1: description: is required" in found
    assert any(line.startswith("helpdesk.yaml:24:1: colour: is not a key") for line in found)
    assert problems("name: [", "x.yaml")[0].startswith("x.yaml:1:")
    assert problems('{"name": "a.b",\n "name": "c.d"}', "x.json") == [
        "x.json:2:2: duplicate key 'name'"]


def test_the_answers_mean_what_the_design_says() -> None:
    assert {answer_outcome(s) for s in (200, 201, 204, 299)} == {"completed"}
    assert {answer_outcome(s) for s in (400, 403, 404, 409, 422)} == {"failed_no_effect"}
    assert {answer_outcome(s) for s in (408, 429, 500, 502, 503, 504)} == {"uncertain"}
    # A status the design does not name proves nothing: maybe an effect.
    assert {answer_outcome(s) for s in (301, 401, 410)} == {"uncertain"}


def test_the_lookup_proves_what_its_statuses_say() -> None:
    lookup = parsed(VALID).lookup
    assert lookup is not None
    assert lookup_verdict(lookup, 200) == "present"
    assert lookup_verdict(lookup, 404) == "absent"
    assert lookup_verdict(lookup, 500) == "unknown"
    assert lookup_url(lookup, "op_a/b") == "https://helpdesk.example/tickets/op_a%2Fb"
