"""The documents the design asks for (docs/design.md#how-it-is-tested, #extensions) exist and say
what they must: each required section is there under its heading and names each point it has to
cover, so deleting a point fails here. Phrases are matched case-insensitively, with runs of
whitespace (line breaks included) read as one space."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dispatch.runtime import EXTENSION_API_VERSION
from protocols.denials import DenialCode
from protocols.workflow.ir import FORMAT_VERSION
from protocols.workflow.parse import STEP_KEYS

ROOT = Path(__file__).resolve().parents[2]
HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$", re.MULTILINE)


def normalized(text: str) -> str:
    return re.sub(r"\s+", " ", text).lower()


def section(path: str, title: str) -> str:
    """The text under the heading `title` of `path`, up to the next heading of its level or
    above; fails when the document or the heading is missing."""
    text = (ROOT / path).read_text(encoding="utf-8")
    headings = list(HEADING.finditer(text))
    found = [h for h in headings if h.group(2) == title]
    assert found, f"{path} has no heading {title!r}"
    start = found[0]
    level = len(start.group(1))
    end = next((h.start() for h in headings
                if h.start() > start.start() and len(h.group(1)) <= level), len(text))
    return text[start.end():end]


#: The denial codes of the REST API as first published (commit 30ca723): any other code was
#: added within version 1 and must be in CHANGELOG.md.
PUBLISHED_CODES = frozenset({
    "malformed_request", "unauthenticated", "request_too_large", "unsupported_media_type",
    "schema_invalid", "unknown_operation", "not_found", "contract_mismatch",
    "tool_not_permitted", "authority_missing", "authority_expired", "authority_revoked",
    "scope_violation", "effect_not_permitted", "protocol_state_invalid", "stale_revision",
    "approval_required", "approval_pending", "approval_denied", "approval_expired",
    "approval_revoked", "approval_decided", "proposal_mismatch", "permit_claimed",
    "role_required", "delegation_widens", "budget_exhausted", "unsafe_retry", "protected_race",
    "persistence_failure",
})

#: (document, heading) -> the phrases that section must contain.
REQUIRED: dict[tuple[str, str], tuple[str, ...]] = {
    # docs/design.md#assumptions: the guarantee's assumptions, stated where a user reads first.
    ("README.md", "What is and isn't guaranteed"): (
        "one-shot permit",
        "**Handlers and extensions are trusted, in-process code.**",
        "**No exactly-once external effects.**",
        "**An idempotency key is the receiver's promise.**",
        "**No liveness.**",
        "**Allow-lists are policy helpers, not confinement.**",
        "**A host that bypasses the dispatcher is outside the guarantee.**",
        "`unknown`",
        "docs/compatibility.md",
        "CHANGELOG.md",
    ),
    ("README.md", "Two commands"): ("bash scripts/run.sh", "bash scripts/test.sh"),
    # docs/design.md#extensions: migration guidance for protected contracts and workflows.
    ("docs/compatibility.md",
     "Moving a framework's approval or a plain tool to a protected contract"): (
        "OperationContract",
        "dispatch.handlers.Handler",
        f"EXTENSION_API = {EXTENSION_API_VERSION}",
        "DISPATCH_EXTENSIONS",
        "`call_id` set to the framework's tool-call id",
        "never how it *approves*",
        "**Remove the old path.**",
        "`approve: \"...\"`",
        "`request_approval`",
    ),
    ("docs/compatibility.md", "A contract version bump with pending approvals"): (
        "contract fingerprint",
        "check_compat",
        "| a pending approval | granting it is `contract_mismatch` (409) and it stays pending",
        "| a claimed operation, no attempt started |",
        "`contract_version`",
        "Drain",
    ),
    ("docs/compatibility.md", "Workflow format versions"): (
        "`version: 1`",
        "(AGL-E017)",
        "version 2",
        "`execution_mismatch`",
        "check_workflow",
    ),
    # docs/design.md#extensions: what each version promises and when a version 2 is needed.
    ("docs/compatibility.md", "The REST API, version 1"): (
        "`/api/v1/`",
        "/api/v1/schema/",
        "Within version 1, only these changes are made",
        "New denial codes, only for what version 1 could not reach before",
        "Anything else is version 2",
        "`/api/v2/`",
        "clients must ignore members they do not know",
    ),
    ("docs/compatibility.md", "The extension API, version 1"): (
        f"`EXTENSION_API = {EXTENSION_API_VERSION}`",
        "`register(runtime)`",
        "ImproperlyConfigured",
        "`runtime.register(contract, handler)",
        "The handler port",
        "What the runtime promises a handler",
        "What a handler promises the runtime",
        "is extension API version 2",
        "no mandatory behaviour added to version 1",
    ),
    # docs/design.md#outcomes: consumed-permit tombstones are kept while they could be replayed.
    ("docs/compatibility.md", "Retention of consumed permits and signed tokens"): (
        "**Nothing is deleted.**",
        "consumed permit is its row in state `claimed`",
        "`PROTECT`",
        "tests/unit/test_retention.py",
        "**Signed tokens** (docs/design.md#not-built, not built yet)",
        "follows the same policy",
    ),
    # docs/design.md#extensions: every behaviour change of version 1.
    ("CHANGELOG.md", "Unreleased"): (
        "`EXTENSION_API = 1`",
        "`end_line` and `end_column`",
    ),
    ("CHANGELOG.md", "Within version 1, after 30ca723"): (
        "`authority_revoked`",
        "`authority_expired`",
        "answered `scope_violation`",
        "is `malformed_request` (400)",
        "is `not_found` (404)",
        "takes `call_id`",
        "`proposal_mismatch` (409)",
        "`contract_mismatch`, nothing sent",
        "Cancelling during an attempt",
        "`email.send`'s contract fingerprint changed",
        "`details.error_count`",
        "`execution_mismatch`",
    ),
    ("docs/workflows.md", f"The workflow format, version {FORMAT_VERSION} (normative)"): (
        "normative definition of **workflow format version 1**",
        "`version: 1`",
        "protocols.workflow.ir.FORMAT_VERSION",
        "a reader refuses any version it does not implement (AGL-E017)",
        "is format version 2",
        "### Grammar",
    ),
    ("docs/workflows.md", "Typing rules (normative)"): (
        "Γ;Δ;C ⊢ step : τ ! ε ▷ Δ'",
        "**affine**",
        "provenance",
        "| `propose: op` |",
        "| `request_approval: p` |",
        "| `dispatch: p` |",
        "| `match: d` on a decision |",
        "| `loop` |",
        "| `try` |",
        "| `parallel`, `race` |",
        "**Joins.**",
    ),
    ("docs/workflows.md", "Diagnostics and spans (normative)"): (
        "`line` and `column` of the first character",
        "`end_line` and `end_column`",
        "the end is exclusive",
        "a syntax error",
        "has a start only",
    ),
}


@pytest.mark.parametrize(("where", "phrases"), REQUIRED.items(),
                         ids=[f"{path}#{title}" for path, title in REQUIRED])
def test_the_section_names_what_it_must(where: tuple[str, str],
                                        phrases: tuple[str, ...]) -> None:
    text = normalized(section(*where))
    missing = [phrase for phrase in phrases if normalized(phrase) not in text]
    assert missing == [], f"{where[0]} § {where[1]} no longer says: {missing}"


def test_the_workflow_grammar_lists_every_step_and_field_the_reader_knows() -> None:
    grammar = section("docs/workflows.md", "Grammar")
    for head, fields in STEP_KEYS.items():
        [line] = [line for line in grammar.splitlines() if f"{{{head}: " in line]
        rule = grammar[grammar.index(line):].split("\n            |", 1)[0]
        assert all(f"{field}" in rule for field in fields), (head, sorted(fields), rule)


def test_the_changelog_names_every_denial_code_added_within_version_1() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    added = sorted(code.value for code in DenialCode if code.value not in PUBLISHED_CODES)
    assert added  # approver_is_requester and the attestation codes, at least
    assert [code for code in added if f"`{code}`" not in changelog] == []
