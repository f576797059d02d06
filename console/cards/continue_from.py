"""The "Continue from step k" offer on the task header and the run page: which steps can be picked."""

from tasks.models import LIVE_RUN_STATUSES, Step


def continue_from_offer(task, run, *, operate: bool) -> dict | None:
    """None when it is not offered (a cancelled task, a live run, no saved step, not an operator); otherwise the
    run's saved top-level steps to pick from (the loaded `step_list`, else one query). `run` is the task's latest
    run. The preview it leads to says what is reused and what runs again, and the service refuses what a gate
    holds."""
    if not operate or run is None or task.status == "cancelled" or run.status in LIVE_RUN_STATUSES:
        return None
    loaded = getattr(run, "step_list", None)
    if loaded is not None:
        steps = [{"seq": s.seq, "tool": s.tool} for s in loaded if s.parent_seq is None]
    else:
        steps = list(Step.objects.filter(run=run, parent_seq__isnull=True).order_by("seq").values("seq", "tool"))
    if not steps:
        return None
    return {"task": task.pk, "run": run.pk, "steps": steps}
