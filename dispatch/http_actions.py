"""HTTP actions (docs/design.md#http-actions, docs/actions.md): the files of `ACTIONS_DIR` read
at start-up, each registered as a contract with the one generic handler that calls the team's
service.

`actions_read` reads the directory into specs and located diagnostics (`manage.py
check_actions` prints them); `actions_register`, called by `dispatch.runtime.get_runtime` after
the extensions, refuses to build a runtime on any diagnostic (`ActionsError`), so no process
starts on an invalid file. The handler sends the approved snapshot's arguments to the declared
URL with the operation id as `Idempotency-Key` and the attempt's permit token, to an address
checked as webhooks' are (`dispatch.outbound`) unless the host is in `ACTIONS_ALLOWED_HOSTS`,
and maps the answer as `protocols.http_actions.answer_outcome` says.
"""

from __future__ import annotations

import ipaddress
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import rfc8785
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from dispatch import outbound
from dispatch.handlers import (
    DefiniteFailure,
    HandlerContext,
    LookupFailedError,
    LookupResult,
    UncertainOutcome,
    code_fingerprint,
    within_deadline,
)
from dispatch.presentation import Summarizer
from protocols.backoff import parse_retry_after
from protocols.canonical import digest
from protocols.contracts import ContractConflictError, OperationContract
from protocols.http_action_files import action_parse
from protocols.http_actions import (
    ActionDiagnostic,
    ActionSpec,
    action_contract,
    answer_outcome,
    lookup_url,
    lookup_verdict,
)
from protocols.jsontypes import JSONObject

__all__ = ["ActionsError", "HttpActionHandler", "actions_read", "actions_read_files",
           "actions_register", "handler_for", "host_allowed"]

#: The suffixes of action files in `ACTIONS_DIR`.
SUFFIXES = (".yaml", ".yml", ".json")
#: The modules whose code decides what is sent and what an answer means: part of every HTTP
#: action's implementation fingerprint, with the file's canonical content.
_CODE = ("dispatch.outbound", "protocols.http_actions", "protocols.http_action_files")


class ActionsError(ImproperlyConfigured):
    """`ACTIONS_DIR` holds an invalid file: each diagnostic names the file, line and key."""

    def __init__(self, diagnostics: list[ActionDiagnostic]) -> None:
        self.diagnostics = diagnostics
        super().__init__("invalid HTTP action file(s) in ACTIONS_DIR (manage.py check_actions): "
                         + "; ".join(d.render() for d in diagnostics))


def actions_read(directory: str) -> tuple[list[ActionSpec], list[ActionDiagnostic]]:
    """Every action file of `directory` (sorted by name), parsed; and every diagnostic. Two
    files declaring one name and version, or a host the SSRF rules refuse where the URL names
    it by address, are diagnostics too."""
    folder = Path(directory)
    if not folder.is_dir():
        return [], [ActionDiagnostic(directory, 0, 0, "", "ACTIONS_DIR is not a directory")]
    return actions_read_files(sorted(p for p in folder.iterdir()
                                     if p.suffix.lower() in SUFFIXES))


def actions_read_files(paths: list[Path]) -> tuple[list[ActionSpec], list[ActionDiagnostic]]:
    """`actions_read` for the files named."""
    specs: list[ActionSpec] = []
    found: list[ActionDiagnostic] = []
    seen: dict[tuple[str, int], str] = {}
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            found.append(ActionDiagnostic(str(path), 0, 0, "", f"unreadable: {exc}"))
            continue
        parsed = action_parse(text, str(path))
        if isinstance(parsed, list):
            found.extend(parsed)
            continue
        problems = _address_problems(parsed)
        key = (parsed.name, parsed.version)
        if key in seen:
            problems.append(ActionDiagnostic(
                str(path), parsed.name_pos.line, parsed.name_pos.column, "name",
                f"{parsed.name} version {parsed.version} is already declared by {seen[key]}"))
        found.extend(problems)
        if not problems:
            seen[key] = str(path)
            specs.append(parsed)
    return specs, found


def _address_problems(spec: ActionSpec) -> list[ActionDiagnostic]:
    """The SSRF rules, where they need no resolver: a URL naming a loopback, private,
    link-local or reserved address (or `localhost`) whose host `ACTIONS_ALLOWED_HOSTS` does not
    list. A name is checked when the request is sent (`_target`)."""
    urls = [("destination.url", spec.destination.url)]
    if spec.lookup is not None:
        urls.append(("lookup.url", spec.lookup.url))
    problems = []
    for key, url in urls:
        host = urlsplit(url.replace("{operation_id}", "op")).hostname or ""
        if host_allowed(host) or not _private_literal(host):
            continue
        problems.append(ActionDiagnostic(
            spec.file, spec.name_pos.line, spec.name_pos.column, key,
            f"{host} is not a public address: list it in ACTIONS_ALLOWED_HOSTS to allow it"))
    return problems


def _private_literal(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.") or host.lower().endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return not address.is_global or address.is_multicast


def host_allowed(host: str) -> bool:
    """Whether `ACTIONS_ALLOWED_HOSTS` lists `host` (case-insensitively): its actions may
    reach a loopback or private address."""
    allowed = {str(name).lower().strip("[]") for name in settings.ACTIONS_ALLOWED_HOSTS}
    return host.lower().strip("[]") in allowed


def actions_register(runtime: Any) -> list[OperationContract]:
    """Register every action of `ACTIONS_DIR` (none when unset) on `runtime`; `ActionsError`
    naming each file, line and key on any problem, so that no process starts on it."""
    directory = settings.ACTIONS_DIR
    if not directory:
        return []
    specs, found = actions_read(directory)
    if found:
        raise ActionsError(found)
    registered = []
    for spec in specs:
        handler = handler_for(spec)
        try:
            registered.append(runtime.register(
                action_contract(spec, handler.implementation_fingerprint), handler,
                summary=_summary(spec), how_to_check=_how_to_check(spec)))
        except (ContractConflictError, ValueError) as exc:
            raise ActionsError([ActionDiagnostic(spec.file, spec.name_pos.line,
                                                 spec.name_pos.column, "name", str(exc))]
                               ) from None
    return registered


def _summary(spec: ActionSpec) -> Summarizer:
    """The console's sentence on top of its approvals: the file's description and where it
    goes (`dispatch.presentation`)."""
    text = f"{spec.description.rstrip('.')} (sent to {spec.destination.name})."
    return lambda arguments: text


def _how_to_check(spec: ActionSpec) -> str:
    """How an admin resolving an unknown outcome looks at the service (`{key}`: the
    operation id, which the service received as its Idempotency-Key)."""
    asked = f"Ask {spec.destination.name} for the request with Idempotency-Key {{key}}"
    if spec.lookup is None:
        return asked + " (the action declares no lookup)."
    return asked + f": GET {spec.lookup.url.replace('{operation_id}', '{key}')}."


def handler_for(spec: ActionSpec) -> HttpActionHandler:
    """The handler of one action: its own class, whose implementation fingerprint pins the
    generic handler's code and the file's canonical content."""
    fingerprint = digest({"code": code_fingerprint(HttpActionHandler, _CODE),
                          "action": spec.content_digest})
    cls = type(f"HttpAction[{spec.name}]", (HttpActionHandler,),
               {"name": spec.name, "implementation_fingerprint": fingerprint, "spec": spec})
    handler: HttpActionHandler = cls()
    return handler


def _target(url: str) -> outbound.Target:
    """`url` resolved once and checked by webhooks' rules, unless its host is allowed; the
    request goes to the address checked here. `DefiniteFailure` when refused: nothing sent."""
    host = urlsplit(url).hostname or ""
    try:
        return outbound.resolve(url, allow_private=host_allowed(host))
    except outbound.OutboundError as exc:
        raise DefiniteFailure(f"{url} refused before sending: {exc.reason}") from None


def _socket_timeout(ctx: HandlerContext) -> float:
    """One socket wait: never past the call's deadline, nor the deployment's cap."""
    return float(max(0.01, min(ctx.remaining(), ctx.timeout, settings.HANDLER_TIMEOUT_CAP)))


def _result(body: bytes) -> JSONObject:
    """A 2xx answer's JSON body as the result: an object as it is, another JSON value under
    `"body"`; none, or no JSON, is an empty result."""
    try:
        value = json.loads(body) if body.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    if value is None:
        return {}
    return value if isinstance(value, dict) else {"body": value}


class HttpActionHandler:
    """The generic handler of HTTP actions (handler port, `dispatch.handlers.Handler`); each
    action gets a subclass of its own (`handler_for`)."""

    name: ClassVar[str] = ""
    implementation_fingerprint: ClassVar[str] = ""
    spec: ClassVar[ActionSpec]

    def destination(self) -> JSONObject:
        spec = self.spec
        return {"name": spec.destination.name, "url": spec.destination.url,
                "method": spec.destination.method,
                **({"lookup": spec.lookup.url} if spec.lookup is not None else {})}

    def perform(self, ctx: HandlerContext) -> JSONObject:
        """`method` to `url` (the approved snapshot's), the arguments as JSON, the operation id
        as `Idempotency-Key` and the permit token as bearer (docs/design.md#http-actions)."""
        destination = ctx.destination
        url, method = str(destination["url"]), str(destination["method"])
        body = rfc8785.dumps(ctx.arguments)
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "User-Agent": "exact-action-console", "Idempotency-Key": ctx.operation_id}
        if ctx.permit_token:
            headers["Authorization"] = f"Bearer {ctx.permit_token}"
        if ctx.cancelled.is_set():
            raise DefiniteFailure("cancelled before the effect; nothing was sent")
        target = _target(url)

        def call() -> outbound.Answer:
            try:
                return outbound.request(target, method, body=body, headers=headers,
                                        timeout=_socket_timeout(ctx))
            except outbound.OutboundError as exc:
                if exc.sent:
                    raise UncertainOutcome(f"{url}: {exc.reason}; the request may have been "
                                           "received") from None
                raise DefiniteFailure(f"{url}: {exc.reason}; nothing was sent") from None

        answer = within_deadline(ctx, call)
        outcome = answer_outcome(answer.status)
        if outcome == "completed":
            return _result(answer.body)
        detail = answer.body[:300].decode("utf-8", "replace")
        if outcome == "failed_no_effect":
            raise DefiniteFailure(f"{self.spec.destination.name} refused the request: "
                                  f"{answer.status} {detail}")
        raise UncertainOutcome(
            f"{self.spec.destination.name} answered {answer.status}: {detail}",
            retry_after=parse_retry_after(answer.retry_after, now=datetime.now(UTC)))

    def lookup(self, operation_id: str, snapshot: JSONObject) -> LookupResult:
        """GET the declared lookup URL: a `present` status proves the effect, an `absent` one
        its absence (as far as the contract's reconciliation lets it), anything else nothing."""
        spec = self.spec
        if spec.lookup is None:
            return LookupResult("unknown", "this action declares no lookup")
        url = lookup_url(spec.lookup, operation_id)
        try:
            target = _target(url)
            answer = outbound.request(target, "GET", body=None,
                                      headers={"Accept": "application/json",
                                               "User-Agent": "exact-action-console"},
                                      timeout=float(settings.RECONCILE_LOOKUP_TIMEOUT))
        except (DefiniteFailure, outbound.OutboundError) as exc:
            raise LookupFailedError(f"lookup {url}: {getattr(exc, 'reason', exc)}") from None
        verdict = lookup_verdict(spec.lookup, answer.status)
        return LookupResult(verdict, f"{spec.destination.name} answered {answer.status} to "
                                     f"GET {url}")
