"""Supervisor passes: each process's counters, and a record of every pass that changed something.

Bookkeeping for operators (the workers page, the header warning, /api/health/,
/metrics); no Event is appended. One UPDATE per pass, plus one row when the pass
did something.
"""

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from recovery.models import RecoveryAction, SupervisorPass, SupervisorProcess
from tasks.models import Run

# How long passes that did something are kept for the workers page.
PASS_HISTORY = timedelta(days=1)
# Upper bounds (seconds) of the pass-duration histogram that /metrics exports.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def default_label() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _bucket_counts(previous: dict, duration: float) -> dict:
    counts = dict(previous or {})
    for bound in DURATION_BUCKETS:
        if duration <= bound:
            counts[str(bound)] = counts.get(str(bound), 0) + 1
    return counts


def did_by_org(report) -> dict[str, dict[str, int]]:
    """What a pass did, counted per organization (ids stay out: other organizations share the record)."""
    did: dict[str, dict[str, int]] = {}

    def add(org_ids, what: str):
        for org_id in org_ids:
            counts = did.setdefault(str(org_id), {})
            counts[what] = counts.get(what, 0) + 1

    run_kinds = {"interrupted": report.interrupted, "stopped": report.stopped, "continued": report.continued}
    run_kinds["purged"] = getattr(report, "purged", [])
    run_ids = {rid for ids in run_kinds.values() for rid in ids}
    run_orgs = dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "org_id")) if run_ids else {}
    for what, ids in run_kinds.items():
        add([run_orgs[i] for i in ids if i in run_orgs], what)
    action_kinds = {"opened": report.opened, **{f"actions_{k}": v for k, v in (report.settled or {}).items()}}
    action_ids = {aid for ids in action_kinds.values() for aid in ids}
    if action_ids:
        action_orgs = dict(RecoveryAction.objects.filter(pk__in=action_ids).values_list("pk", "org_id"))
        for what, ids in action_kinds.items():
            add([action_orgs[i] for i in ids if i in action_orgs], what)
    if report.admitted:
        # `admitted` holds the runs that carry follow-ups (messages_admit returns the runs it created).
        add(Run.objects.filter(pk__in=report.admitted).values_list("org_id", flat=True), "messages_admitted")
    if getattr(report, "exported", None):
        from recovery.models import Export

        add(Export.objects.filter(pk__in=report.exported).values_list("task__org_id", flat=True), "exported")
    return did


def pass_record(
    *, label: str, interval: float, started_at: datetime, duration: float, report, failed: Mapping[str, int] = ()
) -> None:
    """Count one pass of the supervisor process `label`, and the duties that failed since the last count
    (`failed`); keep a row if it did something. All of it or nothing, so a count is never written twice."""
    with transaction.atomic():
        process = SupervisorProcess.objects.filter(label=label).only("pk", "buckets", "errors").first()
        if process is None:
            try:
                with transaction.atomic():
                    process = SupervisorProcess.objects.create(
                        label=label[:200], interval=interval, started_at=started_at, last_pass_at=started_at
                    )
            except IntegrityError:  # another pass with the same label (threads of one process) made it first
                process = SupervisorProcess.objects.filter(label=label).only("pk", "buckets", "errors").get()
        errors = dict(process.errors or {})
        for duty, n in dict(failed).items():
            if n:
                errors[duty] = errors.get(duty, 0) + n
        SupervisorProcess.objects.filter(pk=process.pk).update(
            interval=interval,
            last_pass_at=started_at,
            stopped_at=None,
            last_duration=duration,
            passes=F("passes") + 1,
            duration_sum=F("duration_sum") + duration,
            buckets=_bucket_counts(process.buckets, duration),
            errors=errors,
        )
        if report:
            SupervisorPass.objects.create(
                supervisor=process, started_at=started_at, duration=duration, did=did_by_org(report)
            )


def supervisor_stopped(*, label: str) -> None:
    """The supervisor process `label` stopped cleanly: the workers page shows it stopped, not silent."""
    SupervisorProcess.objects.filter(label=label).update(stopped_at=timezone.now())


def passes_prune(*, before: datetime) -> int:
    """Forget recorded passes, and supervisor processes that stopped passing, older than `before`."""
    deleted, _ = SupervisorPass.objects.filter(started_at__lt=before).delete()
    gone, _ = SupervisorProcess.objects.filter(last_pass_at__lt=before).delete()
    return deleted + gone


# --- reads ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SupervisorHealth:
    last_pass_at: datetime | None
    interval: float
    alive: bool

    @property
    def silent_for(self) -> float | None:
        if self.last_pass_at is None:
            return None
        return (timezone.now() - self.last_pass_at).total_seconds()


def expected_interval(last: SupervisorProcess | None) -> float:
    configured = float(settings.CONSOLE_SUPERVISE_SECONDS)
    return max(configured, last.interval) if last is not None else configured


def supervisor_alive(last_pass_at: datetime | None, interval: float, *, now: datetime | None = None) -> bool:
    """Alive while some supervisor passed within three of its intervals."""
    if last_pass_at is None:
        return False
    now = now or timezone.now()
    return now - last_pass_at <= timedelta(seconds=3 * interval)


def supervisor_health(*, now: datetime | None = None) -> SupervisorHealth:
    last = SupervisorProcess.objects.order_by("-last_pass_at").first()
    interval = expected_interval(last)
    at = last.last_pass_at if last else None
    return SupervisorHealth(at, interval, supervisor_alive(at, interval, now=now))


def recent_passes(org_ids: list[int], *, limit: int = 20) -> list[dict]:
    """The latest recorded passes that did something in these organizations, with their share only."""
    out = []
    keys = {str(o) for o in org_ids}
    for p in SupervisorPass.objects.select_related("supervisor").order_by("-started_at", "-id")[: limit * 10]:
        mine: dict[str, int] = {}
        for org, counts in (p.did or {}).items():
            if org in keys:
                for what, n in counts.items():
                    mine[what] = mine.get(what, 0) + n
        if mine:
            out.append({"pass": p, "did": mine})
        if len(out) >= limit:
            break
    return out
