"""`Client` and `AsyncClient`: one principal's view of the console's REST API.

Every method is one call of the API (or a wait made of them) and answers the call's JSON object
as a `dict`, annotated with its shape (`exact_console.shapes`). A refusal raises `Denied`; a
wait past its timeout raises `Timeout`; a console that cannot be reached raises
`TransportError`. What is sent again, and when, is `exact_console._retry`'s: calls that are safe
to repeat (reads, and a proposal that carries a `call_id`) after a lost connection or a 429,
502, 503 or 504, any call after a connection that never opened or the API's rate limit, a
wait's reads until its deadline. A refusal is never retried: whether to try again is the
caller's decision, made on its code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar, cast

import httpx

from exact_console import _calls, shapes
from exact_console._calls import Call, Schedule, decided, settled
from exact_console._retry import Attempts, OutOfTime, Retry
from exact_console.errors import Error, Timeout

__all__ = ["AsyncClient", "Client"]

JSON = dict[str, Any]
#: The shape of a call's answer (`exact_console.shapes`).
A = TypeVar("A")
#: How a wait's `Timeout` is made from the last answer read and the last failure, if any.
Expired = Callable[[JSON, Error | None], Timeout]


#: The code of a wait's `Timeout` when no answer at all came within it.
UNREACHABLE = "console_unreachable"


def _seen(error: Error | None) -> str:
    return "" if error is None else f"; then {error}"


def _decision_timeout(proposal_id: str, timeout: float, last: JSON,
                      error: Error | None) -> Timeout:
    code = "approval_pending" if last else UNREACHABLE
    return Timeout(f"proposal {proposal_id}: no decision within {timeout} s{_seen(error)}",
                   code=code, last=last, error=error)


def _outcome_timeout(operation_id: str, timeout: float, last: JSON,
                     error: Error | None) -> Timeout:
    state = str(last["state"]) if "state" in last else UNREACHABLE
    return Timeout(f"operation {operation_id}: still {state} after {timeout} s{_seen(error)}",
                   code=state, last=last, error=error)


def _policy(retries: int | None, retry: Retry | None) -> Retry:
    if retry is not None:
        return retry
    return Retry() if retries is None else Retry(attempts=retries)


class Client:
    """The synchronous client. `base_url` is the console's root (`http://127.0.0.1:8000`), the
    API is under `/api/v1/`. One connection pool serves every call; close it with `close()` or
    by using the client as a context manager. `timeout` bounds each request (seconds);
    `retries` bounds the retries of a single call that may go again; `retry` is the whole
    policy (`exact_console.Retry`, which `retries` then does not change); `transport` replaces
    the network (tests pass an `httpx.MockTransport`)."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0,
                 retries: int | None = None, retry: Retry | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.root = _calls.api_root(base_url)
        self.retry = _policy(retries, retry)
        self._http = httpx.Client(base_url=self.root, headers=_calls.headers(token),
                                  timeout=timeout, transport=transport)

    @property
    def retries(self) -> int:
        """How many times a single call may be sent again (`retry.attempts`)."""
        return self.retry.attempts

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- calls ------------------------------------------------------------------------------

    def contracts(self, *, permitted: bool = False) -> shapes.ContractsPage:
        """`{"results": [contract, ...]}`: every registered contract; with `permitted`, only
        those this principal may propose (its tool set, newest versions), as the MCP gateway
        lists them."""
        return self._send(_calls.contracts(permitted))

    def propose(self, operation: str, arguments: JSON, *, call_id: str | None = None,
                execution_id: str | None = None, dispatch_on_approval: bool | None = None,
                approval_expires_in: int | None = None) -> shapes.Proposal:
        """The new proposal (or, for a `call_id` already used, the first one)."""
        return self._send(_calls.propose(
            operation, arguments, call_id=call_id, execution_id=execution_id,
            dispatch_on_approval=dispatch_on_approval, approval_expires_in=approval_expires_in))

    def proposal(self, proposal_id: str) -> shapes.Proposal:
        return self._send(_calls.proposal(proposal_id))

    def dispatch(self, proposal_id: str, *, permit: str | None = None) -> shapes.Dispatched:
        """`{"operation_id", "state"}`: the claim is decided; the handler runs on a worker."""
        return self._send(_calls.dispatch(proposal_id, permit))

    def operation(self, operation_id: str) -> shapes.Operation:
        return self._send(_calls.operation(operation_id))

    def cancel_proposal(self, proposal_id: str, *, reason: str | None = None) -> shapes.Proposal:
        return self._send(_calls.cancel_proposal(proposal_id, reason))

    def cancel_operation(self, operation_id: str, *, reason: str | None = None) -> shapes.Operation:
        return self._send(_calls.cancel_operation(operation_id, reason))

    def reauthorize(self, operation_id: str, *, reason: str | None = None) -> JSON:
        return self._send(_calls.reauthorize(operation_id, reason))

    def create_resource(self, kind: str, payload: JSON) -> shapes.Resource:
        return self._send(_calls.create_resource(kind, payload))

    def resource(self, resource_id: str) -> shapes.Resource:
        return self._send(_calls.resource(resource_id))

    def revise(self, resource_id: str, *, base_revision: int, payload: JSON) -> shapes.Resource:
        return self._send(_calls.revise(resource_id, base_revision, payload))

    def approvals(self, *, state: str | None = None, cursor: str | None = None,
                  page_size: int | None = None) -> shapes.ApprovalsPage:
        """A page of the approvals this operator or admin may decide, oldest first: the pending
        ones unless `state` says otherwise (`next_page` follows it)."""
        return self._send(_calls.approvals(state, cursor, page_size))

    def approval(self, approval_id: str) -> shapes.Approval:
        """One approval of `approvals()`, with the proposal's `canonical` snapshot."""
        return self._send(_calls.approval(approval_id))

    def decide(self, approval_id: str, *, decision: str, digest: str,
               reason: str | None = None) -> shapes.Decision:
        """A human's decision (`grant` or `deny`) on the exact `digest` they were shown."""
        return self._send(_calls.decide(approval_id, decision, digest, reason))

    def decide_renewal(self, renewal_id: str, *, decision: str, digest: str,
                       reason: str | None = None) -> JSON:
        return self._send(_calls.decide_renewal(renewal_id, decision, digest, reason))

    def resolve(self, operation_id: str, *, outcome: str, evidence: str) -> shapes.Operation:
        """An admin settles an `unknown` operation (`completed` or `no_effect`)."""
        return self._send(_calls.resolve(operation_id, outcome, evidence))

    def grants(self, *, cursor: str | None = None,
               page_size: int | None = None) -> shapes.GrantsPage:
        return self._send(_calls.grants(cursor, page_size))

    def delegate(self, grant_id: str, *, subject: str, operations: list[str], scope: JSON,
                 expires_at: str | None = None) -> JSON:
        return self._send(_calls.delegate(grant_id, subject, operations, scope, expires_at))

    # --- an admin's calls (docs/rest-api.md#admin) -------------------------------------------

    def create_agent(self, name: str, *, tools: list[str]) -> shapes.AgentCreated:
        """A new agent of the admin's tenant with its tool set, and its token, shown once."""
        return self._send(_calls.create_agent(name, tools))

    def rotate_agent_token(self, agent_id: str) -> shapes.AgentToken:
        """A new token for the agent; its old ones are refused from this answer on."""
        return self._send(_calls.rotate_agent_token(agent_id))

    def create_grant(self, subject: str, operation: str, *, scope: JSON,
                     expires_at: str | None = None) -> shapes.Grant:
        """A grant of `operation` to the principal named `subject`, within `scope`."""
        return self._send(_calls.create_grant(subject, operation, scope, expires_at))

    def revoke_grant(self, grant_id: str) -> None:
        """Revokes the grant and every grant delegated from it."""
        self._send(_calls.revoke_grant(grant_id))

    def pause(self, *, operation: str | None = None, agent: str | None = None,
              reason: str | None = None) -> shapes.Pause:
        """Pauses the tenant, or one contract, or one agent (by name), or that agent's
        contract: its claims and attempt starts are refused `paused` until `resume`."""
        return self._send(_calls.pause(operation, agent, reason))

    def resume(self, pause_id: str) -> None:
        """Lifts the pause; the work it held back goes on."""
        self._send(_calls.resume(pause_id))

    # --- webhooks and keys (docs/rest-api.md#webhooks) ---------------------------------------

    def webhooks(self) -> shapes.WebhooksPage:
        """This principal's webhooks, oldest first, never their secrets."""
        return self._send(_calls.webhooks())

    def create_webhook(self, url: str, *, events: list[str]) -> shapes.WebhookCreated:
        """A webhook hearing `events` of this principal's own proposals (`approval.granted`,
        `operation.completed`, ...), and its signing `secret`, shown this once. Never resent
        after a lost answer: list `webhooks()` to see whether it was made."""
        return self._send(_calls.create_webhook(url, events))

    def delete_webhook(self, webhook_id: str) -> shapes.Webhook:
        """Deletes the webhook (nothing more is sent to it) and answers it."""
        return self._send(_calls.delete_webhook(webhook_id))

    def keys(self) -> shapes.Jwks:
        """The deployment's public signing keys (JWKS): what `exact_console.permits.verify`
        checks a permit token with, and `audit_verify --keys` an export."""
        return self._send(_calls.keys())

    def audit(self, *, operation: str | None = None, proposal: str | None = None,
              kind: str | None = None, cursor: str | None = None,
              page_size: int | None = None) -> shapes.AuditPage:
        """A page of the tenant's audit, newest first (admins only)."""
        return self._send(_calls.audit(operation, proposal, kind, cursor, page_size))

    def next_page(self, page: Mapping[str, Any]) -> JSON | None:
        """The page after `page` (of `approvals`, `grants` or `audit`), or None after the
        last."""
        call = _calls.next_page(self.root, page)
        return None if call is None else self._send(call)

    # --- waits ------------------------------------------------------------------------------

    def wait_for_decision(self, proposal_id: str, *, timeout: float) -> shapes.Proposal:
        """The proposal once no human is still to decide it (granted, denied, expired or
        revoked, or no approval needed); `Timeout` (code `approval_pending`) after `timeout`
        seconds. A denial is an answer here, not an exception: dispatching it is refused.
        Reads that fail while the console is away (a restart, a proxy's 502, 503 or 504, a
        429, a dropped connection) are made again until the timeout (see `Retry`)."""
        return self._wait(_calls.proposal(proposal_id), decided, timeout,
                          lambda last, error: _decision_timeout(proposal_id, timeout, last,
                                                                error))

    def wait_for_outcome(self, operation_id: str, *, timeout: float) -> shapes.Operation:
        """The operation once it has settled (`completed`, `failed_no_effect`, `unknown` or
        reconciled); `Timeout` (code: its state) after `timeout` seconds, reads retried as
        `wait_for_decision`'s are."""
        return self._wait(_calls.operation(operation_id), settled, timeout,
                          lambda last, error: _outcome_timeout(operation_id, timeout, last,
                                                               error))

    def _wait(self, read: Call[A], done: Callable[[A], bool], timeout: float,
              expired: Expired) -> A:
        schedule = Schedule(timeout)
        last: JSON = {}
        while True:
            try:
                current = self._send(read, deadline=schedule.deadline)
            except OutOfTime as out:
                raise expired(last, out.error) from out.error
            if done(current):
                return current
            last = dict(cast(JSON, current))
            pause = schedule.pause()
            if pause is None:
                raise expired(last, None)
            time.sleep(pause)

    # --- transport --------------------------------------------------------------------------

    def _send(self, call: Call[A], *, deadline: float | None = None) -> A:
        attempts = Attempts(call, self.retry, deadline=deadline)
        while True:
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = self._http.request(call.method, call.path, json=call.body,
                                             headers={_calls.REQUEST_ID: attempts.request_id},
                                             timeout=attempts.timeout(self._http.timeout))
            except httpx.TransportError as error:
                outcome = error
            pause = attempts.pause(outcome)
            if pause is None:
                return cast(A, attempts.result(outcome))  # the call's documented shape
            time.sleep(pause)


class AsyncClient:
    """`Client`'s methods as coroutines, on one `httpx.AsyncClient`; `async with` closes it."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0,
                 retries: int | None = None, retry: Retry | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.root = _calls.api_root(base_url)
        self.retry = _policy(retries, retry)
        self._http = httpx.AsyncClient(base_url=self.root, headers=_calls.headers(token),
                                       timeout=timeout, transport=transport)

    @property
    def retries(self) -> int:
        return self.retry.attempts

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- calls ------------------------------------------------------------------------------

    async def contracts(self, *, permitted: bool = False) -> shapes.ContractsPage:
        return await self._send(_calls.contracts(permitted))

    async def propose(self, operation: str, arguments: JSON, *, call_id: str | None = None,
                      execution_id: str | None = None,
                      dispatch_on_approval: bool | None = None,
                      approval_expires_in: int | None = None) -> shapes.Proposal:
        return await self._send(_calls.propose(
            operation, arguments, call_id=call_id, execution_id=execution_id,
            dispatch_on_approval=dispatch_on_approval, approval_expires_in=approval_expires_in))

    async def proposal(self, proposal_id: str) -> shapes.Proposal:
        return await self._send(_calls.proposal(proposal_id))

    async def dispatch(self, proposal_id: str, *, permit: str | None = None) -> shapes.Dispatched:
        return await self._send(_calls.dispatch(proposal_id, permit))

    async def operation(self, operation_id: str) -> shapes.Operation:
        return await self._send(_calls.operation(operation_id))

    async def cancel_proposal(self, proposal_id: str,
                              *, reason: str | None = None) -> shapes.Proposal:
        return await self._send(_calls.cancel_proposal(proposal_id, reason))

    async def cancel_operation(self, operation_id: str,
                               *, reason: str | None = None) -> shapes.Operation:
        return await self._send(_calls.cancel_operation(operation_id, reason))

    async def reauthorize(self, operation_id: str, *, reason: str | None = None) -> JSON:
        return await self._send(_calls.reauthorize(operation_id, reason))

    async def create_resource(self, kind: str, payload: JSON) -> shapes.Resource:
        return await self._send(_calls.create_resource(kind, payload))

    async def resource(self, resource_id: str) -> shapes.Resource:
        return await self._send(_calls.resource(resource_id))

    async def revise(self, resource_id: str,
                     *, base_revision: int, payload: JSON) -> shapes.Resource:
        return await self._send(_calls.revise(resource_id, base_revision, payload))

    async def approvals(self, *, state: str | None = None, cursor: str | None = None,
                        page_size: int | None = None) -> shapes.ApprovalsPage:
        return await self._send(_calls.approvals(state, cursor, page_size))

    async def approval(self, approval_id: str) -> shapes.Approval:
        return await self._send(_calls.approval(approval_id))

    async def decide(self, approval_id: str, *, decision: str, digest: str,
                     reason: str | None = None) -> shapes.Decision:
        return await self._send(_calls.decide(approval_id, decision, digest, reason))

    async def decide_renewal(self, renewal_id: str, *, decision: str, digest: str,
                             reason: str | None = None) -> JSON:
        return await self._send(_calls.decide_renewal(renewal_id, decision, digest, reason))

    async def resolve(self, operation_id: str, *, outcome: str, evidence: str) -> shapes.Operation:
        return await self._send(_calls.resolve(operation_id, outcome, evidence))

    async def grants(self, *, cursor: str | None = None,
                     page_size: int | None = None) -> shapes.GrantsPage:
        return await self._send(_calls.grants(cursor, page_size))

    async def delegate(self, grant_id: str, *, subject: str, operations: list[str],
                       scope: JSON, expires_at: str | None = None) -> JSON:
        return await self._send(_calls.delegate(grant_id, subject, operations, scope,
                                                expires_at))

    async def create_agent(self, name: str, *, tools: list[str]) -> shapes.AgentCreated:
        return await self._send(_calls.create_agent(name, tools))

    async def rotate_agent_token(self, agent_id: str) -> shapes.AgentToken:
        return await self._send(_calls.rotate_agent_token(agent_id))

    async def create_grant(self, subject: str, operation: str, *, scope: JSON,
                           expires_at: str | None = None) -> shapes.Grant:
        return await self._send(_calls.create_grant(subject, operation, scope, expires_at))

    async def revoke_grant(self, grant_id: str) -> None:
        await self._send(_calls.revoke_grant(grant_id))

    async def pause(self, *, operation: str | None = None, agent: str | None = None,
                    reason: str | None = None) -> shapes.Pause:
        return await self._send(_calls.pause(operation, agent, reason))

    async def resume(self, pause_id: str) -> None:
        await self._send(_calls.resume(pause_id))

    async def webhooks(self) -> shapes.WebhooksPage:
        return await self._send(_calls.webhooks())

    async def create_webhook(self, url: str, *, events: list[str]) -> shapes.WebhookCreated:
        return await self._send(_calls.create_webhook(url, events))

    async def delete_webhook(self, webhook_id: str) -> shapes.Webhook:
        return await self._send(_calls.delete_webhook(webhook_id))

    async def keys(self) -> shapes.Jwks:
        return await self._send(_calls.keys())

    async def audit(self, *, operation: str | None = None, proposal: str | None = None,
                    kind: str | None = None, cursor: str | None = None,
                    page_size: int | None = None) -> shapes.AuditPage:
        return await self._send(_calls.audit(operation, proposal, kind, cursor, page_size))

    async def next_page(self, page: Mapping[str, Any]) -> JSON | None:
        call = _calls.next_page(self.root, page)
        if call is None:
            return None
        return await self._send(call)

    # --- waits ------------------------------------------------------------------------------

    async def wait_for_decision(self, proposal_id: str, *, timeout: float) -> shapes.Proposal:
        return await self._wait(_calls.proposal(proposal_id), decided, timeout,
                                lambda last, error: _decision_timeout(proposal_id, timeout,
                                                                      last, error))

    async def wait_for_outcome(self, operation_id: str, *, timeout: float) -> shapes.Operation:
        return await self._wait(_calls.operation(operation_id), settled, timeout,
                                lambda last, error: _outcome_timeout(operation_id, timeout,
                                                                     last, error))

    async def _wait(self, read: Call[A], done: Callable[[A], bool], timeout: float,
                    expired: Expired) -> A:
        schedule = Schedule(timeout)
        last: JSON = {}
        while True:
            try:
                current = await self._send(read, deadline=schedule.deadline)
            except OutOfTime as out:
                raise expired(last, out.error) from out.error
            if done(current):
                return current
            last = dict(cast(JSON, current))
            pause = schedule.pause()
            if pause is None:
                raise expired(last, None)
            await asyncio.sleep(pause)

    # --- transport --------------------------------------------------------------------------

    async def _send(self, call: Call[A], *, deadline: float | None = None) -> A:
        attempts = Attempts(call, self.retry, deadline=deadline)
        while True:
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = await self._http.request(
                    call.method, call.path, json=call.body,
                    headers={_calls.REQUEST_ID: attempts.request_id},
                    timeout=attempts.timeout(self._http.timeout))
            except httpx.TransportError as error:
                outcome = error
            pause = attempts.pause(outcome)
            if pause is None:
                return cast(A, attempts.result(outcome))  # the call's documented shape
            await asyncio.sleep(pause)
