"""The API's calls as values, and the reading of their answers, shared by `Client` and
`AsyncClient` so that the two can never disagree on a path, a body or a refusal."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote, urlencode

import httpx

from exact_console._version import __version__
from exact_console.errors import Denied, TransportError
from exact_console.shapes import (
    AgentCreated,
    AgentToken,
    Approval,
    ApprovalsPage,
    AuditPage,
    ContractsPage,
    Decision,
    Dispatched,
    Grant,
    GrantsPage,
    Jwks,
    Operation,
    Pause,
    Proposal,
    Resource,
    Webhook,
    WebhookCreated,
    WebhooksPage,
)

#: The shape of a call's answer (`exact_console.shapes`): a type only, never checked.
A = TypeVar("A")

#: Operation states after which nothing more happens without a human.
SETTLED_STATES = frozenset({"completed", "failed_no_effect", "unknown", "reconciled_completed",
                            "reconciled_no_effect"})

API_PREFIX = "/api/v1/"

#: A wait polls after POLL_FIRST seconds, then twice as long each time up to POLL_MAX.
POLL_FIRST = 0.2
POLL_MAX = 2.0


@dataclass(frozen=True)
class Call(Generic[A]):
    """One request. `retry` says whether sending it again is safe whatever became of the first
    try: a read, or a proposal whose `call_id` makes the console answer the first one again
    (`exact_console._retry` decides when)."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    retry: bool = False


def api_root(base_url: str) -> str:
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must be an http(s) URL of the console's root: {base_url!r}")
    return base_url.rstrip("/") + API_PREFIX


#: The header naming one call on both sides: a fresh id per call, the same on each of its tries;
#: the console puts it on every log line of the request and echoes it in its answer.
REQUEST_ID = "X-Request-ID"


def request_id() -> str:
    return uuid.uuid4().hex


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json",
            "User-Agent": f"exact-console/{__version__}"}


def _id(value: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"an id is a string, not {type(value).__name__}")
    return quote(value, safe="")


def _query(**params: str | int | None) -> str:
    present = {k: v for k, v in params.items() if v is not None}
    return "?" + urlencode(present) if present else ""


def _reason(reason: str | None) -> dict[str, Any]:
    return {} if reason is None else {"reason": reason}


def _get(path: str) -> Call[Any]:
    return Call("GET", path, retry=True)


# --- one builder per row of the API's table of calls ---------------------------------------------

def contracts(permitted: bool) -> Call[ContractsPage]:
    return _get("contracts/" + _query(permitted="true" if permitted else None))


def create_resource(kind: str, payload: dict[str, Any]) -> Call[Resource]:
    return Call("POST", "resources/", {"kind": kind, "payload": payload})


def resource(resource_id: str) -> Call[Resource]:
    return _get(f"resources/{_id(resource_id)}/")


def revise(resource_id: str, base_revision: int,
           payload: dict[str, Any]) -> Call[Resource]:
    return Call("POST", f"resources/{_id(resource_id)}/revisions/",
                {"base_revision": base_revision, "payload": payload})


def propose(operation: str, arguments: dict[str, Any], *, call_id: str | None,
            execution_id: str | None, dispatch_on_approval: bool | None,
            approval_expires_in: int | None) -> Call[Proposal]:
    body: dict[str, Any] = {"operation": operation, "arguments": arguments}
    if execution_id is not None:
        body["execution_id"] = execution_id
    if call_id is not None:
        body["call_id"] = call_id
    if approval_expires_in is not None:
        body["approval_expires_in"] = approval_expires_in
    if dispatch_on_approval is not None:
        body["dispatch_on_approval"] = dispatch_on_approval
    return Call("POST", "proposals/", body, retry=call_id is not None)


def proposal(proposal_id: str) -> Call[Proposal]:
    return _get(f"proposals/{_id(proposal_id)}/")


def dispatch(proposal_id: str, permit: str | None) -> Call[Dispatched]:
    body = {} if permit is None else {"permit": permit}
    return Call("POST", f"proposals/{_id(proposal_id)}/dispatch/", body)


def cancel_proposal(proposal_id: str, reason: str | None) -> Call[Proposal]:
    return Call("POST", f"proposals/{_id(proposal_id)}/cancel/", _reason(reason))


def decide(approval_id: str, decision: str, digest: str,
           reason: str | None) -> Call[Decision]:
    body = {"decision": decision, "digest": digest, **_reason(reason)}
    return Call("POST", f"approvals/{_id(approval_id)}/decision/", body)


def approvals(state: str | None, cursor: str | None,
              page_size: int | None) -> Call[ApprovalsPage]:
    return _get("approvals/" + _query(state=state, cursor=cursor, page_size=page_size))


def approval(approval_id: str) -> Call[Approval]:
    return _get(f"approvals/{_id(approval_id)}/")


def operation(operation_id: str) -> Call[Operation]:
    return _get(f"operations/{_id(operation_id)}/")


def resolve(operation_id: str, outcome: str, evidence: str) -> Call[Operation]:
    return Call("POST", f"operations/{_id(operation_id)}/resolve/",
                {"outcome": outcome, "evidence": evidence})


def cancel_operation(operation_id: str, reason: str | None) -> Call[Operation]:
    return Call("POST", f"operations/{_id(operation_id)}/cancel/", _reason(reason))


def reauthorize(operation_id: str, reason: str | None) -> Call[dict[str, Any]]:
    return Call("POST", f"operations/{_id(operation_id)}/reauthorize/", _reason(reason))


def decide_renewal(renewal_id: str, decision: str, digest: str,
                   reason: str | None) -> Call[dict[str, Any]]:
    body = {"decision": decision, "digest": digest, **_reason(reason)}
    return Call("POST", f"renewals/{_id(renewal_id)}/decision/", body)


def grants(cursor: str | None, page_size: int | None) -> Call[GrantsPage]:
    return _get("grants/" + _query(cursor=cursor, page_size=page_size))


def delegate(grant_id: str, subject: str, operations: list[str], scope: dict[str, Any],
             expires_at: str | None) -> Call[dict[str, Any]]:
    body: dict[str, Any] = {"subject": subject, "operations": operations, "scope": scope}
    if expires_at is not None:
        body["expires_at"] = expires_at
    return Call("POST", f"grants/{_id(grant_id)}/delegate/", body)


def create_grant(subject: str, operation: str, scope: dict[str, Any],
                 expires_at: str | None) -> Call[Grant]:
    body: dict[str, Any] = {"subject": subject, "operation": operation, "scope": scope}
    if expires_at is not None:
        body["expires_at"] = expires_at
    return Call("POST", "grants/", body)


def revoke_grant(grant_id: str) -> Call[None]:
    return Call("DELETE", f"grants/{_id(grant_id)}/")


def create_agent(name: str, tools: list[str]) -> Call[AgentCreated]:
    return Call("POST", "agents/", {"name": name, "tools": tools})


def rotate_agent_token(agent_id: str) -> Call[AgentToken]:
    return Call("POST", f"agents/{_id(agent_id)}/token/")


def pause(operation: str | None, agent: str | None, reason: str | None) -> Call[Pause]:
    body = {name: value for name, value in
            (("operation", operation), ("agent", agent), ("reason", reason))
            if value is not None}
    return Call("POST", "pauses/", body)


def resume(pause_id: str) -> Call[None]:
    return Call("DELETE", f"pauses/{_id(pause_id)}/")


def webhooks() -> Call[WebhooksPage]:
    return _get("webhooks/")


def create_webhook(url: str, events: list[str]) -> Call[WebhookCreated]:
    # Never sent again: a second endpoint, with its own secret, could result.
    return Call("POST", "webhooks/", {"url": url, "events": events})


def delete_webhook(webhook_id: str) -> Call[Webhook]:
    return Call("DELETE", f"webhooks/{_id(webhook_id)}/")


def keys() -> Call[Jwks]:
    return _get("keys/")


def audit(operation: str | None, proposal: str | None, kind: str | None, cursor: str | None,
          page_size: int | None) -> Call[AuditPage]:
    return _get("audit/" + _query(operation=operation, proposal=proposal, kind=kind,
                                  cursor=cursor, page_size=page_size))


def next_page(root: str, page: Mapping[str, Any]) -> Call[dict[str, Any]] | None:
    """The call for the page after `page`, or None at the end. The link must be under the
    client's own API root: the bearer token is never sent anywhere else."""
    link = page.get("next")
    if not link:
        return None
    if not isinstance(link, str) or not link.startswith(root):
        raise TransportError(f"the page's next link is not under {root}: {link!r}")
    return _get(link[len(root):])


# --- answers -------------------------------------------------------------------------------------

#: A success without a body (a deletion).
NO_CONTENT = 204


def answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON object of a success (`{}` for a 204, which has no body), or the refusal of an
    error envelope raised as `Denied`."""
    if response.status_code == NO_CONTENT:
        return {}
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    if response.is_success:
        if not isinstance(body, dict):
            raise TransportError(f"{response.request.method} {response.request.url}: status "
                                 f"{response.status_code}, and the answer is not a JSON object")
        return body
    error = body.get("error") if isinstance(body, dict) else None
    if (isinstance(error, dict) and isinstance(error.get("code"), str)
            and isinstance(error.get("message"), str)):
        details = error.get("details")
        raise Denied(response.status_code, error["code"], error["message"],
                     details if isinstance(details, dict) else {})
    raise TransportError(f"{response.request.method} {response.request.url}: status "
                         f"{response.status_code}, and the answer is not the API's error body")


def decided(proposal: Mapping[str, Any]) -> bool:
    """Whether a proposal no longer waits for a human: no approval needed, or it was decided."""
    approval = proposal.get("approval")
    return not (isinstance(approval, dict) and approval.get("state") == "pending")


def settled(operation: Mapping[str, Any]) -> bool:
    return operation.get("state") in SETTLED_STATES


def next_poll(delay: float) -> float:
    return min(delay * 2, POLL_MAX)


class Schedule:
    """A bounded wait's pauses: after each read, `pause()` is how long to sleep before the next
    read (growing from POLL_FIRST to POLL_MAX, the last one ending at the deadline), or None
    once the deadline has passed."""

    def __init__(self, timeout: float) -> None:
        self.deadline = time.monotonic() + timeout
        self.delay = POLL_FIRST

    def pause(self) -> float | None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return None
        pause = min(self.delay, remaining)
        self.delay = next_poll(self.delay)
        return pause
