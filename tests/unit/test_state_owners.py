"""Every state change goes through its record kind's one owner (STYLE: one function that moves
each record kind's state, `<kind>_move(record, event, *, now, actor, ...) -> bool`): no other
function of ours writes a `state` column, however it is spelled.

The scan reads the syntax tree of every module of the packages we ship, `demo/` included, and
finds each spelling of a state write: an assignment to `.state` (then saved, or not: the record
a caller holds says what the store says only through its owner), `setattr(x, "state", ...)`,
`.update(state=...)` or an `.update(**fields)` of a query, `bulk_update(..., ["state"])`,
`update_or_create`/`get_or_create` with a `state` default, `create(state=...)` and a model
built with `state=...`, `save(update_fields=[..."state"...])`, and SQL text whose `SET` clause
assigns `state` in any case, quoting or spacing (a literal, an f-string or a `+` of them).
Each write is allowed only in a function `OWNERS` names for its record kind (the kind read from
the model or table it names; an attribute or `setattr` write names none, and may be made by any
owner).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What pyproject ships (`[tool.setuptools.packages.find]`). `bench/` is not scanned: its raw
#: side is the hand-written claim transaction the service path is measured against, on a
#: database of its own.
PACKAGES = ("config", "console", "demo", "dispatch", "protocols")
#: `protocols/` is pure (import-linter: no django), so it holds no model: its `.state`
#: assignments are the replay's own records (`protocols.trace`). Its SQL and ORM spellings are
#: still scanned.
PURE = "protocols/"

S = "dispatch/services/"
ST = "dispatch/store/"
#: Each record kind with a state, and the functions that may write it: its one owner
#: (`<kind>_move`, first), the one that creates it in its table's initial state, and the fixed
#: statements of the owner's module (a module-level name).
OWNERS: dict[str, set[str]] = {
    "Operation": {f"{S}operations.py:operation_move", f"{ST}operations.py:_MOVE",
                  # the claim creates the operation, `claimed` (its INSERT and its instance)
                  f"{S}claims.py:operation_claim"},
    "Permit": {f"{S}permits.py:permit_move", f"{S}approvals.py:_permit_mint",
               # the one-shot claim's statement, run by the claim (dispatch.services.claims)
               f"{ST}claims.py:PERMIT_CLAIM"},
    "ApprovalRequest": {f"{S}approvals.py:approval_move", f"{S}approvals.py:approval_open",
                        # approval_move's conditional UPDATE (dispatch.store.approvals.move)
                        f"{ST}approvals.py:_MOVE"},
    "Renewal": {f"{S}renewals.py:renewal_move", f"{S}renewals.py:operation_reauthorize"},
    "Resource": {f"{S}resources.py:resource_move", f"{S}resources.py:resource_create",
                 # resource_move's statement (dispatch.store.resources.move), derived from the
                 # kinds' tables
                 f"{ST}resources.py:_move_statement",
                 # an edit's new revision, moved by resource_move, is in the initial state
                 f"{S}resources.py:revision_create"},
    "Execution": {f"{S}executions.py:execution_move", f"{S}executions.py:execution_create"},
    "WorkflowWait": {f"{S}waits.py:wait_move", f"{S}waits.py:wait_park"},
    # outbox rows are created pending (the model's default), moved only by their owner
    "Notification": {f"{S}notifications.py:notification_move"},
}
#: The one owner of each kind, and the transition table it moves by.
MOVERS = {"Operation": "operation_move", "Permit": "permit_move",
          "ApprovalRequest": "approval_move", "Renewal": "renewal_move",
          "Resource": "resource_move", "Execution": "execution_move",
          "WorkflowWait": "wait_move",
          "Notification": "notification_move"}
ANY_OWNER = set().union(*OWNERS.values())


@dataclass(frozen=True)
class Write:
    path: str
    scope: str  # the enclosing function, or the module-level name assigned
    line: int
    kind: str | None  # the record kind it names, if it names one
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.scope} ({self.kind or 'any kind'}): {self.text}"


def _models_with_state() -> set[str]:
    """The model classes of `dispatch.models` that declare a `state` field."""
    found = set()
    for path in (ROOT / "dispatch" / "models").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(item, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == "state" for t in item.targets)
                    for item in node.body):
                found.add(node.name)
    return found


MODELS = frozenset(OWNERS)
TABLES = {f"dispatch_{name.lower()}": name for name in MODELS}

# A `SET` clause up to what ends it, and an assignment of `state` in it: first or after a
# comma, bare or quoted ("state", `state`, [state]), any case and spacing.
_SET = re.compile(r"\bSET\b(?P<clause>.*?)(?=\bWHERE\b|\bRETURNING\b|\bFROM\b|;|$)",
                  re.IGNORECASE | re.DOTALL)
_STATE = re.compile(r"(?:^|,)\s*[\"`\[]?state[\"`\]]?\s*=(?!=)", re.IGNORECASE)
_TABLE = re.compile(r"\bUPDATE\s+(?:ONLY\s+)?[\"`\[]?(\w+)[\"`\]]?", re.IGNORECASE)


def sql_sets_state(text: str) -> tuple[bool, str | None]:
    """Whether `text` holds a `SET` clause that assigns `state`, and the table it updates."""
    for match in _SET.finditer(text):
        if _STATE.search(match.group("clause")):
            tables = _TABLE.findall(text[:match.start()])
            return True, tables[-1] if tables else None
    return False, None


def _string(node: ast.AST) -> str | None:
    """The text of a string expression: a literal, an f-string (each value as `{}`), or a `+`
    of them; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str)
                       else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string(node.left), _string(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _root_name(node: ast.AST) -> str | None:
    """`Operation` of `Operation.objects.filter(...).update`: the name a call chain starts at."""
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Name):
            return node.id
        else:
            return None


def _names_state(node: ast.AST | None) -> bool:
    """A list/tuple/set of field names, or a dict of values, that holds "state"."""
    if node is None:
        return False
    if isinstance(node, ast.Dict):
        return any(isinstance(k, ast.Constant) and k.value == "state" for k in node.keys)
    return any(isinstance(c, ast.Constant) and c.value == "state" for c in ast.walk(node))


def _kind_of(call: ast.Call) -> str | None:
    name = _root_name(call)
    return name if name in MODELS else None


def _call_writes_state(call: ast.Call) -> tuple[bool, str | None]:
    func = call.func
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    spreads = [k.value for k in call.keywords if k.arg is None]
    if isinstance(func, ast.Name):
        if func.id == "setattr" and len(call.args) >= 2 and isinstance(
                call.args[1], ast.Constant) and call.args[1].value == "state":
            return True, None
        if func.id in MODELS and "state" in keywords:
            return True, func.id  # a model instance built in a state
        return False, None
    if not isinstance(func, ast.Attribute):
        return False, None
    method, kind = func.attr, _kind_of(call)
    if method in ("update", "create", "get_or_create", "update_or_create"):
        if "state" in keywords or any(_names_state(s) for s in spreads):
            return True, kind
        # `fields.update(**x)` of a dict is no write; `<query>.update(**fields)` may be one.
        if method == "update" and spreads and not isinstance(func.value, ast.Name):
            return True, kind
        if method in ("get_or_create", "update_or_create") and any(
                _names_state(keywords.get(k)) for k in ("defaults", "create_defaults")):
            return True, kind
    if method == "bulk_update":
        fields = keywords.get("fields", call.args[1] if len(call.args) > 1 else None)
        if _names_state(fields):
            return True, kind
    if method == "save" and _names_state(keywords.get("update_fields")):
        return True, None
    return False, None


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        pending = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        pending = [node.target]
    else:
        return
    while pending:
        target = pending.pop()
        if isinstance(target, ast.Tuple | ast.List):
            pending.extend(target.elts)
        else:
            yield target


def state_writes(source: str, relative: str) -> list[Write]:
    """Every state write of one module, with the function (or module-level name) it is in."""
    tree = ast.parse(source, relative)
    found: list[Write] = []
    pure = relative.startswith(PURE)

    def visit(node: ast.AST, scope: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and scope == "<module>":
            scope = node.name  # the outermost function: a nested helper is part of it
        if scope == "<module>" and isinstance(node, ast.Assign | ast.AnnAssign):
            names = [t.id for t in _targets(node) if isinstance(t, ast.Name)]
            for child in ast.iter_child_nodes(node):
                visit(child, names[0] if names else scope)
            return
        text = _string(node)
        if text is not None:
            sets, table = sql_sets_state(text)
            if sets:
                found.append(Write(relative, scope, getattr(node, "lineno", 0),
                                   TABLES.get(table or ""), text[:80]))
            return  # its parts are not strings of their own
        if not pure:
            for target in _targets(node):
                if isinstance(target, ast.Attribute) and target.attr == "state":
                    found.append(Write(relative, scope, node.lineno, None,
                                       ast.unparse(node)[:80]))
        if isinstance(node, ast.Call):
            writes, kind = _call_writes_state(node)
            if writes and not (pure and kind is None):
                found.append(Write(relative, scope, node.lineno, kind, ast.unparse(node)[:80]))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, "<module>")
    return found


def violations(writes: list[Write]) -> list[str]:
    """The writes made outside the functions allowed to make them."""
    bad = []
    for write in writes:
        allowed = OWNERS[write.kind] if write.kind is not None else ANY_OWNER
        if f"{write.path}:{write.scope}" not in allowed:
            bad.append(str(write))
    return bad


def _our_modules() -> Iterator[tuple[str, str]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "/migrations/" not in relative:
                yield path.read_text(), relative


def test_no_function_but_its_kinds_owner_writes_a_state() -> None:
    found = [write for source, relative in _our_modules()
             for write in state_writes(source, relative)]
    assert violations(found) == []
    # The scan sees the owners' own writes, of every kind (it is not blind).
    seen = {f"{w.path}:{w.scope}" for w in found}
    written_by = {kind: f"{S}{module}.py:{MOVERS[kind]}" for kind, module in (
        ("Operation", "operations"), ("Permit", "permits"), ("ApprovalRequest", "approvals"),
        ("Renewal", "renewals"), ("Resource", "resources"), ("Execution", "executions"),
        ("WorkflowWait", "waits"),
    )}
    # A mover whose statement is derived from the kinds' tables writes through the store's
    # builder of it.
    written_by["Resource"] = f"{ST}resources.py:_move_statement"
    assert set(written_by.values()) <= seen


def test_every_record_kind_with_a_state_has_one_owner() -> None:
    assert _models_with_state() == set(OWNERS) == set(MOVERS)


def _function(relative: str, name: str) -> ast.FunctionDef:
    tree = ast.parse((ROOT / relative).read_text())
    (found,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    return found


@pytest.mark.parametrize("kind", sorted(MOVERS))
def test_every_owner_has_one_shape(kind: str) -> None:
    """`<kind>_move(record, event, *, now, ...)`; every one but the resource's (which raises
    the denial that says which precondition failed, so that its caller rolls back whole) takes
    who moves it and answers whether it moved."""
    (owner,) = [entry for entry in OWNERS[kind] if entry.endswith(f":{MOVERS[kind]}")]
    relative, name = owner.split(":")
    function = _function(relative, name)
    assert [a.arg for a in function.args.args][1:] == ["event"]
    keyword_only = [a.arg for a in function.args.kwonlyargs]
    assert keyword_only[0] == "now" or "now" in keyword_only
    if kind != "Resource":
        assert "actor" in keyword_only
        assert function.returns is not None and ast.unparse(function.returns) == "bool"


# --- the scan itself: a planted write of each spelling is found -------------------------------

PLANTED = {
    "assigned then saved": "op.state = 'completed'\n    op.save()",
    "assigned in a tuple": "op.state, op.updated_at = 'completed', now",
    "augmented": "op.state += ''",
    "setattr": "setattr(op, 'state', 'completed')",
    "update": "Operation.objects.filter(id=i).update(state='completed')",
    "update of a spread dict": "Operation.objects.filter(id=i).update(**{'state': 'x'})",
    "update of spread fields": "Operation.objects.filter(id=i).update(**fields)",
    "bulk_update": "Operation.objects.bulk_update(ops, ['state'])",
    "bulk_update fields=": "Operation.objects.bulk_update(ops, fields=('updated_at', 'state'))",
    "update_or_create": "Operation.objects.update_or_create(id=i, defaults={'state': 'x'})",
    "get_or_create": "Operation.objects.get_or_create(id=i, defaults={'state': 'x'})",
    "create": "Operation.objects.create(id=i, state='pending')",
    "a model built": "Operation.objects.bulk_create([Operation(id=i, state='pending')])",
    "save(update_fields)": "op.save(update_fields=['updated_at', 'state'])",
    "SQL SET \"state\"": "run('UPDATE \"dispatch_operation\" SET \"state\" = %s WHERE id = %s')",
    "SQL lowercase, spaced": "run('update dispatch_operation set   state=%s where id=%s')",
    "SQL second column": "run('UPDATE x SET \"updated_at\" = %s,  \"state\"  = %s')",
    "SQL quoted by brackets": "run('UPDATE x SET [state] = ? WHERE id = ?')",
    "SQL f-string": "run(f'UPDATE \"dispatch_permit\" SET \"state\" = \\'{target}\\'')",
    "SQL concatenated": "run('UPDATE \"dispatch_operation\" ' + 'SET \"state\" = %s')",
    "SQL multi-line": "run('''UPDATE dispatch_operation\n        SET\n  \"state\"\n = %s''')",
}


def _planted(tmp_path: Path, body: str, relative: str = "demo/planted.py",
             function: str = "helper") -> list[str]:
    path = tmp_path / "planted.py"
    path.write_text(f"def {function}(op, ops, i, now, fields, run, target):\n    {body}\n")
    return violations(state_writes(path.read_text(), relative))


@pytest.mark.parametrize("spelling", sorted(PLANTED))
def test_a_planted_state_write_is_caught(tmp_path: Path, spelling: str) -> None:
    assert len(_planted(tmp_path, PLANTED[spelling])) == 1, spelling


def test_a_module_level_statement_that_sets_a_state_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "planted.py"
    path.write_text("MOVE = (\n    'UPDATE \"dispatch_operation\" '\n    'SET \"state\" = %s'\n)\n")
    assert violations(state_writes(path.read_text(), "dispatch/planted.py")) == [
        "dispatch/planted.py:2 in MOVE (Operation): "
        "UPDATE \"dispatch_operation\" SET \"state\" = %s"]


def test_a_write_in_an_owner_module_outside_its_owner_is_caught(tmp_path: Path) -> None:
    """An owner's module is not a free zone: only the owner function writes."""
    write = PLANTED["update"]
    assert _planted(tmp_path, write, f"{S}operations.py", "operation_move") == []
    assert len(_planted(tmp_path, write, f"{S}operations.py", "operation_helper")) == 1
    # Nor does one kind's owner write another kind's state.
    assert len(_planted(tmp_path, write, f"{S}permits.py", "permit_move")) == 1


def test_a_clean_module_passes(tmp_path: Path) -> None:
    """Reads of a state, a denial naming one, a JSON document with a `state` key spread into
    a dict, and SQL that only compares a state are no writes. (`x.update(state=...)` counts,
    whatever `x` is: a query held in a name is as much a write.)"""
    path = tmp_path / "clean.py"
    path.write_text(
        "def helper(op, fields, run):\n"
        "    Operation.objects.filter(state='claimed').exists()\n"
        "    Operation.objects.filter(id=op.id).update(updated_at=None, evidence='')\n"
        "    raise_it = Denial('protocol_state_invalid', state=op.state)\n"
        "    body = {'state': op.state}\n"
        "    fields.update(**body)\n"
        "    op.save(update_fields=['evidence'])\n"
        "    current = op.state\n"
        "    run('UPDATE \"dispatch_operation\" SET \"uncertain\" = TRUE '\n"
        "        'WHERE \"id\" = %s AND \"state\" = %s')\n"
        "    run('SELECT \"state\" FROM \"dispatch_operation\" WHERE \"state\" = %s')\n"
        "    run('UPDATE x SET \"statement\" = %s, \"estate\" = %s')\n"
        "    return raise_it, body, current\n")
    assert state_writes(path.read_text(), "demo/clean.py") == []


def test_pure_core_records_are_not_models(tmp_path: Path) -> None:
    """`protocols/` holds no model (import-linter): its `.state` is the replay's own; its SQL
    and ORM spellings still count."""
    path = tmp_path / "pure.py"
    path.write_text("def replay(operation, run):\n    operation.state = 'claimed'\n"
                    "    run('UPDATE dispatch_operation SET state = 1')\n")
    assert len(violations(state_writes(path.read_text(), "protocols/pure.py"))) == 1


#: Who may start an attempt (docs/design.md#retries): the first is the claim's, in the claim's
#: own transaction where the process that claims runs the handler (`_claim_in_one_transaction`,
#: docs/design.md#write-transactions) or right after it on the worker (`attempt_start`); every
#: one after it `attempt_next`'s, which checks again what the claim checked.
ATTEMPT_STARTERS = {"attempt_open": {"dispatch/services/operations.py:attempt_start",
                                      "dispatch/services/dispatcher.py:_claim_in_one_transaction",
                                      "dispatch/services/attempts.py:attempt_next"},
                    "attempt_start": {"dispatch/services/worker.py:_next_attempt"}}


def _callers(name: str) -> set[str]:
    found = set()
    for path in sorted([*ROOT.glob("dispatch/**/*.py"), *ROOT.glob("demo/**/*.py")]):
        relative = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), relative)
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and name in (
                        getattr(node.func, "id", None), getattr(node.func, "attr", None)):
                    found.add(f"{relative}:{function.name}")
    return found


def test_one_function_starts_every_attempt_after_the_first() -> None:
    for name, allowed in ATTEMPT_STARTERS.items():
        assert _callers(name) == allowed, name


def test_the_execution_model_stores_its_tables_states() -> None:
    from dispatch.models import Execution
    from protocols.lifecycle_runs import EXECUTION_LIFECYCLE, ExecutionState

    assert {value for value, _label in Execution.State.choices} == {
        state.value for state in ExecutionState} == {
        state.value for state in EXECUTION_LIFECYCLE.states}


def test_the_wait_model_stores_its_tables_states() -> None:
    from dispatch.models import WorkflowWait
    from protocols.lifecycle_runs import WAIT_LIFECYCLE, WaitState

    assert {value for value, _label in WorkflowWait.State.choices} == {
        state.value for state in WaitState} == {state.value for state in WAIT_LIFECYCLE.states}


#: An attempt has no state of its own to move by a table: it is opened (`attempt_open`), held
#: uncertain (`attempt_hold`) or ended with its operation's move (`operation_move`), each a
#: verb of the operation's owner, in one module, by the statements of one store module.
ATTEMPT_WRITES = re.compile(r"\b(?:UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+\"?dispatch_attempt\b",
                            re.IGNORECASE)


def attempt_writes(source: str, relative: str) -> list[str]:
    """SQL that writes an attempt row, and ORM writes of `Attempt`, outside the operation's
    owner module."""
    if relative in (f"{S}operations.py", f"{ST}operations.py"):
        return []
    methods = ("create", "update", "bulk_create", "bulk_update", "get_or_create",
               "update_or_create", "delete")
    found = []
    for node in ast.walk(ast.parse(source, relative)):
        text = _string(node)
        sql = text is not None and ATTEMPT_WRITES.search(text) is not None
        orm = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in methods and _root_name(node) == "Attempt"
        if sql or orm:
            found.append(f"{relative}:{getattr(node, 'lineno', 0)}")
    return found


def test_only_the_operations_owner_writes_an_attempt(tmp_path: Path) -> None:
    assert [w for source, relative in _our_modules()
            for w in attempt_writes(source, relative)] == []
    planted = ("def f(run, i):\n    run('update dispatch_attempt set ended_at = 1')\n"
               "    Attempt.objects.filter(id=i).update(outcome='completed')\n")
    assert len(attempt_writes(planted, "demo/planted.py")) == 2
