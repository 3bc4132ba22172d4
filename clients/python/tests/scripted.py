"""A console scripted for the adapters' tests (`httpx.MockTransport`): the contracts it lists,
the answers it gives, and the requests it was sent."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

JSON = dict[str, Any]
LOOKUP: JSON = {
    "name": "crm.lookup", "version": 1, "effects": ["read"], "approval": None,
    "input_schema": {"type": "object", "properties": {"customer_id": {"type": "string"}},
                     "required": ["customer_id"], "additionalProperties": False}}
SEND: JSON = {
    "name": "email.send", "version": 2, "effects": ["external_write"],
    "approval": {"role": "operator"},
    "input_schema": {"type": "object", "properties": {"draft": {"type": "object"}},
                     "required": ["draft"]}}


class Console:
    """Answers each request with the first handler registered for its method and path (a
    handler is a response, or a function of the request) and records every request."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[httpx.Response | Callable[[], httpx.Response]]]
        self.routes = {("GET", "/api/v1/contracts/"): [ok({"results": [LOOKUP, SEND]})]}
        self.requests: list[httpx.Request] = []

    def on(self, method: str, path: str,
           *answers: httpx.Response | Callable[[], httpx.Response]) -> None:
        self.routes.setdefault((method, "/api/v1/" + path), []).extend(answers)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answers = self.routes[(request.method, request.url.path)]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return answer if isinstance(answer, httpx.Response) else answer()

    def sent(self, method: str, path: str) -> list[JSON]:
        return [json.loads(r.content) if r.content else {} for r in self.requests
                if (r.method, r.url.path) == (method, "/api/v1/" + path)]


def ok(body: JSON, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


def refusal(status: int, code: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message,
                                                  "details": {}}})


def proposal(state: str | None, operation_id: str | None = None) -> JSON:
    approval = None if state is None else {"id": "apr_1", "state": state}
    return {"id": "prp_1", "approval": approval, "operation_id": operation_id}
