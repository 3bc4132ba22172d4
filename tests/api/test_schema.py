"""The OpenAPI schema: valid, served, and documenting every error each call can answer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db

ALWAYS = {"401", "429", "503"}
WITH_BODY = {"400", "413", "415", "422"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    response = Client().get("/api/v1/schema/", {"format": "json"})
    assert response.status_code == 200
    return dict(response.json())


def test_schema_validates_without_warnings(tmp_path: Path) -> None:
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    assert yaml.safe_load(out.read_text())["paths"]


def test_every_call_of_design_7_is_documented(document: dict[str, Any]) -> None:
    calls = {(method.upper(), path) for path, item in document["paths"].items()
             for method in item}
    assert calls == {
        ("GET", "/api/v1/contracts/"), ("POST", "/api/v1/resources/"),
        ("GET", "/api/v1/resources/{resource_id}/"),
        ("POST", "/api/v1/resources/{resource_id}/revisions/"),
        ("POST", "/api/v1/proposals/"), ("GET", "/api/v1/proposals/{proposal_id}/"),
        ("POST", "/api/v1/proposals/{proposal_id}/dispatch/"),
        ("POST", "/api/v1/approvals/{approval_id}/decision/"),
        ("GET", "/api/v1/operations/{operation_id}/"),
        ("POST", "/api/v1/operations/{operation_id}/resolve/"),
        ("POST", "/api/v1/operations/{operation_id}/reauthorize/"),
        ("POST", "/api/v1/renewals/{renewal_id}/decision/"),
        ("POST", "/api/v1/operations/{operation_id}/cancel/"),
        ("GET", "/api/v1/grants/"), ("POST", "/api/v1/grants/{grant_id}/delegate/"),
        ("GET", "/api/v1/audit/"),
        ("GET", "/api/v1/audit/checkpoints/"),
        # docs/design.md#evidence
        ("GET", "/api/v1/evidence/{receipt_id}/"),
        ("GET", "/api/v1/attestations/{attestation_id}/"),
    } | BEYOND_DESIGN_7 | BEYOND_DESIGN_7_WITHOUT_BODY | ADMIN_API | ADMIN_API_WITHOUT_BODY


#: Calls added to version 1 after its first list: the proposal's equivalent of
#: `operations/{id}/cancel/` (docs/design.md#cancellation: cancellation before the claim too);
#: the answer of a parked workflow step (docs/workflows.md#waiting-steps); and an agent's
#: webhooks (docs/design.md#notifications; only the POST has a body).
BEYOND_DESIGN_7 = {
    ("POST", "/api/v1/proposals/{proposal_id}/cancel/"),
    ("POST", "/api/v1/executions/{execution_id}/input/"),
    ("POST", "/api/v1/webhooks/"),
    # the cancellation of a whole run (docs/workflows.md#deadlines)
    ("POST", "/api/v1/executions/{execution_id}/cancel/"),
}
BEYOND_DESIGN_7_WITHOUT_BODY = {
    ("GET", "/api/v1/webhooks/"), ("DELETE", "/api/v1/webhooks/{webhook_id}/"),
}
#: The admin API and the approvals list (docs/rest-api.md#admin); the POSTs have a body.
ADMIN_API = {
    ("POST", "/api/v1/agents/"), ("POST", "/api/v1/grants/"), ("POST", "/api/v1/pauses/"),
}
ADMIN_API_WITHOUT_BODY = {
    ("GET", "/api/v1/approvals/"), ("GET", "/api/v1/approvals/{approval_id}/"),
    ("POST", "/api/v1/agents/{agent_id}/token/"), ("DELETE", "/api/v1/grants/{grant_id}/"),
    ("DELETE", "/api/v1/pauses/{pause_id}/"),
}
#: The POST calls of version 1's first list (docs/rest-api.md#calls), each with a body.
DESIGN_7_POSTS = 10


def test_every_error_status_is_documented_with_the_error_body(
    document: dict[str, Any],
) -> None:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            statuses = set(operation["responses"])
            expected = ALWAYS | (WITH_BODY if "requestBody" in operation else set())
            assert expected <= statuses, (method, path, expected - statuses)
            if "{" in path:
                assert "404" in statuses, (method, path)
            for status, response in operation["responses"].items():
                if status == "204":  # a deletion answers no body
                    assert "content" not in response, (method, path)
                    continue
                ref = response["content"]["application/json"]["schema"]["$ref"]
                if status.startswith(("4", "5")):
                    assert ref == f"#/components/schemas/Error{status}", (method, path)
                    assert response["description"].startswith("Codes: `")
            assert operation["security"] == [{"bearerAuth": []}, {"sessionAuth": []}]


def test_error_codes_are_enumerated_per_status(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert schemas["Error404Body"]["properties"]["code"]["enum"] == ["unknown_operation",
                                                                     "not_found"]
    assert schemas["Error401Body"]["properties"]["code"]["enum"] == ["unauthenticated"]
    details = schemas["Error422Body"]["properties"]["details"]["properties"]
    assert details["errors"]["maxItems"] == 50
    assert details["error_count"]["type"] == "integer"


def test_request_bodies_refuse_unknown_members(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    inputs = [name for name in schemas if name.endswith("InputRequest")]
    # one per POST call with a body
    assert len(inputs) == DESIGN_7_POSTS + len(BEYOND_DESIGN_7) + len(ADMIN_API)
    assert all(schemas[name]["additionalProperties"] is False for name in inputs)


def test_intake_documents_the_call_id_and_the_repeat_answer(document: dict[str, Any]) -> None:
    operation = document["paths"]["/api/v1/proposals/"]["post"]
    output = {"$ref": "#/components/schemas/ProposalOutput"}
    for status in ("200", "201"):
        assert operation["responses"][status]["content"]["application/json"]["schema"] == output
    assert "proposal_mismatch" in operation["responses"]["409"]["description"]
    call_id = document["components"]["schemas"]["ProposalCreateInputRequest"]["properties"][
        "call_id"]
    assert (call_id["minLength"], call_id["maxLength"], call_id["pattern"]) == (
        1, 200, "^[ -~]{1,200}$")


def test_resource_calls_document_tool_not_permitted(document: dict[str, Any]) -> None:
    for path in ("/api/v1/resources/", "/api/v1/resources/{resource_id}/revisions/"):
        responses = document["paths"][path]["post"]["responses"]
        assert "`tool_not_permitted`" in responses["403"]["description"], path


def test_every_request_body_is_required(document: dict[str, Any]) -> None:
    # Even where every member is optional: an empty body is `malformed_request`
    # (docs/design.md#denials).
    bodies = {(method, path): operation["requestBody"]
              for path, item in document["paths"].items()
              for method, operation in item.items() if "requestBody" in operation}
    assert len(bodies) == DESIGN_7_POSTS + len(BEYOND_DESIGN_7) + len(ADMIN_API)
    assert all(body.get("required") is True for body in bodies.values()), bodies


def test_docs_page_is_served_without_inline_script_or_style() -> None:
    response = Client().get("/api/v1/docs/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "swagger-ui" in body
    assert "<script>" not in body
    assert "<style" not in body
    assert '<script src="/api/v1/docs/?script="></script>' in body
    script = Client().get("/api/v1/docs/?script=")
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert "/api/v1/schema/" in script.content.decode()


def _resource_state_enums(document: dict[str, Any]) -> list[list[str]]:
    found = []
    for component in document["components"]["schemas"].values():
        state = component.get("properties", {}).get("state", {})
        if {"id", "kind", "revision", "digest", "payload"} <= set(component.get("properties", {})):
            found.append(state["enum"])
    return found


def test_a_resources_state_lists_the_registered_kinds_states(
        document: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A resource's states are its kind's: the schema lists those of the registered kinds (the
    demo's here), not a fixed list of the core's, and follows a kind a deployment adds."""
    from dispatch.runtime import get_runtime
    from protocols.lifecycle import ResourceProtocol

    registered = sorted({str(state) for kind in get_runtime().resource_kinds.values()
                         for state in kind.protocol.states})
    assert {"sent", "published", "answered"} <= set(registered)
    assert _resource_state_enums(document) == [registered]

    kind = SimpleNamespace(protocol=ResourceProtocol(name="ticket", initial="new",
                                                     transitions={("new", "edit"): "new"}))
    runtime = SimpleNamespace(resource_kinds={"ticket": kind})
    monkeypatch.setattr("dispatch.api.schema.get_runtime", lambda: runtime)
    response = Client().get("/api/v1/schema/", {"format": "json"})
    assert _resource_state_enums(response.json()) == [["new"]]
