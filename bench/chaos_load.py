"""The chaos soak's load (bench/chaos.py), all through the REST API with the Python client
(clients/python): agents proposing emails, payments and publications, an automatic approver
acting as two operators (four eyes where demo/approval_rules.json asks for it), and random
cancellations. Every choice comes from a `random.Random` seeded by the run's seed.

A call that may be repeated safely (a read, a proposal with a `call_id`) is repeated while the
console is unreachable or answers 5xx, as a careful agent would; a call that may not (a new
resource) is given up, and the next action starts afresh.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from exact_console import Client
from exact_console.errors import Denied, Error, Timeout, TransportError

T = TypeVar("T")
MAILBOX = "support@acme.example"
#: Two sentences of the source server's `bees` document: cited-sources/1 wants two receipts.
QUOTES = ("A forager tells her nestmates where the flowers are with a waggle dance",
          "A honey bee colony holds a single queen")
LOSSY = {"email": "lose-response-once.test", "payment": "lose-response-once.test",
         "publication": "lose-response-once.test"}


def patiently(call: Callable[[], T], seconds: float = 90.0) -> T:
    """`call()`, repeated while the console is unreachable or fails (5xx), up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except TransportError:
            pass
        except Denied as refused:
            if refused.status < 500:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError("the console did not answer")
        time.sleep(0.5)


@dataclass
class Proposed:
    id: str
    kind: str
    agent: str
    approval_id: str
    digest: str
    quorum: int
    at: float
    lossy: bool = False


@dataclass
class Shared:
    """What the load threads share with each other and the report."""

    rng: random.Random
    stop: threading.Event = field(default_factory=threading.Event)
    lossy_until: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    proposed: dict[str, Proposed] = field(default_factory=dict)
    to_decide: list[Proposed] = field(default_factory=list)
    decided: list[Proposed] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    retired: dict[str, str] = field(default_factory=dict)  # agent -> revocation instant

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] += n

    def choice(self, options: list[T]) -> T:
        with self.lock:
            return self.rng.choice(options)

    def random(self) -> float:
        with self.lock:
            return self.rng.random()


class Agent:
    """One agent's loop: propose, with `dispatch_on_approval`, one action after another."""

    def __init__(self, shared: Shared, url: str, name: str, token: str) -> None:
        self.shared, self.name = shared, name
        self.client = Client(url, token, timeout=20)
        self.retired = threading.Event()
        self.question: str | None = None
        self.receipts: list[str] = []

    def run(self) -> None:
        while not self.shared.stop.is_set() and not self.retired.is_set():
            roll = self.shared.random()
            kind = "email" if roll < 0.45 else "payment" if roll < 0.9 else "publication"
            try:
                self.act(kind)
            except Denied as refused:
                self.shared.count(f"refused {refused.code}")
            except (Error, TimeoutError) as error:
                self.shared.count(f"gave up ({type(error).__name__})")
            time.sleep(0.2 + self.shared.random() * 0.6)
        self.client.close()

    def act(self, kind: str) -> None:
        lossy = time.monotonic() < self.shared.lossy_until
        if kind == "email":
            operation, arguments = "email.send", self.email(lossy)
        elif kind == "payment":
            operation, arguments = "payments.transfer", self.payment(lossy)
        else:
            operation, arguments = "report.publish", self.publication(lossy)
        call_id = uuid.uuid4().hex
        proposal = patiently(lambda: self.client.propose(
            operation, arguments, call_id=call_id, dispatch_on_approval=True))
        approval = proposal.get("approval") or {}
        quorum = 2 if kind == "payment" and float(arguments["amount"]) >= 10000 else 1
        record = Proposed(proposal["id"], kind, self.name, str(approval.get("id", "")),
                          proposal["digest"], quorum, time.monotonic(), lossy)
        with self.shared.lock:
            self.shared.proposed[record.id] = record
            self.shared.to_decide.append(record)
            self.shared.counts[f"proposed {kind}"] += 1

    def email(self, lossy: bool) -> dict[str, Any]:
        domain = LOSSY["email"] if lossy else "example.com"
        n = uuid.uuid4().hex[:8]
        draft = self.client.create_resource("email_draft", {
            "from": MAILBOX, "to": [f"customer-{n}@{domain}"], "subject": f"Refund {n}",
            "body": "We have refunded your order."})
        return {"draft": {"id": draft["id"], "revision": draft["revision"]}}

    def payment(self, lossy: bool) -> dict[str, Any]:
        large = self.shared.random() < 0.15
        cents = int(self.shared.random() * 100_000)
        amount = f"{10000 + cents / 100:.2f}" if large else f"{1 + cents / 100:.2f}"
        return {"from_account": "acct-001", "to_account": f"acct-{cents % 97:03d}",
                "amount": amount, "currency": "EUR",
                "memo": LOSSY["payment"] if lossy else f"invoice {uuid.uuid4().hex[:6]}"}

    def run_now(self, operation: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Propose an action that needs no approval, dispatch it and wait for its outcome."""
        call_id = uuid.uuid4().hex
        proposal = patiently(lambda: self.client.propose(operation, arguments,
                                                         call_id=call_id))
        try:
            claimed = self.client.dispatch(proposal["id"])
        except TransportError:
            claimed = patiently(lambda: self.client.proposal(proposal["id"]))
            claimed["operation_id"] = claimed.get("operation_id") or ""
        if not claimed.get("operation_id"):
            raise TimeoutError("dispatch lost")
        return self.client.wait_for_outcome(str(claimed["operation_id"]), timeout=120)

    def publication(self, lossy: bool) -> dict[str, Any]:
        """A report citing a fetched source, attested, to publish (docs/design.md#evidence)."""
        if self.question is None:
            question = self.client.create_resource("question", {
                "topic": "bees", "text": "How do bees share where flowers are?"})
            self.question = str(question["id"])
        ref = {"id": self.question, "revision": 1}
        while len(self.receipts) < len(QUOTES):
            fetched = self.run_now("research.fetch", {
                "question": ref, "source": f"{self.sources_url}/bees"})
            if fetched.get("state") != "completed":
                raise TimeoutError(f"fetch {fetched.get('state')}")
            self.receipts.append(str(fetched["result"]["receipt"]["id"]))
        title = LOSSY["publication"] if lossy else f"How bees share {uuid.uuid4().hex[:6]}"
        report = self.client.create_resource("report", {
            "question": self.question, "title": title,
            "body": "Foragers dance to show the way.",
            "citations": [{"receipt": r, "quote": q} for r, q in zip(self.receipts, QUOTES,
                                                                      strict=True)]})
        report_ref = {"id": report["id"], "revision": report["revision"]}
        attested = self.run_now("evidence.attest", {"report": report_ref})
        if attested.get("state") != "completed":
            raise TimeoutError(f"attestation {attested.get('state')}")
        return {"report": report_ref, "attestation": attested["result"]["attestation"]["id"]}

    sources_url = ""


class Approver:
    """Two operators, deciding what the agents proposed: mostly grants, a few denials; a
    payment the rules give a quorum of two gets both operators' grants."""

    def __init__(self, shared: Shared, url: str, operators: list[dict[str, Any]]) -> None:
        self.shared = shared
        self.clients = [Client(url, op["token"], timeout=20) for op in operators]

    def run(self) -> None:
        while not self.shared.stop.is_set():
            with self.shared.lock:
                batch, self.shared.to_decide[:] = list(self.shared.to_decide), []
            for record in batch:
                if self.shared.stop.is_set():
                    break
                self.decide(record)
            time.sleep(0.3)
        for client in self.clients:
            client.close()

    def decide(self, record: Proposed) -> None:
        if not record.approval_id:
            return
        roll = self.shared.random()
        if roll < 0.05:
            return  # left pending: expires, or is cancelled
        decision = "deny" if roll < 0.1 else "grant"
        for client in self.clients[: record.quorum if decision == "grant" else 1]:
            try:
                patiently(partial(client.decide, record.approval_id, decision=decision,
                                  digest=record.digest), seconds=60)
            except Denied as refused:
                self.shared.count(f"decision refused {refused.code}")
                return
            except (Error, TimeoutError):
                self.shared.count("decision given up")
                return
        self.shared.count(f"decided {decision}")
        with self.shared.lock:
            self.shared.decided.append(record)


class Canceller:
    """Now and then, an agent withdraws one of its recent proposals (before or after its
    claim: `proposals/{id}/cancel/`)."""

    def __init__(self, shared: Shared, url: str, tokens: dict[str, str]) -> None:
        self.shared = shared
        self.clients = {name: Client(url, token, timeout=20) for name, token in tokens.items()}

    def run(self) -> None:
        while not self.shared.stop.wait(2 + self.shared.random() * 4):
            with self.shared.lock:
                recent = [p for p in self.shared.proposed.values()
                          if time.monotonic() - p.at < 10 and p.agent in self.clients]
            if not recent:
                continue
            record = self.shared.choice(recent)
            try:
                patiently(partial(self.clients[record.agent].cancel_proposal, record.id,
                                  reason="chaos"), seconds=30)
                self.shared.count("cancelled")
            except Denied as refused:
                self.shared.count(f"cancel refused {refused.code}")
            except (Error, TimeoutError):
                self.shared.count("cancel given up")
        for client in self.clients.values():
            client.close()


def probe(url: str, token: str, timeout: float = 180.0) -> float | None:
    """Seconds until a fresh read-only action (crm.lookup) goes through the whole path (web,
    PostgreSQL, Redis, a worker) and completes; None if it does not within `timeout`."""
    started = time.monotonic()
    deadline = started + timeout
    with Client(url, token, timeout=10) as client:
        while time.monotonic() < deadline:
            try:
                proposal = patiently(partial(client.propose, "crm.lookup",
                                             {"customer_id": "cus-001"},
                                             call_id=uuid.uuid4().hex), seconds=60)
                claimed = client.dispatch(proposal["id"])
                done = client.wait_for_outcome(str(claimed["operation_id"]),
                                               timeout=max(1.0, deadline - time.monotonic()))
                if done.get("state") == "completed":
                    return time.monotonic() - started
                time.sleep(0.5)
            except (Error, TimeoutError, Timeout):
                time.sleep(0.5)
    return None
