"""Worker instances: who claims and heartbeats, and when they were last seen.

Bookkeeping for operators (the workers page, the header warning, /metrics), not
task history: nothing here appends an Event. Each write is one statement, so the
claim and heartbeat services stay cheap: an upsert per claim poll (at most one a
second per instance, `poll_due`), one UPDATE per heartbeat.
"""

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from tasks.models import LEASED_RUN_STATUSES, Run, Worker, WorkerInstance
from tasks.selectors import memberships_of, visible_runs

# Instances not seen for this long are left off the workers page (unless they still hold a run).
LIST_WINDOW = timedelta(hours=24)


def instance_label(worker: Worker, lease_owner: str) -> str:
    """The instance part of a run's `lease_owner` (`<worker name>/<label>`)."""
    return lease_owner.removeprefix(f"{worker.name}/")[:100]


# (worker id, label) → monotonic times this process last recorded the instance's poll and its claim. A worker
# with free slots polls in a loop and a busy one claims many times a second: the page shows instances to the
# second (an instance is stale after `stale_after()`, at least 5 s), so one upsert a second per instance is
# enough, and the claim does not rewrite the same row on every call. Per process: a restarted worker is a new
# instance; a transaction rolled back after a record only delays the next one by the interval.
_recorded: dict[tuple[int, str], tuple[float, float]] = {}
_NEVER = (float("-inf"), float("-inf"))


def poll_due(*, worker: Worker, label: str) -> tuple[bool, bool]:
    """Whether a claim poll from `label` is to be recorded now: (the poll itself, the claim if it gets one)."""
    interval = float(settings.CONSOLE_INSTANCE_POLL_SECONDS)
    seen, claim = _recorded.get((worker.pk, label[:100]), _NEVER)
    now = time.monotonic()
    return now - seen >= interval, now - claim >= interval


def poll_recorded(*, worker: Worker, label: str, seen: bool, claimed: bool) -> None:
    """The poll from `label` was recorded (`seen`) and/or its claim (`claimed`): the next waits out the interval."""
    key = (worker.pk, label[:100])
    last_seen, last_claim = _recorded.get(key, _NEVER)
    now = time.monotonic()
    _recorded[key] = (now if seen else last_seen, now if claimed else last_claim)


def forget_polls() -> None:
    """Record the next poll of every instance (tests: ids repeat across rolled-back tests)."""
    _recorded.clear()


def instance_seen(*, worker: Worker, label: str, claimed: bool, now: datetime | None = None) -> None:
    """A claim call arrived from `label` (whether or not it got a run): one upsert, at most once a second
    (a claim is recorded at most once a second too, and not held back by a poll recorded just before)."""
    seen, claim = poll_due(worker=worker, label=label)
    claimed = claimed and claim
    if not (seen or claimed):
        return
    poll_recorded(worker=worker, label=label, seen=True, claimed=claimed)
    now = now or timezone.now()
    row = WorkerInstance(
        org_id=worker.org_id,
        worker=worker,
        instance=label[:100],
        first_seen_at=now,
        last_seen_at=now,
        last_claim_at=now if claimed else None,
    )
    update = ["last_seen_at", "last_claim_at"] if claimed else ["last_seen_at"]
    WorkerInstance.objects.bulk_create(
        [row], update_conflicts=True, unique_fields=["worker", "instance"], update_fields=update
    )


def instance_beat(*, worker: Worker, lease_owner: str, now: datetime) -> None:
    """A heartbeat for a run held as `lease_owner`: one UPDATE (the instance exists since its claim)."""
    WorkerInstance.objects.filter(worker=worker, instance=instance_label(worker, lease_owner)).update(
        last_seen_at=now, last_heartbeat_at=now
    )


def instances_prune(*, before: datetime) -> int:
    """Forget instances not seen since `before` (a restarted worker is a new instance)."""
    held = Run.objects.filter(status__in=LEASED_RUN_STATUSES).values_list("lease_worker_id", flat=True)
    deleted, _ = WorkerInstance.objects.filter(last_seen_at__lt=before).exclude(worker_id__in=held).delete()
    return deleted


# --- reads ---------------------------------------------------------------------------


def heartbeat_interval() -> float:
    """How often a worker renews its lease: the configured interval, at most a third of the lease."""
    return max(0.05, min(float(settings.CONSOLE_HEARTBEAT_SECONDS), settings.CONSOLE_LEASE_SECONDS / 3))


def stale_after() -> timedelta:
    """An instance that missed two heartbeats (and two claim polls) is shown stale."""
    return timedelta(seconds=max(2 * heartbeat_interval(), 5.0))


@dataclass
class InstanceRow:
    instance: WorkerInstance
    alive: bool
    runs: list[Run] = field(default_factory=list)
    hidden_runs: int = 0  # runs of private tasks this viewer may not see

    @property
    def identity(self) -> str:
        return self.instance.worker.name


def worker_instances(user, *, now: datetime | None = None, limit: int = 500) -> list[InstanceRow]:
    """Instances of the user's organizations seen lately or holding a run, newest first,
    each with the leased runs it holds (runs of tasks the user may not see are only counted)."""
    now = now or timezone.now()
    org_ids = [m.org_id for m in memberships_of(user)]
    if not org_ids:
        return []
    leased = list(
        Run.objects.filter(org_id__in=org_ids, status__in=LEASED_RUN_STATUSES).select_related("agent").order_by("id")
    )
    holding = {r.lease_worker_id for r in leased}
    instances = list(
        WorkerInstance.objects.filter(org_id__in=org_ids)
        .filter(Q(last_seen_at__gte=now - LIST_WINDOW) | Q(worker_id__in=holding))
        .select_related("worker", "org")
        .order_by("-last_seen_at", "id")[:limit]
    )
    visible = set(visible_runs(user).filter(pk__in=[r.pk for r in leased]).values_list("pk", flat=True))
    by_owner: dict[tuple[int, str], list[Run]] = {}
    for r in leased:
        by_owner.setdefault((r.lease_worker_id, r.lease_owner), []).append(r)
    cutoff = now - stale_after()
    rows = []
    for inst in instances:
        held = by_owner.get((inst.worker_id, f"{inst.worker.name}/{inst.instance}"), [])
        if inst.last_seen_at < now - LIST_WINDOW and not held:
            continue
        rows.append(
            InstanceRow(
                instance=inst,
                alive=inst.last_seen_at >= cutoff,
                runs=[r for r in held if r.pk in visible],
                hidden_runs=sum(1 for r in held if r.pk not in visible),
            )
        )
    return rows
