"""A researcher in a `World` (docs/design.md#evidence): the evidence chain's tools, a grant on a
topic, and short ways through the real services for a question, its fetches, a report, its
attestation and its publication. Handlers run inline (`operation_execute`), against running
destinations."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dispatch.models import Operation, Principal, Proposal, Resource
from tests.conftest import World

TOOLS = ["research.fetch", "evidence.attest", "report.publish"]
TOPIC = "bees"
BEES_QUOTE = "A forager tells her nestmates where the flowers are with a waggle dance"
BEES_QUOTE_2 = "A honey bee colony holds a single queen"
TIDES_QUOTE = "Spring tides, which have the largest range"


@dataclass
class Researcher:
    world: World
    agent: Principal
    sources_url: str

    @classmethod
    def enrol(cls, world: World, sources_url: str, *, name: str = "researcher",
              tenant: str = "acme", topic: str = TOPIC) -> Researcher:
        from dispatch.services.authority import grant_issue
        from dispatch.services.principals import agent_create

        agent, _ = agent_create(name=name, tenant=tenant, tools=TOOLS)
        grant_issue(issuer="admin", subject=agent, operations=TOOLS, scope={"topic": [topic]},
                    now=world.now - timedelta(minutes=1))
        return cls(world, agent, sources_url)

    def source(self, name: str) -> str:
        return f"{self.sources_url}/{name}"

    def question(self, topic: str = TOPIC, text: str = "How do bees share where flowers are?"
                 ) -> Resource:
        from dispatch.services.resources import resource_create

        resource, _ = resource_create(principal=self.agent, kind="question",
                                      payload={"topic": topic, "text": text}, now=self.world.now)
        return resource

    def propose(self, operation: str, arguments: dict[str, Any], **extra: Any) -> Proposal:
        from dispatch.services.proposals import proposal_create

        return proposal_create(principal=self.agent, operation=operation, arguments=arguments,
                               now=self.world.now, **extra)

    def run(self, proposal: Proposal) -> Operation:
        from dispatch.services.dispatcher import proposal_dispatch
        from dispatch.services.worker import operation_execute

        claimed = proposal_dispatch(principal=self.agent, proposal_id=proposal.id,
                                    now=self.world.now, enqueue=False)
        return operation_execute(operation_id=claimed.id)

    def fetch(self, question: Resource, name: str) -> Operation:
        return self.run(self.propose("research.fetch", {
            "question": ref(question), "source": self.source(name)}))

    def receipt_id(self, question: Resource, name: str) -> str:
        operation = self.fetch(question, name)
        assert operation.state == "completed", (operation.state, operation.attempts)
        return str(operation.result["receipt"]["id"])  # type: ignore[index]

    def report(self, question: Resource, citations: list[tuple[str, str]],
               title: str = "How bees share where the flowers are") -> Resource:
        from dispatch.services.resources import resource_create

        resource, _ = resource_create(principal=self.agent, kind="report",
                                      payload=report_payload(question, citations, title),
                                      now=self.world.now)
        return resource

    def revise(self, report: Resource, payload: dict[str, Any]) -> Resource:
        from dispatch.services.resources import revision_create

        resource, _ = revision_create(principal=self.agent, resource_id=report.id,
                                      base_revision=report.current_revision, payload=payload,
                                      now=self.world.now)
        return resource

    def revise_question(self, question: Resource, text: str) -> Resource:
        topic = question.revisions.get(number=question.current_revision).payload["topic"]
        return self.revise(question, {"topic": topic, "text": text})

    def attest(self, report: Resource) -> Operation:
        return self.run(self.propose("evidence.attest", {"report": ref(report)}))

    def attestation_id(self, report: Resource) -> str:
        operation = self.attest(report)
        assert operation.state == "completed", (operation.state, operation.result)
        return str(operation.result["attestation"]["id"])  # type: ignore[index]

    def propose_publication(self, report: Resource, attestation: Any, **extra: Any
                            ) -> Proposal:
        return self.propose("report.publish", {"report": ref(report),
                                               "attestation": attestation}, **extra)

    def attested_report(self, question: Resource | None = None) -> tuple[Resource, str]:
        """A report citing two bee sources truthfully, and its passing attestation."""
        question = question or self.question()
        bees = self.receipt_id(question, "bees")
        again = self.receipt_id(question, "bees")
        report = self.report(question, [(bees, BEES_QUOTE), (again, BEES_QUOTE_2)])
        return report, self.attestation_id(report)


def ref(resource: Resource) -> dict[str, Any]:
    return {"id": resource.id, "revision": resource.current_revision}


def report_payload(question: Resource, citations: list[tuple[str, str]],
                   title: str = "How bees share where the flowers are") -> dict[str, Any]:
    return {"question": question.id, "title": title,
            "body": "Foragers dance to show the way; the colony has one queen.",
            "citations": [{"receipt": r, "quote": q} for r, q in citations]}
