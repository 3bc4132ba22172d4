"""A runnable example of the evidence chain (docs/design.md#evidence): evidence, attestation, an
exact publication.

A scripted research agent asks a question, fetches two sources (each completion leaves an
evidence receipt, issued by the dispatcher), writes a report citing them, has the validator
`cited-sources/1` attest it (pass), writes a second report with a fabricated quote that the
validator fails, and proposes the first for publication: that waits for an operator in the
console, then runs and is published once. The README's run command starts it beside the
console (`scripts/run.sh`); a test runs it end to end (tests/db/test_research_example.py).

    python demo/research_example.py [--poll SECONDS] [--inline]

It uses the deployment's settings (the run command's database and destinations), creates the
agent `researcher` of tenant `acme` with a grant on the topic `coast` if there is none, and
prints each tool call's outcome; with `--poll` it waits for the operator's decision.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dispatch.agent import RunResult
    from dispatch.models import Principal

AGENT = "researcher"
TENANT = "acme"
TOPIC = "coast"
TOOLS = ["research.fetch", "evidence.attest", "report.publish"]
TIDES_QUOTE = "Spring tides, which have the largest range, come when the Sun, the Moon and the " \
              "Earth are in line."
LIGHT_QUOTE = "Each lighthouse flashes a pattern of its own, so that sailors can tell one " \
              "from another at night."
FABRICATED_QUOTE = "Lighthouse keepers can stop the tide with a lamp."


def _ref(label: str, pointer: str = "") -> dict[str, Any]:
    return {"$result": label, **({"pointer": pointer} if pointer else {})}


def _citation(fetch: str, quote: str) -> dict[str, Any]:
    return {"receipt": _ref(fetch, "/receipt/id"), "quote": quote}


def script(sources_url: str) -> dict[str, Any]:
    """The agent's steps, for the source server at `sources_url` (docs/design.md#evidence)."""
    sources = sources_url.rstrip("/")

    def report(name: str, title: str, citations: list[dict[str, Any]]) -> dict[str, Any]:
        return {"call": "resources.create", "name": name, "arguments": {
            "kind": "report", "payload": {
                "question": _ref("question", "/id"), "title": title,
                "body": "Spring tides come when the Sun, the Moon and the Earth line up; "
                        "lighthouses tell themselves apart by their flashes.",
                "citations": citations}}}

    return {"agent": AGENT, "steps": [
        {"call": "resources.create", "name": "question", "arguments": {
            "kind": "question", "payload": {
                "topic": TOPIC,
                "text": "When is the sea highest, and how do sailors tell lighthouses apart?"}}},
        {"call": "research.fetch", "name": "tides",
         "arguments": {"question": _ref("question"), "source": f"{sources}/tides"}},
        {"call": "research.fetch", "name": "lighthouses",
         "arguments": {"question": _ref("question"), "source": f"{sources}/lighthouses"}},
        report("report", "Tides and lights along the coast",
               [_citation("tides", TIDES_QUOTE), _citation("lighthouses", LIGHT_QUOTE)]),
        {"call": "evidence.attest", "name": "attestation",
         "arguments": {"report": _ref("report")}},
        report("fabricated", "Keepers of the tide",
               [_citation("tides", TIDES_QUOTE), _citation("lighthouses", FABRICATED_QUOTE)]),
        {"call": "evidence.attest", "name": "refused",
         "arguments": {"report": _ref("fabricated")}},
        {"call": "report.publish", "name": "publication", "arguments": {
            "report": _ref("report"), "attestation": _ref("attestation", "/attestation/id")}},
        {"final": "Published the attested report; the validator failed the fabricated one."},
    ]}


def enrol(*, tenant: str = TENANT, name: str = AGENT) -> Principal:
    """The research agent with its tools and a grant on the topic, created once."""
    from django.db import transaction
    from django.utils import timezone

    from dispatch.models import Principal
    from dispatch.services.authority import grant_issue
    from dispatch.services.principals import agent_create

    with transaction.atomic():
        agent = Principal.objects.filter(name=name, kind=Principal.Kind.AGENT).first()
        if agent is None:
            agent, _ = agent_create(name=name, tenant=tenant, tools=TOOLS)
            grant_issue(issuer="research_example", subject=agent, operations=TOOLS,
                        scope={"topic": [TOPIC]}, now=timezone.now())
    return agent


def run(agent: Principal, sources_url: str, *, execution_id: str | None = None,
        inline: bool = False, poll: float = 0.0, timeout: float = 3600.0,
        out: Any = None) -> RunResult:
    """Run (or resume) the example's execution; print each new outcome to `out`."""
    from django.utils import timezone

    from dispatch.agent import ScriptedAdapter, execution_open, execution_run

    adapter = ScriptedAdapter(script(sources_url))
    if execution_id is None:
        execution_id = execution_open(principal=agent, adapter=adapter, now=timezone.now()).id
        _say(out, f"execution {execution_id}")
    deadline = time.monotonic() + timeout
    reported = 0
    while True:
        result = execution_run(execution_id=execution_id, adapter=adapter,
                               mode="inline" if inline else "worker")
        for number, outcome in enumerate(result.outcomes[reported:], start=reported + 1):
            _say(out, _line(number, outcome))
        reported = len(result.outcomes)
        if result.state == "finished" or poll <= 0 or time.monotonic() > deadline:
            _say(out, "waiting for an operator" if result.state == "waiting"
                 else f"finished: {result.final}")
            return result
        time.sleep(poll)


def _line(number: int, outcome: Any) -> str:
    text = f"call-{number}: {outcome.status}{f' ({outcome.code})' if outcome.code else ''}"
    result = outcome.result if isinstance(outcome.result, dict) else {}
    if "receipt" in result:
        text += f" receipt {result['receipt']['id']} {result['receipt']['content_digest']}"
    if "attestation" in result:
        attestation = result["attestation"]
        text += f" attestation {attestation['id']}: {attestation['result']}"
        text += "".join(f"\n    {f['message']}" for f in attestation["findings"])
    return text


def _say(out: Any, text: str) -> None:
    if out is not None:
        print(text, file=out, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--poll", type=float, default=0.0,
                        help="while the publication waits for an operator, check every N "
                             "seconds (0: stop and print 'waiting for an operator')")
    parser.add_argument("--inline", action="store_true",
                        help="run handlers in this process instead of on a worker")
    parser.add_argument("--execution", help="resume this execution")
    options = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.conf import settings

    run(enrol(), str(settings.DESTINATIONS["sources_url"]), execution_id=options.execution,
        inline=options.inline, poll=options.poll, out=sys.stdout)


if __name__ == "__main__":
    main()
