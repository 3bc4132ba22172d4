"""The product's Prometheus series (docs/design.md#running), computed from the store when
/metrics is scraped; a scrape also shows the requests and tasks each process counted itself
(dispatch.observability.traffic).

Nothing here is counted in a process's memory: every value is read from the operation store
(and the queue depth from the broker) by `StoreCollector.collect`, so any web process answers
the same numbers whichever web or worker process, on whichever host, recorded the events, and
nothing drifts, resets or needs `PROMETHEUS_MULTIPROC_DIR`. The counters are running totals of
append-only records (operations, attempts, `intake.denied` and `dispatch.denied` audit events),
so they only grow.
No series carries a tenant, a principal or any id: no tenant data.

- `console_pending_approvals{age_bucket}` (gauge): approvals still pending, by the time since
  they were requested (`AGE_BUCKETS`).
- `console_unknown_operations` (gauge): operations whose outcome is `unknown`.
- `console_celery_queue_depth{queue}` (gauge): dispatch messages waiting in the broker; left out
  of a scrape when the broker does not answer (then `console_broker_up` is 0).
- `console_claims_total` (counter): operations claimed (each claim is one operation record).
- `console_denials_total{code}` (counter): refusals of a proposal when it is made and of a
  dispatch, by denial code (every code is present, at 0 until one happens).
- `console_attempt_outcomes_total{outcome}` (counter): finished attempts by outcome
  (`completed`, `failed_no_effect`, `uncertain`).
- `console_audit_head_mismatch` (gauge): tenants whose sealer's last pass refused to seal
  (docs/audit-seal.md#head: a chain that is not at its head, or events older than the newest
  sealed one); each refusal is also an `audit.head_mismatch` audit event.
- `console_approval_to_dispatch_seconds` (histogram): from an approval's permit to the start of
  its operation's first attempt on a worker (the claim and the queue's wait included).

A scrape is a handful of statements. The gauges read indexes of the few rows they count
(pending approvals, unknown operations); the counters and the histogram read every record they
total (operations, finished attempts, denials), which at the scale of human-approved actions is
milliseconds; a store of many millions of operations would want them kept in summary rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.utils import timezone
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from dispatch.models import (
    ApprovalRequest,
    Attempt,
    AuditEvent,
    AuditHead,
    Operation,
    Tenant,
)
from dispatch.observability import traffic
from dispatch.observability.broker import queue_depth
from protocols.denials import DenialCode
from protocols.lifecycle import ApprovalState, OperationState

log = logging.getLogger(__name__)

#: The audit events of a refusal, each with its `details.code`.
DENIAL_KINDS = ("intake.denied", "dispatch.denied")

#: Label value -> (at least, under) the age of a pending approval; None: no bound.
AGE_BUCKETS: dict[str, tuple[timedelta, timedelta | None]] = {
    "under_5m": (timedelta(0), timedelta(minutes=5)),
    "5m_to_1h": (timedelta(minutes=5), timedelta(hours=1)),
    "1h_to_24h": (timedelta(hours=1), timedelta(hours=24)),
    "over_24h": (timedelta(hours=24), None),
}
#: Upper bounds (seconds) of the approval-to-dispatch histogram's buckets.
LATENCY_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
OUTCOMES = (Attempt.Outcome.COMPLETED, Attempt.Outcome.FAILED_NO_EFFECT,
            Attempt.Outcome.UNCERTAIN)


class StoreCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        yield self._pending_approvals(now)
        yield GaugeMetricFamily(
            "console_unknown_operations", "Operations whose outcome is unknown.",
            value=Operation.objects.filter(state=OperationState.UNKNOWN).count())
        yield from self._queue()
        yield CounterMetricFamily(
            "console_claims", "Operations claimed (one per claim of a permit or an action).",
            value=Operation.objects.count())
        yield self._denials()
        yield self._outcomes()
        yield self._latency()
        yield GaugeMetricFamily(
            "console_audit_head_mismatch",
            "Tenants whose audit sealer refused to seal on its last pass (audit.head_mismatch).",
            value=AuditHead.objects.exclude(mismatch="").count())

    def _pending_approvals(self, now: datetime) -> Metric:
        counts = {}
        for label, (low, high) in AGE_BUCKETS.items():
            older = Q(created_at__lte=now - low) if low else Q()  # a skewed clock: the youngest
            younger = Q(created_at__gt=now - high) if high is not None else Q()
            counts[label] = Count("pk", filter=older & younger)
        found = ApprovalRequest.objects.filter(state=ApprovalState.PENDING).aggregate(**counts)
        family = GaugeMetricFamily("console_pending_approvals",
                                   "Approvals pending, by time since they were requested.",
                                   labels=["age_bucket"])
        for label in AGE_BUCKETS:
            family.add_metric([label], found[label] or 0)
        return family

    def _queue(self) -> Iterator[Metric]:
        queue: str = settings.CELERY_TASK_DEFAULT_QUEUE
        up = GaugeMetricFamily("console_broker_up",
                               "1 when the broker answered this scrape, else 0.")
        try:
            depth = queue_depth(timeout=2.0)
        except Exception as exc:
            log.warning("the broker did not answer the scrape", exc_info=exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        family = GaugeMetricFamily("console_celery_queue_depth",
                                   "Dispatch messages waiting in the broker.", labels=["queue"])
        family.add_metric([queue], depth)
        yield family

    def _denials(self) -> Metric:
        # By tenant and kind: the audit's (tenant, kind, -id) index finds the denials alone.
        found = dict(AuditEvent.objects.filter(tenant_id__in=Tenant.objects.values("id"),
                                               kind__in=DENIAL_KINDS)
                     .values_list("details__code").annotate(n=Count("pk"))
                     .values_list("details__code", "n"))
        family = CounterMetricFamily("console_denials",
                                     "Refusals at intake and at dispatch, by code.",
                                     labels=["code"])
        for code in DenialCode:
            family.add_metric([code.value], found.pop(code.value, 0))
        for code, n in sorted(found.items(), key=lambda item: str(item[0])):
            family.add_metric([str(code)], n)  # a code of an older release, kept in the audit
        return family

    def _outcomes(self) -> Metric:
        found = dict(Attempt.objects.exclude(outcome="").values_list("outcome")
                     .annotate(n=Count("pk")).values_list("outcome", "n"))
        family = CounterMetricFamily("console_attempt_outcomes",
                                     "Finished attempts, by outcome.", labels=["outcome"])
        for outcome in OUTCOMES:
            family.add_metric([outcome.value], found.get(outcome.value, 0))
        return family

    def _latency(self) -> Metric:
        latency = ExpressionWrapper(F("started_at") - F("operation__permit__issued_at"),
                                    output_field=DurationField())
        rows = Attempt.objects.filter(number=1, operation__permit__isnull=False).annotate(
            latency=latency)
        found = rows.aggregate(
            total=Count("pk"), seconds=Sum("latency"),
            **{f"le_{i}": Count("pk", filter=Q(latency__lte=timedelta(seconds=bound)))
               for i, bound in enumerate(LATENCY_BUCKETS)})
        buckets = [(str(bound), found[f"le_{i}"] or 0) for i, bound in enumerate(LATENCY_BUCKETS)]
        buckets.append(("+Inf", found["total"] or 0))
        total: timedelta | None = found["seconds"]
        return HistogramMetricFamily(
            "console_approval_to_dispatch_seconds",
            "Seconds from an approval's permit to the start of its operation's first attempt.",
            buckets=buckets, sum_value=total.total_seconds() if total is not None else 0.0)


def registry() -> CollectorRegistry:
    """A registry of the store's series and of the requests and tasks counted by the processes
    that share this one's PROMETHEUS_MULTIPROC_DIR (dispatch.observability.traffic)."""
    found = CollectorRegistry(auto_describe=False)
    found.register(StoreCollector())
    traffic.register(found)
    return found


def exposition(accept: str) -> tuple[bytes, str]:
    """The scrape's body and content type, in the format the scraper accepts."""
    encoder, content_type = choose_encoder(accept)
    return encoder(registry()), content_type
