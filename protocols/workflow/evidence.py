"""Typing rules of the evidence chain (docs/design.md#evidence): receipts, attestations and
publication.

- A proposal of a contract with an evidence role gets a plan (`facts.Attests`,
  `facts.Fetches`); the `result` of the `completed` arm of its outcome is the record the
  dispatcher issued: an attestation of the exact revision proposed, or receipts of the question.
- A match on an attestation's verdict narrows it in the `pass` arm: the attestation has passed
  and the report revision it judged, if still current and in draft, is `attested` (the
  dispatcher moves it when the attest completes; statically that is known only here).
- A publication (a contract with an `attestation` requirement) needs, on every path, the id of
  an attestation that passed, of the very revision of the report argument, under the required
  policy (AGL-E018, AGL-E019); the report revision's payload may cite receipts of one question
  only (AGL-E020).

The argument names are those of the evidence roles (`dispatch.services.evidence`): a receipt
is issued for `question`, an attestation judges `report` under `policy`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from protocols.contracts import EvidenceRole, OperationContract
from protocols.denials import DiagnosticCode
from protocols.lifecycle import ResourceEvent
from protocols.workflow.context import Ctx
from protocols.workflow.diagnostics import Note
from protocols.workflow.env import (
    SOURCE,
    Binding,
    DataT,
    Env,
    HandleT,
    OutcomeT,
    PoisonT,
    Prov,
    describe,
)
from protocols.workflow.facts import (
    VERDICTS,
    Attestation,
    Attests,
    Cited,
    Citing,
    Fact,
    Fetches,
    Lost,
    Plan,
    cite,
)
from protocols.workflow.ir import Expr, Literal, Propose, Span

D = DiagnosticCode
RECEIPT_SUBJECT = "question"
ATTESTED = "report"
POLICY = "policy"


def plan(contract: OperationContract, args: Mapping[str, Expr],
         handles: Mapping[str, tuple[str, int]], span: Span) -> Plan | None:
    """What a completed operation of `contract` on these arguments will have proved."""
    if contract.evidence is EvidenceRole.RECEIPT and RECEIPT_SUBJECT in handles:
        return Fetches(handles[RECEIPT_SUBJECT][0], span)
    if contract.evidence is EvidenceRole.ATTESTATION and ATTESTED in handles:
        rid, revision = handles[ATTESTED]
        return Attests(rid, revision, _policy(contract, args.get(POLICY)), span)
    return None


def _policy(contract: OperationContract, expr: Expr | None) -> str | None:
    if isinstance(expr, Literal):
        return expr.value if isinstance(expr.value, str) else None
    if expr is not None:
        return None  # data the checker cannot see
    properties = contract.input_type.get("properties")
    schema = properties.get(POLICY) if isinstance(properties, Mapping) else None
    default = schema.get("default") if isinstance(schema, Mapping) else None
    return default if isinstance(default, str) else None


def completed(env: Env, outcome: OutcomeT, vid: str, name: str, span: Span) -> None:
    """The `result` of a completed evidence operation, bound as `name` (value `vid`)."""
    found = outcome.plan
    if isinstance(found, Attests):
        env.evidence.attestations[vid] = Attestation(
            vid, name, found.rid, found.revision, found.policy, False, span)
    elif isinstance(found, Fetches):
        env.evidence.receipts[vid] = ((found.rid, found.at),)


def facts_of(env: Env, expr: Expr, fields: Sequence[str] = ()) -> tuple[Fact | None, Cited]:
    """The attestation fact and receipts of `expr` (then `fields`); none for a literal."""
    if isinstance(expr, Literal):
        return None, ()
    binding = env.bindings.get(expr.name)
    if binding is None:
        return None, ()
    return env.evidence.of(binding.vid, (*expr.fields, *fields))


def carry(env: Env, expr: Expr, vid: str, fields: Sequence[str] = (), *,
          receipts_only: bool = False) -> None:
    """Value `vid` is `expr` (then `fields`): it has its facts (only its receipts when it is
    derived from it otherwise: a loop item, a model's output)."""
    fact, cited = facts_of(env, expr, fields)
    env.evidence.put(vid, None if receipts_only else fact, cited)


def mix(env: Env, exprs: Sequence[Expr], vid: str) -> None:
    """Value `vid` is derived from all of `exprs`: it may carry any of their receipts."""
    env.evidence.put(vid, None, cite(*(facts_of(env, expr)[1] for expr in exprs)))


def written(env: Env, handle: HandleT, payload: Expr, span: Span) -> None:
    """Revision `handle` was written with `payload`: the questions it may cite."""
    cited = facts_of(env, payload)[1]
    if cited:
        env.evidence.reports[(handle.rid, handle.revision)] = Citing(cited, span)


def verdict_of(env: Env, expr: Expr) -> Attestation | None:
    """The attestation whose verdict `expr` is, if it is one."""
    fact = facts_of(env, expr)[0]
    return fact if isinstance(fact, Attestation) and fact.verdict_at == () else None


def narrow_verdict(ctx: Ctx, env: Env, fact: Attestation, tag: str, explicit: set[str],
                   span: Span) -> None:
    """In the arm of a match on `fact`'s verdict that can only be `pass`: it passed, and the
    revision it judged, if still current and draft, is attested (docs/design.md#evidence)."""
    rest = [v for v in VERDICTS if v not in explicit] if tag == "_" else [tag]
    if rest != ["pass"]:
        return
    env.evidence.narrow(fact.key)
    resource = env.resources.get(fact.rid)
    if resource is None or resource.revision != fact.revision \
            or not isinstance(resource.state, str):
        return
    table = ctx.kinds[resource.protocol].transitions
    target = table.get((resource.state, ResourceEvent.ATTEST))
    if target is not None:
        env.set_state(fact.rid, str(target), span)


def check_publication(ctx: Ctx, env: Env, contract: OperationContract, step: Propose) -> bool:
    """AGL-E018, AGL-E019: the publication's attestation argument is the id of a passing
    attestation of the report argument's revision under the required policy. False when it is
    not (reported), so that the report's state is not also held against the step."""
    need = contract.attestation
    args = dict(step.args)
    if need is None or need.argument not in args:
        return True  # nothing to publish on, or AGL-E016 already
    expr = args[need.argument]
    report = _handle(env, args.get(need.report))
    what = f"{contract.qualified_name}: `{expr}`"
    wanted = "a passing attestation" if report is None else (
        f"the id of a passing attestation of revision {report.revision} of "
        f"`{env.resources[report.rid].label}` under {need.policy}")
    binding = None if isinstance(expr, Literal) else env.bindings.get(expr.name)
    fact, cited = facts_of(env, expr)
    if binding is not None and binding.gone is not None and isinstance(fact, Lost):
        _unattested(ctx, expr, what, wanted, fact.reason, [Note("paths join here", fact.at)])
        return False
    value = ctx.resolve(env, expr)
    if isinstance(value.type, PoisonT):
        return False
    if not isinstance(value.type, DataT):
        ctx.report(D.TYPE_MISMATCH, f"argument `{need.argument}` takes data", expr.span,
                   "pass the id of an attestation", required="data",
                   actual=describe(value.type))
        return False
    if not isinstance(fact, Attestation):
        _missing(ctx, expr, what, wanted, value.prov, fact, binding, cited)
        return False
    if fact.id_at != ():
        path = "" if fact.id_at is None else f"; its id is `{expr}.{'.'.join(fact.id_at)}`"
        _unattested(ctx, expr, what, wanted, f"part of an attestation, not its id{path}",
                    [Note("attested here", fact.origin)])
        return False
    if not fact.passed:
        _unattested(ctx, expr, what, wanted, "an attestation whose verdict is not known to be "
                    "`pass`", [Note("attested here", fact.origin)],
                    help=f"match on `${fact.name}.attestation.result` and publish in its "
                         "`pass` arm: a failing attestation is refused (attestation_failed)")
        return False
    return report is None or _bound(ctx, env, what, expr.span, fact, report, need.policy,
                                    wanted)


def _handle(env: Env, expr: Expr | None) -> HandleT | None:
    """The live handle `expr` names, without reporting (the resource rules report)."""
    if expr is None or isinstance(expr, Literal) or expr.fields:
        return None
    binding = env.bindings.get(expr.name)
    if binding is None or binding.gone is not None or not isinstance(binding.type, HandleT):
        return None
    return binding.type


def _missing(ctx: Ctx, expr: Expr, what: str, wanted: str, prov: Prov, fact: Fact | None,
             binding: Binding | None, cited: Cited) -> None:
    if isinstance(fact, Lost):
        _unattested(ctx, expr, what, wanted, fact.reason, [Note("paths join here", fact.at)])
        return
    if isinstance(expr, Literal):
        actual = f"{SOURCE[Prov.LITERAL]}, not an attestation the workflow obtained"
    elif prov is not Prov.TRUSTED:
        actual = f"data from {SOURCE[prov]}"
    elif cited:
        actual = "data from a fetch's receipt, not from an attestation"
    else:
        actual = "data that is not the id of an attestation"
    _unattested(ctx, expr, what, wanted, actual,
                [] if binding is None else [Note("produced here", binding.origin)])


def _unattested(ctx: Ctx, expr: Expr, what: str, wanted: str, actual: str, notes: list[Note],
                help: str | None = None) -> None:
    ctx.report(D.UNATTESTED_PUBLICATION, f"{what} is not a passing attestation of the report "
               "on every path", expr.span, help or (
                   "propose evidence.attest on this report revision, dispatch it, match its "
                   "`completed` result and its verdict, and publish in the `pass` arm with "
                   "`$result.attestation.id` (docs/design.md#evidence)"),
               required=wanted, actual=actual, notes=notes)


def _bound(ctx: Ctx, env: Env, what: str, span: Span, fact: Attestation, report: HandleT,
           policy: str, wanted: str) -> bool:
    """AGL-E019: the attestation judged this report, this revision, under `policy`."""
    resource = env.resources[report.rid]
    attested = env.resources.get(fact.rid)
    judged = f"revision {fact.revision} of `{attested.label if attested else fact.rid}`"
    notes = [Note("attested here", fact.origin)]
    if fact.rid != report.rid:
        problem = f"it attests {judged}, another report"
    elif fact.revision != report.revision:
        problem = f"it attests {judged}, which was edited since"
        if resource.changed_at is not None:
            notes.append(Note("edited here", resource.changed_at))
    elif fact.policy != policy:
        problem = f"it was judged under {fact.policy or 'a policy not known statically'}"
    else:
        return True
    ctx.report(D.UNBOUND_ATTESTATION, f"{what} is not bound to revision {report.revision} of "
               f"`{resource.label}` under {policy}: {problem}", span,
               "attest the revision being published, under the policy the contract requires, "
               "and publish with that attestation (attestation_unbound otherwise)",
               required=wanted, actual=f"an attestation of {judged} under "
                                       f"{fact.policy or 'an unknown policy'}", notes=notes)
    return False


def check_citations(ctx: Ctx, env: Env, expr: Expr, report: HandleT) -> None:
    """AGL-E020: the published revision's payload may cite receipts of one question only."""
    citing = env.evidence.reports.get((report.rid, report.revision))
    if citing is None or len(citing.questions) < 2:
        return
    labels = [f"`{env.resources[rid].label}`" for rid, _ in citing.questions]
    resource = env.resources[report.rid]
    ctx.report(D.FOREIGN_RECEIPT, f"revision {report.revision} of `{resource.label}` may cite "
               f"receipts of {len(labels)} questions: at most one is its own", expr.span,
               "write each report from the receipts of its own question only: cited-sources/1 "
               "fails a citation of another question's receipt (docs/design.md#evidence)",
               required="receipts of one question", actual=f"receipts of {', '.join(labels)}",
               notes=[Note("payload written here", citing.at),
                      *(Note(f"receipt of {label} fetched here", span)
                        for label, (_, span) in zip(labels, citing.questions, strict=True))])
