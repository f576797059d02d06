"""The task header's Start over control: whether it is offered, and the duplicate risk it must name."""

from recovery.actions.start_over import duplicate_risk
from recovery.workspaces.validation import WORKSPACE_KINDS
from tasks.models import LIVE_RUN_STATUSES, Task


def start_over_context(task: Task, current_run, *, hold=None, live_actions=()) -> dict | None:
    """None on a closed task; otherwise what the control shows (one query when it is offered).

    Never offered where it would be refused: while a run is live, a gate holds the task, or a
    workspace action holds it (the plan would run again over files nobody has repaired).
    """
    if task.status in ("done", "cancelled"):
        return None
    if current_run is not None and current_run.status in LIVE_RUN_STATUSES:
        return {"available": False, "detail": f"Start over is possible once run #{current_run.pk} has ended."}
    workspace = next((a for a in live_actions if a.kind in WORKSPACE_KINDS), None)
    if workspace is not None:
        return {
            "available": False,
            "detail": f"Start over waits for the workspace repair on recovery action #{workspace.pk} (an admin).",
        }
    if hold is not None:
        return {"available": False, "detail": f"Start over waits: {hold.detail} Lifted by {hold.lifted_by}."}
    return {"available": True, "risk": duplicate_risk(task.pk)}
