"""Validators of reports against evidence receipts, and the shipped policy `cited-sources/1`.

docs/design.md#evidence. A validator sees a report, the receipts its tenant can see and the bytes
the store kept for each, and returns a `Judgement`: `pass` or `fail` with findings a person can
act on. That is the recorded judgement of one validator under one policy, never a universal
"verified" state; a validator backed by a model registers the same way and is no more than that.

`cited_sources_v1` implements `cited-sources/1`: a report passes when it cites at least two
distinct receipts, every cited receipt exists, was issued for the report's question, its stored
bytes still match its `content_digest`, and every quote appears verbatim in those bytes. Its
rules, decided here:

- *exists* means the id is in the `receipts` handed in, which hold only what the report's tenant
  can see: another tenant's receipt "does not exist", in the same words as a missing one;
- *issued for the report's question* compares the question id (the report names its question by
  id only); any revision of that question counts; a receipt of another question is not read
  at all (its quotes are not looked for), so no report can probe another question's sources;
- *still match* is SHA-256 over the stored bytes equal to `content_digest` (compared in
  constant time); bytes that cannot be read are a finding of their own;
- *verbatim* is an exact substring of the stored bytes decoded as strict UTF-8: no case folding,
  no whitespace collapsing, no Unicode normalization. Bytes that do not decode are a finding; a
  quote that matches only once case and whitespace are ignored says so, to help the fix;
- a quote that is empty or only whitespace is a finding: it cannot support anything;
- citing one receipt twice counts once toward the two.

Findings come in citation order (each citation's in a fixed order), then the report-level one;
the same inputs give an equal `Judgement`. `Finding.citation` is the 0-based index in the
report's `citations`; messages number citations from 1, as a person counts them.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol, TypeAlias

from protocols.canonical import digest_bytes

__all__ = [
    "CITED_SOURCES_V1",
    "MIN_DISTINCT_RECEIPTS",
    "VALIDATORS",
    "Citation",
    "Finding",
    "Judgement",
    "ReceiptView",
    "ReportView",
    "StoredBytes",
    "Validator",
    "ValidatorConflictError",
    "ValidatorRegistry",
    "ValidatorSpec",
    "cited_sources_v1",
]

#: `cited-sources/1` needs at least this many distinct receipts cited.
MIN_DISTINCT_RECEIPTS: Final = 2

_NAME: Final = re.compile(r"[a-z][a-z0-9-]*\Z")
_POLICY: Final = re.compile(r"[a-z][a-z0-9-]*/[1-9][0-9]*\Z")


@dataclass(frozen=True)
class ReceiptView:
    """An evidence receipt as a validator sees it: who issued it for what, and the digest."""

    id: str
    question_id: str
    question_revision: int
    source: str
    content_digest: str


@dataclass(frozen=True)
class Citation:
    receipt: str
    quote: str


@dataclass(frozen=True)
class ReportView:
    """One revision of a report: its id, revision and digest bind the attestation to it."""

    id: str
    revision: int
    digest: str
    question_id: str
    title: str
    body: str
    citations: tuple[Citation, ...]

    @property
    def cited_receipts(self) -> tuple[str, ...]:
        """The receipt ids cited, each once, in the order first cited (the evidence inspected)."""
        return tuple(dict.fromkeys(c.receipt for c in self.citations))


@dataclass(frozen=True)
class Finding:
    """`citation` is the 0-based index of the citation concerned, None for the whole report."""

    citation: int | None
    message: str

    def as_json(self) -> dict[str, object]:
        return {"citation": self.citation, "message": self.message}


@dataclass(frozen=True)
class Judgement:
    """A validator's result. A `fail` names at least one finding, so there is something to fix;
    a `pass` may carry notes from a validator that gives them (`cited_sources_v1` gives none)."""

    result: Literal["pass", "fail"]
    findings: tuple[Finding, ...] = ()

    def __post_init__(self) -> None:
        if self.result not in ("pass", "fail"):
            raise ValueError(f"a judgement is 'pass' or 'fail', not {self.result!r}")
        if self.result == "fail" and not self.findings:
            raise ValueError("a failing judgement names at least one finding")

    @classmethod
    def of(cls, findings: Iterable[Finding]) -> Judgement:
        """`pass` when there are no findings, else `fail` with them, in their order."""
        found = tuple(findings)
        return cls("fail" if found else "pass", found)


#: The bytes a receipt's source holds (for the runtime: what it serves now, read through the
#: receipt's reference), None if none could be read.
StoredBytes: TypeAlias = Callable[[str], bytes | None]


class Validator(Protocol):
    """Judge `report` against the `receipts` its tenant can see (by id) and their stored bytes.

    Called with the three arguments by position. A deterministic validator reads nothing else;
    one backed by a model has the same signature, and its result is still only its judgement.
    """

    def __call__(self, report: ReportView, receipts: Mapping[str, ReceiptView],
                 stored_bytes: StoredBytes, /) -> Judgement: ...


@dataclass(frozen=True)
class _Source:
    """What one receipt's stored bytes allow: the text to search, or why there is none."""

    text: str | None
    problem: str | None


_UNREAD: Final = _Source(None, None)


def _read_source(receipt: ReceiptView, data: bytes | None) -> _Source:
    where = f"source {receipt.source} (receipt {receipt.id})"
    if data is None:
        return _Source(None, f"no bytes could be read for {where}")
    if not hmac.compare_digest(digest_bytes(data).encode(), receipt.content_digest.encode()):
        return _Source(None, "the source's stored bytes no longer match the receipt's digest "
                             f"{receipt.content_digest} (source {receipt.source}, "
                             f"receipt {receipt.id})")
    try:
        return _Source(data.decode("utf-8"), None)
    except UnicodeDecodeError as error:
        return _Source(None, f"the stored bytes of {where} are not UTF-8 text (invalid byte at "
                             f"offset {error.start}), so no quote can be found in them")


def _loose(text: str) -> str:
    return " ".join(text.split()).casefold()


def _citation_findings(citation: Citation, report: ReportView,
                       found: tuple[ReceiptView, _Source] | None) -> Iterator[str]:
    """One citation's findings, in a fixed order: the receipt, its bytes, then the quote."""
    empty = not citation.quote.strip()
    if found is None:
        yield f"receipt {citation.receipt} does not exist"
        if empty:
            yield "the quote is empty; quote the words of the source that support the report"
        return
    receipt, source = found
    where = f"source {receipt.source} (receipt {receipt.id})"
    if receipt.question_id != report.question_id:
        yield (f"receipt {receipt.id} was issued for question {receipt.question_id}, not this "
               f"report's question {report.question_id} (source {receipt.source})")
    if source.problem is not None:
        yield source.problem
    if empty:
        yield f"the quote is empty; quote the words of {where} that support the report"
    elif source.text is not None and citation.quote not in source.text:
        hint = ""
        if _loose(citation.quote) in _loose(source.text):
            hint = ("; it appears there only if case and whitespace are ignored: quote the "
                    "source's exact text")
        yield f"quote not found in {where}{hint}"


def cited_sources_v1(report: ReportView, receipts: Mapping[str, ReceiptView],
                     stored_bytes: StoredBytes) -> Judgement:
    """The policy `cited-sources/1` (docs/design.md#evidence), deterministic; the rules are the
    module's.

    `stored_bytes` is asked once per distinct cited receipt that exists and was issued for the
    report's question.
    """
    sources: dict[str, _Source] = {}
    findings: list[Finding] = []
    for index, citation in enumerate(report.citations):
        receipt = receipts.get(citation.receipt)
        found = None
        if receipt is not None and receipt.question_id != report.question_id:
            # Another question's source is never read for this report: its bytes could
            # otherwise be probed, quote by quote, through the findings.
            found = (receipt, _UNREAD)
        elif receipt is not None:
            if citation.receipt not in sources:
                sources[citation.receipt] = _read_source(receipt, stored_bytes(citation.receipt))
            found = (receipt, sources[citation.receipt])
        for message in _citation_findings(citation, report, found):
            findings.append(Finding(index, f"citation {index + 1}: {message}"))
    distinct = len(report.cited_receipts)
    if distinct < MIN_DISTINCT_RECEIPTS:
        cites = "1 receipt" if distinct == 1 else f"{distinct} receipts"
        findings.append(Finding(None, f"the report cites {cites}; cited-sources/1 needs at least "
                                      f"{MIN_DISTINCT_RECEIPTS}"))
    return Judgement.of(findings)


@dataclass(frozen=True)
class ValidatorSpec:
    """A validator as registered: `name@version` judges under `policy` (`<name>/<version>`)."""

    name: str
    version: int
    policy: str
    fn: Validator

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"a validator name is lowercase letters, digits and '-', "
                             f"starting with a letter, not {self.name!r}")
        if type(self.version) is not int or self.version < 1:
            raise ValueError(f"validator {self.name}: a version is an int >= 1, "
                             f"not {self.version!r}")
        if not _POLICY.match(self.policy):
            raise ValueError(f"validator {self.name}: a policy is '<name>/<version>' "
                             f"(e.g. 'cited-sources/1'), not {self.policy!r}")
        if not callable(self.fn):
            raise ValueError(f"validator {self.name}: fn is not callable")

    @property
    def validator_label(self) -> str:
        """What an attestation records as its `validator`."""
        return f"{self.name}@{self.version}"


CITED_SOURCES_V1: Final = ValidatorSpec(
    name="cited-sources", version=1, policy="cited-sources/1", fn=cited_sources_v1)

#: The validators this package ships.
VALIDATORS: Final[tuple[ValidatorSpec, ...]] = (CITED_SOURCES_V1,)


class ValidatorConflictError(ValueError):
    """A registration that would make a label or a policy mean two things."""


class ValidatorRegistry:
    """Trusted validators by `name@version`; a policy is served by one validator name.

    Registering an identical spec again is idempotent. Refused: the same `name@version` with
    another function or policy (an attestation's label would no longer say what judged), and a
    policy already served by another validator name (which one judges would be a guess).
    """

    def __init__(self, specs: Iterable[ValidatorSpec] = ()) -> None:
        self._specs: dict[tuple[str, int], ValidatorSpec] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: ValidatorSpec) -> ValidatorSpec:
        existing = self._specs.get((spec.name, spec.version))
        if existing is not None:
            if existing != spec:
                differs = [f for f in ("policy", "fn") if getattr(existing, f) != getattr(spec, f)]
                raise ValidatorConflictError(
                    f"validator {spec.validator_label} is already registered with another "
                    f"{' and '.join(differs)}")
            return existing
        for other in self._specs.values():
            if other.policy == spec.policy and other.name != spec.name:
                raise ValidatorConflictError(
                    f"policy {spec.policy} is already served by validator "
                    f"{other.validator_label}; {spec.validator_label} cannot serve it too")
        self._specs[(spec.name, spec.version)] = spec
        return spec

    def for_policy(self, policy: str) -> ValidatorSpec | None:
        """The newest version of the validator serving `policy`, None if none does."""
        serving = [s for s in self._specs.values() if s.policy == policy]
        return max(serving, key=lambda s: s.version, default=None)

    def __iter__(self) -> Iterator[ValidatorSpec]:
        return iter(sorted(self._specs.values(), key=lambda s: (s.name, s.version)))
