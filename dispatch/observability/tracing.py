"""Traces (docs/design.md#tracing): OpenTelemetry spans from a REST request or an MCP call
through the decision, the claim, the Celery task and the attempt to the destination, with the
W3C `traceparent` taken from incoming requests and sent on every outbound request.

Off by default. `configure` turns the SDK on only when the standard variables ask for an
exporter (`OTEL_TRACES_EXPORTER` other than `none`, or an `OTEL_EXPORTER_OTLP_ENDPOINT` /
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and never under `OTEL_SDK_DISABLED=true`; otherwise the
SDK is not even imported and every span below is the API's no-op. Everything else (service
name, resource attributes, sampler, batch sizes, the exporters' endpoints and headers) is the
SDK's own reading of its `OTEL_*` variables.

What a span may carry is fixed here: the ids a log line carries (`console.proposal_id`,
`console.operation_id`, ...; `note`), the attempt's number, the operation's name, an outcome or
a denial code, and for an outbound request its method, host, port and status. Never an argument
value, a URL's path (an action's URL may hold one), a token or an exception's message.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import wraps
from importlib.metadata import entry_points
from typing import Any, ParamSpec, TypeVar

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, StatusCode

from protocols.denials import Denial

log = logging.getLogger(__name__)

#: The instrumentation scope of the product's own spans.
NAME = "exact-action-console"
#: The only attributes `note` sets, each under `console.`: ids, numbers and names, no values.
NOTED = frozenset({"request_id", "task_id", "tenant", "principal", "proposal_id", "approval_id",
                   "operation_id", "operation", "attempt", "outcome", "denial", "decision"})

#: The middleware that answers probes and scrapes (config/health.py): requests start after it.
OPERATIONAL = "config.health.OperationalMiddleware"

_tracer = trace.get_tracer(NAME)
P = ParamSpec("P")
R = TypeVar("R")


def enabled(environ: Mapping[str, str]) -> bool:
    """Whether the standard variables ask for traces to be exported."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(environ: Mapping[str, str] = os.environ) -> bool:
    """Turn tracing on in this process when `environ` asks for it (see the module); True when
    it did. Called once per process as Django starts (dispatch.apps)."""
    if not enabled(environ):
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": NAME}))  # when neither names it
    provider = TracerProvider(resource=resource)
    for name in exporter_names(environ):
        provider.add_span_processor(BatchSpanProcessor(_exporter(name, environ)))
    trace.set_tracer_provider(provider)
    instrument(provider)
    return True


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The entry points of `OTEL_TRACES_EXPORTER` (default `otlp`), `otlp` as OTLP over
    HTTP unless `OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL` is `grpc`."""
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")
             if n.strip() and n.strip() != "none"]
    protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"))
    otlp = "otlp_proto_grpc" if protocol.strip() == "grpc" else "otlp_proto_http"
    return [otlp if name == "otlp" else name for name in names]


def _exporter(name: str, environ: Mapping[str, str]) -> Any:
    found = list(entry_points(group="opentelemetry_traces_exporter", name=name))
    if not found:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides "
            "(this image ships `otlp` over HTTP and `console`)")
    return found[0].load()()


def instrument(provider: Any) -> None:
    """Trace Django's requests (the server span, with the incoming `traceparent`) and Celery's
    tasks (the `traceparent` carried in each task's headers) with `provider`.

    The request's span starts after `OperationalMiddleware`: probes and scrapes are answered
    before it, untraced, and before any check of the `Host` header (which OpenTelemetry's
    middleware makes when it reads the request's URL)."""
    from django.conf import settings
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor

    first: list[str] = list(settings.MIDDLEWARE)
    position = first.index(OPERATIONAL) + 1 if OPERATIONAL in first else 0
    DjangoInstrumentor().instrument(tracer_provider=provider, middleware_position=position)
    celery = CeleryInstrumentor()  # type: ignore[no-untyped-call]  # its __init__ is untyped
    celery.instrument(tracer_provider=provider)


def uninstrument() -> None:
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor

    DjangoInstrumentor().uninstrument()
    celery = CeleryInstrumentor()  # type: ignore[no-untyped-call]  # its __init__ is untyped
    celery.uninstrument()


@contextmanager
def span(name: str, *, kind: SpanKind = SpanKind.INTERNAL, **ids: str | int | None
         ) -> Iterator[Span]:
    """A span of the product's, current while the block runs, with `ids` noted (`note`). An
    exception marks it an error by its type's name only (its message may quote a value), and a
    refusal notes its code."""
    with _tracer.start_as_current_span(name, kind=kind, record_exception=False,
                                       set_status_on_exception=False) as current:
        note(current, **ids)
        try:
            yield current
        except Denial as denial:
            note(current, denial=denial.code.value)
            current.set_status(StatusCode.ERROR, denial.code.value)
            raise
        except BaseException as exc:
            current.set_status(StatusCode.ERROR, type(exc).__name__)
            raise


def traced(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Run the decorated function in `span(name)`; it notes its ids itself (`note`)."""
    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            with span(name):
                return fn(*args, **kwargs)
        return run
    return decorate


def note(target: Span | None = None, /, **ids: str | int | None) -> None:
    """Set `ids` on `target` (default: the current span) as `console.<key>` attributes; None
    or "" is left out. Only the keys of `NOTED`: anything else is a programming error."""
    unknown = set(ids) - NOTED
    if unknown:
        raise ValueError(f"not a traced id: {sorted(unknown)}")
    current = target if target is not None else trace.get_current_span()
    if not current.is_recording():
        return
    current.set_attributes({f"console.{k}": v for k, v in ids.items()
                            if v is not None and v != ""})


@contextmanager
def http_client_span(method: str, host: str, port: int) -> Iterator[tuple[Span, dict[str, str]]]:
    """The span of one outbound request and the headers that carry it (`traceparent`, and
    `tracestate` when there is one) for the request to send. No URL: its path may hold a value.
    """
    with span(method, kind=SpanKind.CLIENT) as current:
        if current.is_recording():
            current.set_attributes({"http.request.method": method, "server.address": host,
                                    "server.port": port})
        carrier: dict[str, str] = {}
        if current.get_span_context().is_valid:  # tracing is on: else there is nothing to send
            from opentelemetry import propagate

            propagate.inject(carrier)
        yield current, carrier


def note_status(target: Span, status: int) -> None:
    """Record an outbound request's status on its span (a 5xx is an error)."""
    if target.is_recording():
        target.set_attribute("http.response.status_code", status)
        if status >= 500:
            target.set_status(StatusCode.ERROR)
