"""The evidence chain's resource kinds (docs/design.md#evidence): `question` and `report`,
their payload schemas and protocols, registered by the demo extension. No contract takes them yet,
so no principal may create one: the kind exists, its operations come next."""

from __future__ import annotations

from typing import Any

import pytest

from demo.contracts import QUESTION_KIND, REPORT_KIND
from demo.tables import QUESTION, REPORT
from dispatch.runtime import get_runtime
from dispatch.services.resources import resource_create
from protocols.contracts import compile_schema, schema_errors
from protocols.denials import Denial, DenialCode
from tests.conftest import World

QUESTION_PAYLOAD = {"topic": "bees", "text": "How do bees tell each other where flowers are?"}
REPORT_PAYLOAD = {"question": "res_q1", "title": "The waggle dance", "body": "Bees dance.",
                  "citations": [{"receipt": "evr_abc", "quote": "a waggle dance on the comb"}]}


def errors(schema: Any, payload: Any) -> list[dict[str, str]]:
    return schema_errors(compile_schema(schema), payload, root="/payload")


def test_the_demo_registers_both_kinds_with_their_protocols() -> None:
    kinds = get_runtime().resource_kinds
    assert kinds["question"] is QUESTION_KIND and kinds["question"].protocol is QUESTION
    assert kinds["report"] is REPORT_KIND and kinds["report"].protocol is REPORT


def test_the_payload_schemas_take_design_11s_shapes() -> None:
    assert errors(QUESTION_KIND.payload_schema, QUESTION_PAYLOAD) == []
    assert errors(REPORT_KIND.payload_schema, REPORT_PAYLOAD) == []


@pytest.mark.parametrize(("payload", "pointer"), [
    ({"topic": "Bees!", "text": "x"}, "/payload/topic"),
    ({"topic": "bees"}, "/payload/text"),
    ({**QUESTION_PAYLOAD, "extra": 1}, "/payload/extra"),
])
def test_a_bad_question_is_refused_where_it_is_wrong(payload: Any, pointer: str) -> None:
    assert pointer in {e["pointer"] for e in errors(QUESTION_KIND.payload_schema, payload)}


@pytest.mark.parametrize(("change", "pointer"), [
    ({"citations": [{"receipt": "not-a-receipt", "quote": "q"}]}, "/payload/citations/0/receipt"),
    ({"citations": [{"receipt": "evr_abc", "quote": ""}]}, "/payload/citations/0/quote"),
    ({"citations": [{"receipt": "evr_abc"}]}, "/payload/citations/0/quote"),
    ({"question": 5}, "/payload/question"),
])
def test_a_bad_report_is_refused_where_it_is_wrong(change: dict[str, Any], pointer: str) -> None:
    found = errors(REPORT_KIND.payload_schema, {**REPORT_PAYLOAD, **change})
    assert pointer in {e["pointer"] for e in found}


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "payload"), [("question", QUESTION_PAYLOAD),
                                                ("report", REPORT_PAYLOAD)])
def test_no_principal_may_create_one_until_a_contract_takes_it(
    world: World, kind: str, payload: Any,
) -> None:
    with pytest.raises(Denial) as caught:
        resource_create(principal=world.owner, kind=kind, payload=payload, now=world.now)
    assert caught.value.code is DenialCode.TOOL_NOT_PERMITTED
