"""Reading one HTTP action file (docs/design.md#http-actions, docs/actions.md). Pure.

`action_parse` reads a file's text (YAML, or JSON for a `.json` name) through the workflow
loader's located tree into an `ActionSpec` (`protocols.http_actions`), or into diagnostics
that each name the file, the line, the column and the key, in the order of the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from protocols.canonical import CanonicalizationError, digest
from protocols.contracts import (
    ApprovalRequirement,
    Effect,
    Idempotency,
    compile_schema,
)
from protocols.http_actions import (
    ActionDiagnostic,
    ActionSpec,
    Destination,
    Lookup,
)
from protocols.roles import Role
from protocols.workflow.located import Node, Pos, SyntaxProblem, load_located

__all__ = ["action_parse"]

_KEYS: Final = ("name", "version", "description", "input_schema", "effects", "approval",
                "authority", "destination", "idempotency", "retries", "lookup")
_REQUIRED: Final = ("name", "version", "description", "input_schema", "effects", "approval",
                    "authority", "destination", "idempotency")
_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
_DESTINATION_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_ARGUMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")
METHODS: Final = ("POST", "PUT", "PATCH")
MAX_TIMEOUT: Final = 300.0
MAX_RETRIES: Final = 10
DEFAULT_APPROVAL_EXPIRY: Final = 3600


class _Checker:
    """Collects located diagnostics for one file."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.found: list[ActionDiagnostic] = []

    def error(self, pos: Pos, key: str, message: str) -> None:
        self.found.append(ActionDiagnostic(self.filename, pos.line, pos.column, key, message))

    def string(self, node: Node, key: str, *, pattern: re.Pattern[str] | None = None,
               what: str = "a non-empty string", max_length: int = 2000) -> str | None:
        value = node.scalar if node.kind == "scalar" else None
        if not isinstance(value, str) or not value or len(value) > max_length or (
                pattern is not None and not pattern.match(value)):
            self.error(node.pos, key, f"must be {what}")
            return None
        return value

    def integer(self, node: Node, key: str, low: int, high: int) -> int | None:
        value = node.scalar if node.kind == "scalar" else None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.error(node.pos, key, f"must be an integer from {low} to {high}")
            return None
        return value

    def mapping(self, node: Node, key: str, allowed: tuple[str, ...],
                required: tuple[str, ...]) -> bool:
        if node.kind != "map":
            self.error(node.pos, key, "must be a mapping")
            return False
        ok = True
        for entry in node.entries:
            if entry.key not in allowed:
                self.error(entry.key_pos, f"{key}.{entry.key}" if key else entry.key,
                           f"is not a key of an action file (the keys are {', '.join(allowed)})"
                           if not key else f"is not a key here (the keys are "
                                           f"{', '.join(allowed)})")
                ok = False
        for name in required:
            if node.get(name) is None:
                self.error(node.pos, f"{key}.{name}" if key else name, "is required")
                ok = False
        return ok


def action_parse(text: str, filename: str) -> ActionSpec | list[ActionDiagnostic]:
    """The action `filename` declares in `text` (YAML, or JSON for a `.json` name), or every
    diagnostic found, in the order of the file."""
    check = _Checker(filename)
    try:
        root = load_located(text, filename)
    except SyntaxProblem as problem:
        check.error(problem.pos, "", str(problem))
        return check.found
    if not check.mapping(root, "", _KEYS, _REQUIRED) and root.kind != "map":
        return check.found
    spec = _read(check, root, filename)
    if check.found or spec is None:
        return sorted(check.found, key=lambda d: (d.line, d.column))
    return spec


def _read(check: _Checker, root: Node, filename: str) -> ActionSpec | None:
    values: dict[str, Any] = {}
    node = root.get("name")
    if node is not None:
        # At most 64: its tool name (dots as '_') is what model APIs take (protocols.tool_names).
        values["name"] = check.string(node, "name", pattern=_NAME, max_length=64,
                                      what="a qualified name such as tickets.create (lower "
                                           "case words joined by dots)")
    node = root.get("version")
    if node is not None:
        values["version"] = check.integer(node, "version", 1, 1_000_000)
    node = root.get("description")
    if node is not None:
        values["description"] = check.string(node, "description", max_length=2000)
    schema = _input_schema(check, root.get("input_schema"))
    effects = _effects(check, root.get("effects"))
    approval = _approval(check, root.get("approval"), effects)
    authority = _authority(check, root.get("authority"), schema)
    destination = _destination(check, root.get("destination"))
    idempotency = _idempotency(check, root.get("idempotency"))
    retries = _retries(check, root.get("retries"), idempotency)
    lookup = _lookup(check, root.get("lookup"))
    if check.found:
        return None
    assert schema is not None and effects is not None and authority is not None
    assert destination is not None and idempotency is not None and retries is not None
    name_node = root.get("name")
    assert name_node is not None
    content = {
        "name": values["name"], "version": values["version"],
        "description": values["description"], "input_schema": schema,
        "effects": sorted(e.value for e in effects),
        "approval": "none" if approval is None else approval.declaration(),
        "authority": dict(authority),
        "destination": {"name": destination.name, "url": destination.url,
                        "method": destination.method, "timeout_s": destination.timeout_s},
        "idempotency": idempotency.value, "retries": retries,
        "lookup": None if lookup is None else {
            "url": lookup.url, "present": sorted(lookup.present),
            "absent": sorted(lookup.absent)},
    }
    try:
        digest(content)
    except CanonicalizationError as exc:
        check.error(root.pos, "", f"holds a value canonical JSON refuses: {exc}")
        return None
    return ActionSpec(file=filename, name=values["name"], version=values["version"],
                      description=values["description"], input_schema=schema,
                      effects=effects, approval=approval, authority=authority,
                      destination=destination, idempotency=idempotency, retries=retries,
                      lookup=lookup, content=content, name_pos=name_node.pos)


def _input_schema(check: _Checker, node: Node | None) -> dict[str, Any] | None:
    if node is None:
        return None
    if node.kind != "map":
        check.error(node.pos, "input_schema", "must be a JSON Schema mapping")
        return None
    schema = node.plain()
    assert isinstance(schema, dict)
    if schema.get("type") != "object":
        at = node.get("type")
        check.error((at or node).pos, "input_schema.type",
                    'must be "object": the arguments are sent as one JSON object')
        return None
    try:
        compile_schema(schema)
    except Exception as exc:  # jsonschema's SchemaError, or a pattern refused
        check.error(node.pos, "input_schema", f"is not a valid JSON Schema: "
                                              f"{str(exc).splitlines()[0]}")
        return None
    return schema


_EFFECTS: Final = {e.value: e for e in (Effect.READ, Effect.EXTERNAL_WRITE,
                                        Effect.FINANCIAL_WRITE)}


def _effects(check: _Checker, node: Node | None) -> frozenset[Effect] | None:
    if node is None:
        return None
    if node.kind != "list" or not node.items:
        check.error(node.pos, "effects", f"must be a non-empty list of {', '.join(_EFFECTS)}")
        return None
    found: set[Effect] = set()
    for index, item in enumerate(node.items):
        value = item.scalar if item.kind == "scalar" else None
        if not isinstance(value, str) or value not in _EFFECTS:
            check.error(item.pos, f"effects[{index}]", f"must be one of {', '.join(_EFFECTS)}")
            return None
        found.add(_EFFECTS[value])
    if Effect.FINANCIAL_WRITE in found and Effect.EXTERNAL_WRITE not in found:
        check.error(node.pos, "effects", "a financial_write must also declare external_write")
        return None
    if Effect.READ in found and len(found) > 1:
        check.error(node.pos, "effects", "read is a read only: declare it alone, or drop it")
        return None
    return frozenset(found)


def _approval(check: _Checker, node: Node | None,
              effects: frozenset[Effect] | None) -> ApprovalRequirement | None:
    if node is None:
        return None
    if node.kind == "scalar" and node.scalar == "none":
        if effects is not None and effects != {Effect.READ}:
            check.error(node.pos, "approval", "none is for a read only: an action that writes "
                                              'needs {"role": "operator"} (or admin)')
        return None
    if not check.mapping(node, "approval", ("role", "expires_in", "quorum"), ("role",)):
        return None
    roles = tuple(role.value for role in Role)
    role = check.string(node.get("role") or node, "approval.role",
                        what=f"one of {', '.join(roles)}")
    if role is not None and role not in roles:
        check.error((node.get("role") or node).pos, "approval.role",
                    f"must be one of {', '.join(roles)}")
        role = None
    expires = DEFAULT_APPROVAL_EXPIRY
    at = node.get("expires_in")
    if at is not None:
        expires = check.integer(at, "approval.expires_in", 60, 7 * 86400) or 0
    quorum = 1
    at = node.get("quorum")
    if at is not None:
        quorum = check.integer(at, "approval.quorum", 1, 10) or 0
    if role is None or not expires or not quorum:
        return None
    return ApprovalRequirement(role=role, expires_in=expires, quorum=quorum)


def _authority(check: _Checker, node: Node | None,
               schema: Mapping[str, Any] | None) -> dict[str, str] | None:
    if node is None:
        return None
    if node.kind != "map" or not node.entries:
        check.error(node.pos, "authority", "must map each authority key to the name of the "
                                           "argument that carries its value")
        return None
    properties = schema.get("properties", {}) if schema is not None else {}
    required = schema.get("required", []) if schema is not None else []
    found: dict[str, str] = {}
    for entry in node.entries:
        key = f"authority.{entry.key}"
        if not _ARGUMENT.match(entry.key):
            check.error(entry.key_pos, key, "an authority key is a word of letters, digits "
                                            "and underscores")
            continue
        argument = check.string(entry.value, key, pattern=_ARGUMENT,
                                what="the name of an argument")
        if argument is None:
            continue
        if schema is not None and (argument not in properties or argument not in required):
            check.error(entry.value.pos, key, f"names {argument!r}, which input_schema does "
                                              "not declare as a required property")
            continue
        found[entry.key] = argument
    return found


def _url(check: _Checker, node: Node, key: str, *, placeholder: bool = False) -> str | None:
    """An http(s) URL without credentials or fragment; with `placeholder`, one that holds
    `{operation_id}` (and no other brace)."""
    text = check.string(node, key, what="an http or https URL")
    if text is None:
        return None
    url = text
    if placeholder:
        if "{operation_id}" not in text or "{" in text.replace("{operation_id}", "") \
                or "}" in text.replace("{operation_id}", ""):
            check.error(node.pos, key, "must hold {operation_id} (and no other placeholder)")
            return None
        url = text.replace("{operation_id}", "op")
    elif "{" in text or "}" in text:
        check.error(node.pos, key, "holds no placeholder (only the lookup's URL does)")
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        check.error(node.pos, key, "must be an http or https URL")
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or _CONTROL.search(url):
        check.error(node.pos, key, "must be an http or https URL")
        return None
    if parts.username or parts.password:
        check.error(node.pos, key, "must not hold credentials")
        return None
    if parts.fragment:
        check.error(node.pos, key, "must not hold a fragment")
        return None
    return text


def _destination(check: _Checker, node: Node | None) -> Destination | None:
    if node is None:
        return None
    if not check.mapping(node, "destination", ("name", "url", "method", "timeout_s"),
                         ("name", "url")):
        return None
    name_node, url_node = node.get("name"), node.get("url")
    assert name_node is not None and url_node is not None
    name = check.string(name_node, "destination.name", pattern=_DESTINATION_NAME,
                        what="a short name (lower case letters, digits, '.', '_', '-'): the "
                             "permit token's audience")
    url = _url(check, url_node, "destination.url")
    method = "POST"
    at = node.get("method")
    if at is not None:
        method = check.string(at, "destination.method", what=f"one of {', '.join(METHODS)}") \
            or ""
        if method and method not in METHODS:
            check.error(at.pos, "destination.method", f"must be one of {', '.join(METHODS)}")
            method = ""
    timeout = 15.0
    at = node.get("timeout_s")
    if at is not None:
        value = at.scalar if at.kind == "scalar" else None
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not 0 < value <= MAX_TIMEOUT:
            check.error(at.pos, "destination.timeout_s",
                        f"must be a number of seconds above 0, at most {MAX_TIMEOUT:g}")
            timeout = 0.0
        else:
            timeout = float(value)
    if name is None or url is None or not method or not timeout:
        return None
    return Destination(name=name, url=url, method=method, timeout_s=timeout)


def _idempotency(check: _Checker, node: Node | None) -> Idempotency | None:
    if node is None:
        return None
    allowed = (Idempotency.RECEIVER_DEDUP.value, Idempotency.NONE.value)
    value = node.scalar if node.kind == "scalar" else None
    if value not in allowed:
        check.error(node.pos, "idempotency", "must be receiver_dedup (the service "
                                             "deduplicates on the Idempotency-Key header) or "
                                             "none")
        return None
    return Idempotency(value)


def _retries(check: _Checker, node: Node | None, idempotency: Idempotency | None) -> int | None:
    if node is None:
        return 1
    attempts = check.integer(node, "retries", 1, MAX_RETRIES)
    if attempts is not None and attempts > 1 and idempotency is Idempotency.NONE:
        check.error(node.pos, "retries", "more than one attempt needs idempotency "
                                         "receiver_dedup: a repeat could do it twice")
        return None
    return attempts


def _statuses(check: _Checker, node: Node | None, key: str, *,
              required: bool) -> frozenset[int] | None:
    if node is None:
        return frozenset() if not required else None
    if node.kind != "list" or (required and not node.items):
        check.error(node.pos, key, "must be a " + ("non-empty " if required else "")
                    + "list of HTTP status codes")
        return None
    found: set[int] = set()
    for index, item in enumerate(node.items):
        code = check.integer(item, f"{key}[{index}]", 100, 599)
        if code is None:
            return None
        found.add(code)
    return frozenset(found)


def _lookup(check: _Checker, node: Node | None) -> Lookup | None:
    if node is None:
        return None
    if not check.mapping(node, "lookup", ("url", "present", "absent"), ("url", "present")):
        return None
    url_node = node.get("url")
    assert url_node is not None
    url = _url(check, url_node, "lookup.url", placeholder=True)
    present = _statuses(check, node.get("present"), "lookup.present", required=True)
    absent = _statuses(check, node.get("absent"), "lookup.absent", required=False)
    if present is not None and absent is not None and present & absent:
        at = node.get("absent") or node
        check.error(at.pos, "lookup.absent", f"shares {sorted(present & absent)} with present")
        return None
    if url is None or present is None or absent is None:
        return None
    return Lookup(url=url, present=present, absent=absent)
