"""A runnable example of the embedding API: register a contract and its handler, open an
execution, run a scripted agent, read typed outcomes. Uses a throwaway SQLite database.

    python demo/embedding_example.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_DEBUG", "1")
# Beside the demo's contracts, which the agent below is not given (`email.send`).
os.environ.setdefault("DISPATCH_EXTENSIONS", "demo.extension")
os.environ.setdefault("APP_VAR_DIR", tempfile.mkdtemp(prefix="embed-"))
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

from dispatch.agent import ScriptedAdapter, execution_open, execution_run  # noqa: E402
from dispatch.handlers import FromCode, Handler, HandlerContext  # noqa: E402
from dispatch.runtime import get_runtime  # noqa: E402
from dispatch.services.authority import grant_issue  # noqa: E402
from dispatch.services.principals import agent_create  # noqa: E402
from protocols.contracts import (  # noqa: E402
    AuthorityRequirement,
    Effect,
    Idempotency,
    OperationContract,
)


class WeatherHandler(Handler):
    """A trusted, read-only handler: it runs only inside a claimed operation's attempt."""

    name = "weather.read"
    implementation_fingerprint = FromCode()

    def destination(self) -> dict[str, Any]:
        return {"name": "weather", "address": "in-process"}

    def perform(self, ctx: HandlerContext) -> dict[str, Any]:
        return {"city": ctx.arguments["city"], "forecast": "sunny"}


def main() -> None:
    call_command("migrate", verbosity=0)
    runtime = get_runtime()
    runtime.register(OperationContract(
        qualified_name="weather.read", contract_version=1,
        implementation_fingerprint=WeatherHandler.implementation_fingerprint,
        input_type={"type": "object", "required": ["city"], "additionalProperties": False,
                    "properties": {"city": {"type": "string"}}},
        output_type={"type": "object"},
        authority_requirements=(AuthorityRequirement("city", "/city"),),
        possible_effects=frozenset({Effect.READ}), idempotency_contract=Idempotency.IDEMPOTENT,
        destination="weather",
    ), WeatherHandler())

    now = timezone.now()
    agent, _ = agent_create(name="forecaster", tenant="example", tools=["weather.read"])
    grant_issue(issuer="example", subject=agent, operations=["weather.read"],
                scope={"city": ["Lisbon"]}, now=now)
    adapter = ScriptedAdapter({"agent": "forecaster", "steps": [
        {"call": "weather.read", "arguments": {"city": "Lisbon"}},
        {"call": "weather.read", "arguments": {"city": "Paris"}},      # outside the grant
        {"call": "email.send", "arguments": {"draft": {"id": "x", "revision": 1}}},  # not a tool
        {"final": "done"},
    ]})
    execution = execution_open(principal=agent, adapter=adapter, now=now)
    result = execution_run(execution_id=execution.id, adapter=adapter)
    for outcome in result.outcomes:
        print(outcome.status, outcome.code or "", outcome.result or "")
    print(result.state, result.final)


if __name__ == "__main__":
    main()
