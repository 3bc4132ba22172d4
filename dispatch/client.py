"""A thin typed client for agents over the REST API (docs/rest-api.md#calls), standard library only.

    client = ApiClient("http://127.0.0.1:8000", token="eac_...")
    draft = client.resource_create("email_draft", {...})
    proposal = client.proposal_create("email.send", {"draft": {"id": draft["id"],
                                                               "revision": draft["revision"]}})

Every refusal raises `ApiError` with the denial's `code`, `status`, `message` and `details`;
a policy denial is never a network error and the client never retries: whether to try again
is the caller's decision, made on the code. Failures to reach the server raise
`TransportError`. Importing this module does not import Django.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import TypedDict, cast

from protocols.jsontypes import JSONObject, JSONValue

__all__ = [
    "SETTLED_STATES",
    "ApiClient",
    "ApiError",
    "Approval",
    "Attempt",
    "AuditEvent",
    "Contract",
    "Decision",
    "Dispatched",
    "Grant",
    "Operation",
    "Page",
    "Proposal",
    "Resource",
    "TransportError",
]

#: Operation states after which nothing more happens without a human.
SETTLED_STATES = frozenset({"completed", "failed_no_effect", "unknown", "reconciled_completed",
                            "reconciled_no_effect"})


class Contract(TypedDict):
    name: str
    version: int
    fingerprint: str
    input_schema: JSONObject
    effects: list[str]
    approval: JSONObject | None
    idempotency: str


class Resource(TypedDict):
    id: str
    kind: str
    revision: int
    digest: str
    state: str
    payload: JSONObject


class Approval(TypedDict):
    id: str
    state: str
    role: str
    expires_at: str
    permit_id: str | None


class Proposal(TypedDict):
    id: str
    operation: str
    digest: str
    canonical: str
    contract_fingerprint: str
    execution_id: str
    approval: Approval | None
    operation_id: str | None
    operation_state: str | None


class Dispatched(TypedDict):
    operation_id: str
    state: str


class Decision(TypedDict):
    approval: dict[str, str]
    permit_id: str | None


class Attempt(TypedDict):
    number: int
    started_at: str
    ended_at: str | None
    outcome: str | None
    error: str | None


class Operation(TypedDict):
    id: str
    proposal_id: str
    state: str
    attempts: list[Attempt]
    result: JSONValue


class Grant(TypedDict):
    id: str
    issuer: str
    subject: str
    operations: list[str]
    scope: JSONObject
    not_before: str | None
    expires_at: str | None
    revoked_at: str | None
    parent_id: str | None


class AuditEvent(TypedDict):
    id: int
    at: str
    kind: str
    actor: str
    operation_id: str | None
    proposal_id: str | None
    digest: str | None
    details: JSONObject


class Page(TypedDict):
    results: list[JSONValue]
    next: str | None
    previous: str | None


class ApiError(Exception):
    """A refusal from the API: `{"error": {"code", "message", "details"}}` and its status."""

    def __init__(self, status: int, code: str, message: str,
                 details: JSONObject | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


class TransportError(Exception):
    """The server could not be reached, or answered something that is not the API's JSON."""


class ApiClient:
    """One principal's view of the API. `base_url` is the server root, without `/api/v1`."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0,
                 prefix: str = "/api/v1/") -> None:
        self.root = base_url.rstrip("/") + prefix
        self.token = token
        self.timeout = timeout

    # --- calls, one per row of docs/rest-api.md#calls ---------------------------------------------

    def contracts(self) -> list[Contract]:
        return list(self._call("GET", "contracts/")["results"])

    def resource_create(self, kind: str, payload: JSONObject) -> Resource:
        return cast("Resource", self._call("POST", "resources/",
                                           {"kind": kind, "payload": payload}))

    def resource_get(self, resource_id: str) -> Resource:
        return cast("Resource", self._call("GET", f"resources/{_q(resource_id)}/"))

    def revision_create(self, resource_id: str, *, base_revision: int,
                        payload: JSONObject) -> Resource:
        return cast("Resource", self._call(
            "POST", f"resources/{_q(resource_id)}/revisions/",
            {"base_revision": base_revision, "payload": payload}))

    def proposal_create(self, operation: str, arguments: JSONObject, *,
                        execution_id: str | None = None, approval_expires_in: int | None = None,
                        dispatch_on_approval: bool | None = None,
                        call_id: str | None = None) -> Proposal:
        """With a `call_id`, sending this again (after a lost response) returns the same
        proposal, never a second one."""
        body: JSONObject = {"operation": operation, "arguments": arguments}
        if execution_id is not None:
            body["execution_id"] = execution_id
        if call_id is not None:
            body["call_id"] = call_id
        if approval_expires_in is not None:
            body["approval_expires_in"] = approval_expires_in
        if dispatch_on_approval is not None:
            body["dispatch_on_approval"] = dispatch_on_approval
        return cast("Proposal", self._call("POST", "proposals/", body))

    def proposal_get(self, proposal_id: str) -> Proposal:
        return cast("Proposal", self._call("GET", f"proposals/{_q(proposal_id)}/"))

    def proposal_dispatch(self, proposal_id: str, *, permit: str | None = None) -> Dispatched:
        body = {} if permit is None else {"permit": permit}
        return cast("Dispatched",
                    self._call("POST", f"proposals/{_q(proposal_id)}/dispatch/", body))

    def cancel_proposal(self, proposal_id: str, *, reason: str | None = None) -> Proposal:
        """Cancel the proposal's action, before or after its claim; a second cancellation, or
        one of a settled operation, is `protocol_state_invalid` (409)."""
        return cast("Proposal", self._call("POST", f"proposals/{_q(proposal_id)}/cancel/",
                                           _reason(reason)))

    def approval_decide(self, approval_id: str, *, decision: str, digest: str,
                        reason: str | None = None) -> Decision:
        body = {"decision": decision, "digest": digest}
        if reason is not None:
            body["reason"] = reason
        return cast("Decision",
                    self._call("POST", f"approvals/{_q(approval_id)}/decision/", body))

    def operation_get(self, operation_id: str) -> Operation:
        return cast("Operation", self._call("GET", f"operations/{_q(operation_id)}/"))

    def operation_resolve(self, operation_id: str, *, outcome: str, evidence: str) -> Operation:
        return cast("Operation", self._call(
            "POST", f"operations/{_q(operation_id)}/resolve/",
            {"outcome": outcome, "evidence": evidence}))

    def cancel_operation(self, operation_id: str, *, reason: str | None = None) -> Operation:
        """Cancel a claimed operation: it ends without effect at once, or, with an attempt in
        flight, that attempt is asked to stop and its answer is the outcome (poll it)."""
        return cast("Operation", self._call("POST", f"operations/{_q(operation_id)}/cancel/",
                                            _reason(reason)))

    def grants(self, *, cursor: str | None = None, page_size: int | None = None) -> Page:
        return cast("Page", self._call(
            "GET", "grants/" + _query(cursor=cursor, page_size=page_size)))

    def grant_delegate(self, grant_id: str, *, subject: str, operations: list[str],
                       scope: JSONObject, expires_at: str | None = None) -> Grant:
        body: JSONObject = {"subject": subject, "operations": operations, "scope": scope}
        if expires_at is not None:
            body["expires_at"] = expires_at
        return cast("Grant", self._call("POST", f"grants/{_q(grant_id)}/delegate/", body))

    def audit(self, *, operation: str | None = None, proposal: str | None = None,
              kind: str | None = None, cursor: str | None = None,
              page_size: int | None = None) -> Page:
        return cast("Page", self._call(
            "GET", "audit/" + _query(operation=operation, proposal=proposal, kind=kind,
                                     cursor=cursor, page_size=page_size)))

    def next_page(self, page: Page) -> Page | None:
        """The page after `page` (older entries), or None at the end."""
        if not page["next"]:
            return None
        return cast("Page", self._call("GET", page["next"]))

    # --- conveniences -------------------------------------------------------------------------

    def wait_for_operation(self, operation_id: str, *, timeout: float = 30.0,
                           interval: float = 0.1) -> Operation:
        """Poll until the operation settles (a state in `SETTLED_STATES`) or `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            operation = self.operation_get(operation_id)
            if operation["state"] in SETTLED_STATES or time.monotonic() >= deadline:
                return operation
            time.sleep(interval)

    # --- transport ----------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: JSONObject | None = None) -> JSONValue:
        """The decoded JSON answer; its shape is the API's word (the callers cast it)."""
        url = path if path.startswith(("http://", "https://")) else self.root + path
        if not url.startswith(("http://", "https://")):
            raise TransportError(f"only http(s) URLs are supported: {url!r}")
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers,  # noqa: S310
                                         method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                return _decode(response.read(), response.status)
        except urllib.error.HTTPError as error:
            raw = error.read()
            error.close()
            raise _api_error(error.code, raw) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise TransportError(f"{method} {url}: {error}") from error


def _q(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _reason(reason: str | None) -> JSONObject:
    return {} if reason is None else {"reason": reason}


def _query(**params: object) -> str:
    present = {k: v for k, v in params.items() if v is not None}
    return "?" + urllib.parse.urlencode(present) if present else ""


def _decode(raw: bytes, status: int) -> JSONValue:
    try:
        return json.loads(raw)
    except ValueError:
        raise TransportError(f"status {status}: the answer is not JSON") from None


def _api_error(status: int, raw: bytes) -> ApiError | TransportError:
    try:
        error = json.loads(raw)["error"]
        return ApiError(status, str(error["code"]), str(error["message"]),
                        dict(error.get("details") or {}))
    except (ValueError, KeyError, TypeError):
        return TransportError(f"status {status}: the answer is not an API error body")
