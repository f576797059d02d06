"""The "Continue from step k" offer on the task header and the run page: which steps can be picked."""

from tasks.authz import can_operate
from tasks.models import LIVE_RUN_STATUSES, Step


def continue_from_offer(task, run, *, user) -> dict | None:
    """None when it is not offered (a closed task, a live run, not the task's latest run, no saved step, not an
    operator); otherwise the latest run's saved top-level steps to pick from (one query). The preview it leads
    to says what is reused and what runs again, and the service refuses what a gate holds."""
    if run is None or task.status in ("done", "cancelled") or run.status in LIVE_RUN_STATUSES:
        return None
    if not can_operate(user, task.org_id):
        return None
    steps = list(Step.objects.filter(run=run, parent_seq__isnull=True).order_by("seq").values("seq", "tool"))
    if not steps:
        return None
    return {"task": task.pk, "run": run.pk, "steps": steps}
