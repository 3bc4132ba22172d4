"""An id holding any string that names nothing visible, whatever its length or shape, is
`not_found`; only a non-string is `schema_invalid` (docs/design.md#denials). Every id of
docs/rest-api.md#calls: the ids in paths, `permit`, a resource `{"id","revision"}` inside
`arguments`, a delegation's `subject` (a principal's name), and the audit's id filters (which select
nothing rather than refuse)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from tests.api.conftest import Caller, assert_error, schema_errors
from tests.api.test_tenant_isolation import BY_ID
from tests.conftest import MAILBOX, World

pytestmark = pytest.mark.django_db

#: Strings that cannot be anybody's id: too long for the id column, or the wrong shape.
NAMES_NOTHING = [
    pytest.param("a" * 41, id="41-chars"),
    pytest.param("a" * 2000, id="2000-chars"),
    pytest.param("prm x", id="space"),
    pytest.param("a/b", id="slash"),
    pytest.param("é💥", id="unicode"),
]
#: JSON values that are not strings at all.
NOT_STRINGS = [pytest.param(5, id="number"), pytest.param(True, id="boolean"),
               pytest.param([], id="array"), pytest.param({}, id="object")]


@pytest.mark.parametrize("value", NAMES_NOTHING)
@pytest.mark.parametrize("call", list(BY_ID))
def test_path_id_naming_nothing_is_not_found(
    owner: Caller, call: str, value: str,
) -> None:
    # The path id is checked before the body, so the bodies need not name anything real.
    kind, method, path, body = BY_ID[call]
    response = owner.call(method, path.format(id=quote(value, safe="")), body)
    details = assert_error(response, 404, "not_found")
    # A slash makes another path, which no route matches: nothing to echo then.
    assert details == ({} if "/" in value else {"kind": kind, "id": value})


# --- ids in bodies: `permit`, a resource `{"id","revision"}` inside `arguments`, `subject` ------


def _dispatch_with_permit(owner: Caller, world: World, value: Any) -> Any:
    # A proposal waiting for its approval: the permit is checked before the approval state.
    proposal = world.propose_email(world.draft())
    return owner.post(f"proposals/{proposal.id}/dispatch/", {"permit": value})


def _propose_with_draft(owner: Caller, world: World, value: Any) -> Any:
    return owner.post("proposals/", {"operation": "email.send",
                                     "arguments": {"draft": {"id": value, "revision": 1}}})


def _delegate_to(owner: Caller, world: World, value: Any) -> Any:
    """`subject` is a principal's name: it selects one as an id does."""
    grants = owner.get("grants/").json()["results"]
    email = next(g for g in grants if g["operations"] == ["email.send"])
    return owner.post(f"grants/{email['id']}/delegate/", {
        "subject": value, "operations": ["email.send"], "scope": {"mailbox": [MAILBOX]}})


#: field -> (send a body holding the value there, the kind `not_found` names, its pointer)
BODY_IDS: dict[str, tuple[Callable[[Caller, World, Any], Any], str, str]] = {
    "permit": (_dispatch_with_permit, "permit", "/permit"),
    "draft-id": (_propose_with_draft, "resource", "/arguments/draft/id"),
    "subject": (_delegate_to, "principal", "/subject"),
}
def _cases(values: list[Any]) -> list[Any]:
    return [pytest.param(field, case.values[0], id=f"{field}-{case.id}")
            for field in BODY_IDS for case in values]


@pytest.mark.parametrize(("field", "value"), _cases(
    [*NAMES_NOTHING, pytest.param("", id="empty")]))
def test_body_id_naming_nothing_is_not_found(
    owner: Caller, world: World, field: str, value: str,
) -> None:
    send, kind, _ = BODY_IDS[field]
    assert assert_error(send(owner, world, value), 404, "not_found") == {"kind": kind,
                                                                         "id": value}


@pytest.mark.parametrize(("field", "value"), _cases(NOT_STRINGS))
def test_body_id_that_is_not_a_string_is_schema_invalid(
    owner: Caller, world: World, field: str, value: Any,
) -> None:
    send, _, pointer = BODY_IDS[field]
    assert [e["pointer"] for e in schema_errors(send(owner, world, value))] == [pointer]


# --- the audit's id filters: an id naming nothing selects nothing --------------------------------


@pytest.mark.parametrize("name", ["operation", "proposal"])
@pytest.mark.parametrize("value", NAMES_NOTHING)
def test_audit_filter_naming_nothing_selects_nothing(
    caller: Any, world: World, name: str, value: str,
) -> None:
    world.propose_email(world.draft())  # the tenant's audit is not empty
    admin: Caller = caller("admin")
    assert admin.get("audit/").json()["results"]
    response = admin.get("audit/", **{name: value})
    assert response.status_code == 200, response.content
    assert response.json()["results"] == []
