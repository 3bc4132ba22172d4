"""Property tests: the parser and checker never raise on well-formed input, are deterministic,
and a clean result respects the declared effect ceiling."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from demo.contracts import build_registry
from protocols.denials import DiagnosticCode
from protocols.workflow import (
    CheckedWorkflow,
    Diagnostics,
    Workflow,
    WorkflowBuilder,
    arm,
    check_source,
    check_workflow,
    parse_workflow,
    ref,
)
from protocols.workflow.builder import BlockBuilder

REGISTRY = build_registry({"email.send": "e", "payments.transfer": "p", "crm.lookup": "c",
                           "research.fetch": "f", "evidence.attest": "a", "report.publish": "r"})
NAMES = ["draft", "p", "d", "permit", "o", "x", "flag", "msg", "report", "question"]
OPS = ["email.send", "payments.transfer", "crm.lookup", "files.delete", "research.fetch",
       "evidence.attest", "report.publish"]
TAGS = ["Granted", "Denied", "completed", "failed_no_effect", "unknown", "_", "urgent", "pass",
        "fail"]
FIELDS = ["permit", "reason", "result", "error", "why"]
EFFECTS = ["read", "human", "external_write", "financial_write"]
CODES = {code.value for code in DiagnosticCode}
FIXTURES = sorted((Path(__file__).resolve().parents[2] / "workflows").glob("*/*.*"))

Step = Callable[[BlockBuilder], object]
names = st.sampled_from(NAMES)
literals = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(
    ["prm_1", "$x", "support@acme.example", "EUR"]), st.just({"id": "r", "revision": 1}))
exprs = st.one_of(names.map(ref), st.sampled_from(
    ["msg.permit", "x.a", "o.attestation.id", "o.attestation.result", "x.attestation"]).map(ref),
    literals)
binds = st.one_of(st.none(), names)


def simple_steps() -> st.SearchStrategy[Step]:
    args = st.dictionaries(st.sampled_from(["draft", "customer_id", "from_account",
                                            "to_account", "amount", "currency", "extra",
                                            "question", "report", "attestation", "source",
                                            "policy"]),
                           exprs, max_size=4)
    payload = st.one_of(exprs, st.just({"from": "support@acme.example", "to": ["a@b.example"],
                                        "subject": "s", "body": "b"}))
    return st.one_of(
        st.builds(lambda op, a, b: lambda x: x.propose(op, bind=b, **a),
                  st.sampled_from(OPS), args, binds),
        st.builds(lambda e, b, r: lambda x: x.request_approval(e, bind=b, role=r),
                  exprs, binds, st.sampled_from([None, "operator", "auditor"])),
        st.builds(lambda b: lambda x: x.approve("?", bind=b), binds),
        st.builds(lambda e, p, r, b: lambda x: x.dispatch(e, permit=p, retry=r, bind=b),
                  exprs, st.one_of(st.none(), exprs), st.sampled_from([None, 1, 3, 5]), binds),
        st.builds(lambda k, p, b: lambda x: x.create(k, p, bind=b),
                  st.sampled_from(["email_draft", "report", "question"]), payload, binds),
        st.builds(lambda h, p, b: lambda x: x.edit(h, p, bind=b), exprs, payload, binds),
        st.builds(lambda n, e: lambda x: x.let(n, e), names, exprs),
        st.builds(lambda b: lambda x: x.receive(bind=b), binds),
        st.builds(lambda t, i, r, b: lambda x: x.agent("a", tools=t, input=i, returns=r, bind=b),
                  st.lists(st.sampled_from(OPS), max_size=2),
                  st.dictionaries(st.sampled_from(["q", "h"]), exprs, max_size=2),
                  st.sampled_from(["json", "bool"]), binds),
    )


def blocks(children: st.SearchStrategy[list[Step]]) -> st.SearchStrategy[Step]:
    def run(steps: list[Step]) -> Callable[[BlockBuilder], object]:
        def body(builder: BlockBuilder) -> object:
            for step in steps:
                step(builder)
            return builder
        return body

    arms = st.dictionaries(st.sampled_from(TAGS), st.tuples(
        children, st.dictionaries(st.sampled_from(FIELDS), names, max_size=1)), max_size=3)
    return st.one_of(
        st.builds(lambda c, t, e: lambda x: x.if_(c, then=run(t), else_=run(e)),
                  exprs, children, children),
        st.builds(lambda s, a: lambda x: x.match(
            s, **{tag: arm(run(body), **bound) for tag, (body, bound) in a.items()}),
                  exprs, arms),
        st.builds(lambda b, t, o, par: lambda x: x.loop(run(b), times=t, over=o, parallel=par),
                  children, st.sampled_from([None, 0, 2]), st.one_of(st.none(), exprs),
                  st.booleans()),
        st.builds(lambda b, c, r, f, n: lambda x: x.try_(
            run(b), catch=None if c is None else run(c), result=r, fallback=f, bind=n),
                  children, st.one_of(st.none(), children), st.one_of(st.none(), exprs),
                  st.one_of(st.none(), exprs), binds),
        st.builds(lambda a, b: lambda x: x.parallel(left=run(a), right=run(b)),
                  children, children),
        st.builds(lambda a, b: lambda x: x.race(left=run(a), right=run(b)), children, children),
    )


steps = st.recursive(simple_steps(), lambda inner: blocks(st.lists(inner, max_size=4)),
                     max_leaves=20)


@st.composite
def workflows(draw: st.DrawFn) -> Any:
    builder = WorkflowBuilder("random", effects=draw(st.sets(st.sampled_from(EFFECTS))))
    if draw(st.booleans()):
        builder.authority(["*"], {"mailbox": "*", "account": "*", "customer": "*",
                                  "topic": "*"})
    builder.handle("draft", "email_draft",
                   state=draw(st.sampled_from([None, "draft", "proposed", "sent"])))
    builder.handle("report", "report", state=draw(st.sampled_from([None, "attested"])))
    builder.handle("question", "question")
    for name in draw(st.sets(st.sampled_from(["flag", "msg"]))):
        builder.input(name, draw(st.sampled_from(["bool", "json", "permit"])))
    for step in draw(st.lists(steps, max_size=8)):
        step(builder)
    return builder.build()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workflows())
def test_checker_never_raises_and_is_deterministic(workflow: Any) -> None:
    first = check_workflow(workflow, REGISTRY)
    assert isinstance(first, CheckedWorkflow | Diagnostics)
    second = check_workflow(workflow, REGISTRY)
    if isinstance(first, Diagnostics):
        assert isinstance(second, Diagnostics)
        assert first.items == second.items
        assert all(d.code.value in CODES and d.span.path and d.help for d in first)
    else:
        assert isinstance(second, CheckedWorkflow)
        assert first.effects <= workflow.effects
        assert first.binds(REGISTRY)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workflows())
def test_a_clean_workflow_stays_clean_inside_a_try(workflow: Any) -> None:
    if not isinstance(check_workflow(workflow, REGISTRY), CheckedWorkflow):
        return
    wrapped = WorkflowBuilder("wrapped", effects=workflow.effects)
    wrapped._authority, wrapped._inputs = list(workflow.authority), list(workflow.inputs)
    wrapped.try_(lambda b: b._steps.extend(workflow.steps), catch=lambda b: None)
    assert isinstance(check_workflow(wrapped.build(), REGISTRY), CheckedWorkflow)


KEYS = ["version", "name", "effects", "steps", "inputs", "authority", "propose", "dispatch",
        "match", "arms", "do", "if", "then", "loop", "try", "catch", "parallel", "race",
        "bind", "args", "permit", "agent", "tools", "fallback", "result", "handle", "x-note"]
documents = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.floats(allow_nan=False),
              st.sampled_from(["$draft", "$$x", "$bad name", "email.send", "email_draft", "",
                               "Granted"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
    max_leaves=30)


@settings(max_examples=150, deadline=None)
@given(documents, st.booleans())
def test_parser_never_raises_on_arbitrary_documents(document: Any, as_json: bool) -> None:
    if isinstance(document, dict):
        document.setdefault("version", 1)
    text = json.dumps(document) if as_json else yaml.safe_dump(document)
    filename = "random.json" if as_json else "random.yaml"
    parsed = parse_workflow(text, filename=filename)
    if isinstance(parsed, Diagnostics):
        assert [d.code for d in parsed] == [DiagnosticCode.MALFORMED_WORKFLOW]
        assert parsed.items[0].line >= 1
    else:
        assert isinstance(check_workflow(parsed, REGISTRY), CheckedWorkflow | Diagnostics)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(FIXTURES), st.data())
def test_damaged_fixtures_never_crash(path: Path, data: st.DataObject) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    start = data.draw(st.integers(0, len(lines) - 1))
    stop = data.draw(st.integers(start, min(len(lines), start + 3)))
    damaged = "\n".join(lines[:start] + lines[stop:])
    result = check_source(damaged, REGISTRY, filename=path.name)
    assert isinstance(result, CheckedWorkflow | Diagnostics)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["a.yaml", "a.json"]))
def test_parser_never_raises_on_arbitrary_text(text: str, filename: str) -> None:
    result = parse_workflow(text, filename=filename)
    assert isinstance(result, Workflow | Diagnostics)


# -- well-typed compositions -------------------------------------------------------------------
# A tree of leaves (an exact-action email send on a fresh draft, a CRM lookup, a model call)
# under if/loop/try/parallel/race. Each leaf owns fresh names, so every tree is well typed;
# sabotaging one send must then be caught.

Tree = tuple[Any, ...]
leaves = st.sampled_from([("send",), ("lookup",), ("read",)])
trees = st.recursive(leaves, lambda inner: st.one_of(
    st.tuples(st.just("if"), st.lists(inner, max_size=3), st.lists(inner, max_size=3)),
    st.tuples(st.just("loop"), st.lists(inner, min_size=1, max_size=3), st.booleans()),
    st.tuples(st.just("try"), st.lists(inner, min_size=1, max_size=3)),
    st.tuples(st.just("parallel"), st.lists(inner, max_size=3), st.lists(inner, max_size=3)),
    st.tuples(st.just("race"), st.lists(leaves.filter(lambda leaf: leaf[0] != "send"),
                                        max_size=2), st.lists(inner.filter(
                                            lambda t: t == ("read",)), max_size=2)),
), max_leaves=12)
SABOTAGE = {"no_permit": "AGL-E005", "literal_permit": "AGL-E013", "before_approval": "AGL-E005",
            "twice": "AGL-E006", "retry": "AGL-E006", "wrong_role": "AGL-E005"}


class Composer:
    def __init__(self, sabotage: str | None = None, target: int = 0) -> None:
        self.count = 0
        self.sends = 0
        self.sabotage, self.target = sabotage, target

    def block(self, items: list[Tree]) -> Callable[[BlockBuilder], object]:
        def body(builder: BlockBuilder) -> object:
            for item in items:
                self.add(builder, item)
            return builder
        return body

    def add(self, b: BlockBuilder, tree: Tree) -> None:
        self.count += 1
        n = self.count
        kind = tree[0]
        if kind == "send":
            self.send(b, n)
        elif kind == "lookup":
            b.propose("crm.lookup", customer_id=f"c-{n}", bind=f"q{n}").dispatch(ref(f"q{n}"))
        elif kind == "read":
            b.agent(f"reader{n}", tools=["crm.lookup"], bind=f"notes{n}")
        elif kind == "if":
            b.if_(ref("flag"), then=self.block(tree[1]), else_=self.block(tree[2]))
        elif kind == "loop":
            b.loop(self.block(tree[1]), times=2, parallel=tree[2])
        elif kind == "try":
            b.try_(self.block(tree[1]), catch=lambda c: c.agent(f"reporter{n}"))
        else:
            getattr(b, kind)(a=self.block(tree[1]), b=self.block(tree[2]))

    def send(self, b: BlockBuilder, n: int) -> None:
        mine = self.sends == self.target and self.sabotage is not None
        self.sends += 1
        mode = self.sabotage if mine else None
        draft, proposal, decision = f"draft{n}", f"p{n}", f"d{n}"
        b.create("email_draft", {"from": "support@acme.example", "to": ["a@example.com"],
                                 "subject": "s", "body": "b"}, bind=draft)
        b.propose("email.send", draft=ref(draft), bind=proposal)
        if mode == "before_approval":
            b.dispatch(ref(proposal))
        b.request_approval(ref(proposal), bind=decision,
                           role="auditor" if mode == "wrong_role" else "operator")

        def granted(g: BlockBuilder) -> object:
            permit: object = ref(f"permit{n}")
            if mode == "no_permit":
                permit = None
            elif mode == "literal_permit":
                permit = "prm_forged"
            g.dispatch(ref(proposal), permit=permit, bind=f"o{n}",
                       retry=2 if mode == "retry" else None)
            if mode == "twice":
                g.dispatch(ref(proposal), permit=ref(f"permit{n}"))
            return g

        b.match(ref(decision), Granted=arm(granted, permit=f"permit{n}"), Denied=arm())


def compose(tree: list[Tree], composer: Composer) -> Any:
    builder = (WorkflowBuilder("composed", effects=EFFECTS)
               .authority(["email.send"], {"mailbox": ["support@acme.example"]})
               .authority(["crm.lookup"], {"customer": "*"})
               .input("flag", "bool"))
    composer.block(tree)(builder)
    return builder.build()


@settings(max_examples=150, deadline=None)
@given(st.lists(trees, max_size=4))
def test_well_typed_compositions_check_clean(tree: list[Tree]) -> None:
    result = check_workflow(compose(tree, Composer()), REGISTRY)
    assert isinstance(result, CheckedWorkflow), "\n".join(d.render() for d in result)


@settings(max_examples=150, deadline=None)
@given(st.lists(trees, max_size=4), st.sampled_from(sorted(SABOTAGE)), st.data())
def test_sabotaging_one_send_is_always_caught(tree: list[Tree], sabotage: str,
                                              data: st.DataObject) -> None:
    sends = Composer()
    compose(tree, sends)
    if sends.sends == 0:
        tree = [*tree, ("send",)]
        sends.sends = 1
    target = data.draw(st.integers(0, sends.sends - 1))
    result = check_workflow(compose(tree, Composer(sabotage, target)), REGISTRY)
    assert isinstance(result, Diagnostics)
    assert SABOTAGE[sabotage] in result.codes
