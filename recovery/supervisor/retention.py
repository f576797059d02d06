"""Checkpoint retention: the supervisor purges step payloads of runs that ended long ago.

What goes: each step's arguments and result (the bulk of a checkpoint). What
stays: the steps themselves (tool, phase, recovery mode, times), the run, its
recovery actions and decisions, and every event. The run records when its
checkpoint was purged; classification then says recovery is unavailable for it
(`checkpoint_purged`) instead of judging steps whose evidence is gone.

Idempotency-Key records keep the responses they replay, and a response can hold
a run's inputs, saved results and follow-up bodies: they expire with the same
retention, and a run's own records go with its checkpoint.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from tasks.events import event_append
from tasks.models import FINAL_RUN_STATUSES, IdempotencyRecord, Run, Step


def retention() -> timedelta:
    return timedelta(days=settings.CONSOLE_CHECKPOINT_RETENTION_DAYS)


def checkpoints_purge(*, now: datetime | None = None, limit: int = 200) -> list[int]:
    """Purge the checkpoints of runs that ended before the retention period; returns their ids.

    Only final runs (a live run still needs its checkpoint); each run in its own
    transaction with its `checkpoint_purged` event. A run already purged is left
    alone, so two supervisors purge each run once.
    """
    now = now or timezone.now()
    cutoff = now - retention()
    candidates = list(
        Run.objects.filter(checkpoint_purged_at__isnull=True, finished_at__lt=cutoff, status__in=FINAL_RUN_STATUSES)
        .order_by("finished_at", "id")
        .values_list("pk", flat=True)[:limit]
    )
    purged = []
    for run_id in candidates:
        with transaction.atomic():
            if not Run.objects.filter(pk=run_id, checkpoint_purged_at__isnull=True).update(checkpoint_purged_at=now):
                continue
            steps = Step.objects.filter(run_id=run_id).update(args={}, result=None)
            # A replayed response must not bring back what was just purged.
            IdempotencyRecord.objects.filter(run_id=run_id).delete()
            run = Run.objects.only("org_id", "task_id", "finished_at").get(pk=run_id)
            event_append(
                org_id=run.org_id,
                task_id=run.task_id,
                run_id=run_id,
                kind="checkpoint_purged",
                actor="supervisor",
                payload={
                    "steps": steps,
                    "retention_days": settings.CONSOLE_CHECKPOINT_RETENTION_DAYS,
                    "finished_at": run.finished_at.isoformat(),
                },
            )
            purged.append(run_id)
    return purged


def idempotency_purge(*, now: datetime | None = None, limit: int = 5000) -> int:
    """Forget Idempotency-Key records older than the retention period; returns how many.

    A key is for retrying a request, minutes or hours later; past the retention its response (which may
    quote run inputs, results and follow-ups) is not kept. At most `limit` a pass, oldest first.
    """
    now = now or timezone.now()
    old = list(
        IdempotencyRecord.objects.filter(created_at__lt=now - retention())
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )
    if not old:
        return 0
    deleted, _ = IdempotencyRecord.objects.filter(pk__in=old).delete()
    return deleted
