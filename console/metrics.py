"""`/metrics` in Prometheus text, with prometheus-client.

Two sources:
- the database, read at each scrape (every process sees the same): runs by
  status and live recovery actions by kind with the oldest one's age, per
  organization; worker instances alive; each supervisor process's pass counter,
  pass-duration histogram and failed duties (recorded by the supervisor,
  recovery/supervisor/passes.py);
- this web process: the commit → push latency of its event relay. Scrape every
  web process (not one behind the load balancer) to see them all.

A scrape with an admin's API token sees only that admin's organizations; the
scrape token (`CONSOLE_METRICS_TOKEN`) sees all.
"""

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import CollectorRegistry, Histogram, exposition
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from recovery.models import LIVE_ACTION_STATUSES, RecoveryAction, SupervisorProcess
from recovery.supervisor.passes import DURATION_BUCKETS, expected_interval, supervisor_alive
from tasks.models import Run, RunStatus, WorkerInstance
from tasks.worker_instances import stale_after

# Observed by the relay of this process (console/live/relay.py) once per event, in the pass that dispatched it
# (the relay tails events only while some live page is connected to this process).
PUSH_LATENCY = Histogram(
    "console_event_push_latency_seconds",
    "From an event's commit (Event.created_at) to this web process's relay dispatching it to its live pages.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=None,
)


def observe_pushed(events, now=None) -> None:
    now = now or timezone.now()
    for event in events:
        PUSH_LATENCY.observe(max(0.0, (now - event.created_at).total_seconds()))


class DatabaseCollector:
    """Gauges and counters read from the database at scrape time, limited to `org_ids` (None: all)."""

    def __init__(self, org_ids: list[int] | None):
        self.org_ids = org_ids

    def _scoped(self, qs):
        return qs if self.org_ids is None else qs.filter(org_id__in=self.org_ids)

    def collect(self):
        now = timezone.now()
        runs = GaugeMetricFamily("console_runs", "Runs by status.", labels=["org", "status"])
        seen = set()
        for row in self._scoped(Run.objects.all()).values("org__slug", "status").annotate(n=Count("id")).order_by():
            runs.add_metric([row["org__slug"], row["status"]], row["n"])
            seen.add(row["org__slug"])
        yield runs

        actions = GaugeMetricFamily("console_live_actions", "Live recovery actions by kind.", labels=["org", "kind"])
        oldest = GaugeMetricFamily(
            "console_live_action_oldest_age_seconds",
            "Age of the oldest live recovery action of each kind.",
            labels=["org", "kind"],
        )
        live = (
            self._scoped(RecoveryAction.objects.filter(status__in=LIVE_ACTION_STATUSES))
            .values("org__slug", "kind")
            .annotate(n=Count("id"), oldest=Min("created_at"))
            .order_by()
        )
        for row in live:
            actions.add_metric([row["org__slug"], row["kind"]], row["n"])
            oldest.add_metric([row["org__slug"], row["kind"]], (now - row["oldest"]).total_seconds())
        yield actions
        yield oldest

        queued = GaugeMetricFamily(
            "console_queued_run_oldest_age_seconds", "Age of the oldest queued run.", labels=["org"]
        )
        for row in (
            self._scoped(Run.objects.filter(status=RunStatus.QUEUED))
            .values("org__slug")
            .annotate(oldest=Min("created_at"))
            .order_by()
        ):
            queued.add_metric([row["org__slug"]], (now - row["oldest"]).total_seconds())
        yield queued

        alive = GaugeMetricFamily(
            "console_worker_instances_alive", "Worker instances seen within two heartbeats.", labels=["org"]
        )
        for row in (
            self._scoped(WorkerInstance.objects.filter(last_seen_at__gte=now - stale_after()))
            .values("org__slug")
            .annotate(n=Count("id"))
            .order_by()
        ):
            alive.add_metric([row["org__slug"]], row["n"])
        yield alive

        yield from self._supervisors(now)

    def _supervisors(self, now):
        passes = CounterMetricFamily(
            "console_supervisor_passes", "Passes of each supervisor process (since it started).", labels=["supervisor"]
        )
        durations = HistogramMetricFamily(
            "console_supervisor_pass_duration_seconds",
            "Duration of each supervisor process's passes (since it started).",
            labels=["supervisor"],
        )
        last = GaugeMetricFamily(
            "console_supervisor_last_pass_timestamp_seconds",
            "When each supervisor process last passed (Unix time).",
            labels=["supervisor"],
        )
        last_duration = GaugeMetricFamily(
            "console_supervisor_last_pass_duration_seconds", "Duration of the last pass.", labels=["supervisor"]
        )
        errors = CounterMetricFamily(
            "console_supervisor_pass_errors",
            "Duties of each supervisor process's passes that failed (a database error, a bug), by duty, since it "
            "started; the pass went on with its other duties.",
            labels=["supervisor", "duty"],
        )
        alive = GaugeMetricFamily(
            "console_supervisor_alive", "1 when some supervisor passed within three of its intervals, else 0."
        )
        any_alive = False
        for s in SupervisorProcess.objects.order_by("label"):
            passes.add_metric([s.label], s.passes)
            counts = s.buckets or {}
            buckets = [(str(b), float(counts.get(str(b), 0))) for b in DURATION_BUCKETS] + [("+Inf", float(s.passes))]
            durations.add_metric([s.label], buckets=buckets, sum_value=s.duration_sum)
            last.add_metric([s.label], s.last_pass_at.timestamp())
            last_duration.add_metric([s.label], s.last_duration)
            for duty, n in sorted((s.errors or {}).items()):
                errors.add_metric([s.label, duty], n)
            any_alive = any_alive or supervisor_alive(s.last_pass_at, expected_interval(s), now=now)
        alive.add_metric([], 1.0 if any_alive else 0.0)
        yield from (passes, durations, last, last_duration, errors, alive)


def exposition_for(org_ids: list[int] | None, accept: str = "") -> tuple[bytes, str]:
    """One scrape in the format the scraper asked for (prometheus-client's negotiation; text 0.0.4 by default)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(org_ids))
    registry.register(PUSH_LATENCY)
    encoder, content_type = exposition.choose_encoder(accept)
    return encoder(registry), content_type
