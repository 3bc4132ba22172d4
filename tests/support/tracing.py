"""Spans captured in the test process by the SDK's `InMemorySpanExporter`, for the tracing tests.

OpenTelemetry sets its global tracer provider once per process, so the first capture installs
one whose sampler records only while a capture is open: the tests that do not trace run on
spans that are dropped at their start, as with tracing off. Each capture instruments Django and
Celery (dispatch.observability.tracing.instrument) and undoes it when it closes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from dispatch.observability import tracing


class _WhileCapturing(Sampler):
    def __init__(self) -> None:
        self.on = False

    def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: Any = None,
                      attributes: Any = None, links: Sequence[Any] | None = None,
                      trace_state: Any = None) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        return SamplingResult(Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP,
                              attributes if self.on else None,
                              parent.trace_state if parent.is_valid else None)

    def get_description(self) -> str:
        return "while a test captures"


_sampler = _WhileCapturing()
_exporter = InMemorySpanExporter()
_provider: TracerProvider | None = None


def _installed() -> TracerProvider:
    global _provider
    if _provider is None:
        _provider = TracerProvider(sampler=_sampler)
        _provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(_provider)
    return _provider


@contextmanager
def captured_spans() -> Iterator[InMemorySpanExporter]:
    """The exporter holding every span ended while the block runs."""
    provider = _installed()
    _exporter.clear()
    tracing.instrument(provider)
    _sampler.on = True
    try:
        yield _exporter
    finally:
        _sampler.on = False
        tracing.uninstrument()
        _exporter.clear()


def chain(spans: Sequence[ReadableSpan], last: ReadableSpan) -> list[ReadableSpan]:
    """`last` and its ancestors among `spans`, root first."""
    by_id = {s.context.span_id: s for s in spans}
    found = [last]
    while found[-1].parent is not None and found[-1].parent.span_id in by_id:
        found.append(by_id[found[-1].parent.span_id])
    return found[::-1]


def every_value(spans: Sequence[ReadableSpan]) -> list[str]:
    """Every attribute value of every span and of its events, and each span's name, as text."""
    found: list[str] = []
    for span in spans:
        found.append(span.name)
        found.extend(str(v) for v in (span.attributes or {}).values())
        for event in span.events:
            found.append(event.name)
            found.extend(str(v) for v in (event.attributes or {}).values())
        if span.status.description:
            found.append(span.status.description)
    return found
