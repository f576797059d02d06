"""The task header's Start over control: whether it is offered, and the duplicate risk it must name."""

from recovery.fresh import duplicate_risk
from tasks.models import LIVE_RUN_STATUSES, Task


def start_over_context(task: Task, current_run) -> dict | None:
    """None on a closed task; otherwise what the control shows (one query when it is offered)."""
    if task.status in ("done", "cancelled"):
        return None
    if current_run is not None and current_run.status in LIVE_RUN_STATUSES:
        return {"available": False, "detail": f"Start over is possible once run #{current_run.pk} has ended."}
    return {"available": True, "risk": duplicate_risk(task.pk)}
