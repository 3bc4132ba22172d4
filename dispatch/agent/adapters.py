"""Model adapters: what proposes the next action. A real provider implements `ModelAdapter`;
`ScriptedAdapter` reads its tool calls from a JSON script, deterministically, with no
credentials, for the demo and the tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from protocols.jsontypes import JSONObject, JSONValue
from protocols.usage import Usage


@dataclass(frozen=True)
class ToolSpec:
    """A tool as advertised to the model: advertising is a usability feature, not a check."""

    name: str
    description: str
    input_schema: Mapping[str, JSONValue]


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: JSONValue
    label: str = ""
    # Anything else the model put in its message (a permit id, a claimed approval...): it is
    # passed to the dispatcher as the model's claim, which can only ever be refused.
    claims: Mapping[str, JSONValue] = field(default_factory=dict)
    usage: Usage | None = None


@dataclass(frozen=True)
class FinalAnswer:
    text: str
    usage: Usage | None = None


class ModelAdapter(Protocol):
    name: str
    #: The most tokens (input and output) one call can use, where the adapter makes its
    #: provider honour such a maximum; None where it cannot promise one. Only then can a
    #: hard token limit hold: the maximum is reserved before the call (docs/design.md#budgets).
    max_tokens_per_call: int | None

    def config(self) -> JSONObject:
        """What is needed to rebuild this adapter in another process (persisted)."""

    def next_action(
        self, transcript: Sequence[Mapping[str, JSONValue]], tools: Sequence[ToolSpec]
    ) -> ToolCall | FinalAnswer:
        """The next action given the persisted transcript and the advertised tools."""


class ScriptError(ValueError):
    pass


class ScriptedAdapter:
    """Tool calls read from a script: `{"agent": NAME, "steps": [STEP, ...]}` where a step is
    `{"call": OPERATION, "arguments": {...}, "name": LABEL?, "permit": ID?, "approval": {...}?}`
    or `{"final": TEXT}`. Inside arguments, `{"$result": LABEL}` stands for the result of the
    earlier step with that label (e.g. the `{"id","revision"}` of a created draft), and
    `{"$result": LABEL, "pointer": "/receipt/id"}` for one member of it (a JSON pointer)."""

    name = "scripted"

    def __init__(self, script: Mapping[str, JSONValue]) -> None:
        steps = script.get("steps")
        if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
            raise ScriptError("a script needs a list of steps")
        maximum = script.get("max_tokens_per_call")
        if maximum is not None and (not isinstance(maximum, int) or isinstance(maximum, bool)
                                    or maximum < 1):
            raise ScriptError("max_tokens_per_call must be a whole number >= 1")
        self.max_tokens_per_call: int | None = maximum
        self.usages: list[Usage | None] = []
        for number, step in enumerate(steps):
            if "final" not in step and not isinstance(step.get("call"), str):
                raise ScriptError(f"step {number} needs 'call' or 'final'")
            self.usages.append(_usage(number, step.get("usage"), maximum))
        self.script = dict(script)
        self.steps: list[JSONObject] = steps

    def config(self) -> JSONObject:
        return {"script": self.script}

    def next_action(
        self, transcript: Sequence[Mapping[str, JSONValue]], tools: Sequence[ToolSpec]
    ) -> ToolCall | FinalAnswer:
        turn = sum(1 for entry in transcript if entry["kind"] == "tool_call")
        if turn >= len(self.steps):
            return FinalAnswer("the script has no more steps")
        step, usage = self.steps[turn], self.usages[turn]
        if "final" in step:
            return FinalAnswer(str(step["final"]), usage=usage)
        results = _results_by_label(transcript)
        claims: JSONObject = {k: step[k] for k in ("permit", "approval") if k in step}
        return ToolCall(name=step["call"], arguments=_substitute(step.get("arguments", {}),
                                                                 results),
                        label=str(step.get("name", "")), claims=claims, usage=usage)


def _pointed(value: JSONValue, pointer: str) -> JSONValue:
    """The member of `value` a JSON pointer (RFC 6901) names, or None where there is none:
    `{"$result": "fetch", "pointer": "/receipt/id"}` is the receipt id a fetch returned."""
    for token in pointer.split("/")[1:] if pointer else []:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict):
            value = value.get(token)
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return None
    return value


def _usage(number: int, data: JSONValue, maximum: int | None) -> Usage | None:
    """A step's `"usage": {"input_tokens", "output_tokens", "cost"}`: what the scripted model
    reports for that turn. A scripted model honours its own maximum: a step over it is refused."""
    if data is None:
        return None
    if not isinstance(data, dict) or set(data) - {"input_tokens", "output_tokens", "cost"}:
        raise ScriptError(f"step {number}: usage takes input_tokens, output_tokens and cost")
    try:
        usage = Usage(**data)
    except ValueError as exc:
        raise ScriptError(f"step {number}: {exc}") from None
    if maximum is not None and usage.tokens > maximum:
        raise ScriptError(f"step {number}: {usage.tokens} tokens is over the script's "
                          f"max_tokens_per_call of {maximum}")
    return usage


def _results_by_label(transcript: Sequence[Mapping[str, JSONValue]]) -> JSONObject:
    labels = {e["call_id"]: e["payload"].get("label") for e in transcript
              if e["kind"] == "tool_call"}
    return {labels[e["call_id"]]: e["payload"].get("result") for e in transcript
            if e["kind"] == "tool_result" and labels.get(e["call_id"])}


def _substitute(value: JSONValue, results: Mapping[str, JSONValue]) -> JSONValue:
    if isinstance(value, dict):
        if set(value) == {"$result"}:
            return results.get(value["$result"])
        if set(value) == {"$result", "pointer"}:
            return _pointed(results.get(value["$result"]), str(value["pointer"]))
        return {k: _substitute(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, results) for v in value]
    return value
