"""JSON shapes of the operator API (API.md). Shared by the API and the pages' data attributes."""

from tasks.api import iso, message_data, step_data
from tasks.models import Run, Task, effective_continuation


def task_state(task: Task, current_run: Run | None, actions: list) -> str:
    """The derived `state` of API.md."""
    if task.status == "cancelled":
        return "cancelled"
    if task.status == "done":
        return "done"
    live = [a for a in actions if a.status in ("open", "retrying", "exhausted")]
    if any(a.status == "exhausted" for a in live):
        return "exhausted"
    if any(a.status == "open" for a in live):
        return "needs_decision"
    if current_run is not None and current_run.status in ("running", "stopping"):
        return "running"
    if task.paused or task.budget_exhausted:
        return "blocked"
    if current_run is not None and current_run.status == "queued":
        return "queued"
    if task.status == "blocked":
        return "blocked"
    return "idle"


def run_summary(run: Run | None) -> dict | None:
    if run is None:
        return None
    return {"id": run.pk, "status": run.status, "attempt": run.attempt}


def attempt_data(attempt) -> dict:
    return {
        "number": attempt.number,
        "requested_by": attempt.requested_by,
        "requested_at": iso(attempt.requested_at),
        "acknowledged_at": iso(attempt.acknowledged_at),
        "continuation_run": attempt.continuation_run_id,
        "outcome": attempt.outcome,
        "accepted_duplicate_risk": attempt.accepted_duplicate_risk,
        "decision": attempt.decision or None,
        "note": attempt.note,
        "rejected_gate": attempt.rejected_gate or None,
        "rejected_detail": attempt.rejected_detail or None,
    }


def action_data(action, *, with_gate: bool = False) -> dict:
    """`gate` is the gate that would refuse an admission now (live), else the last refusal saved."""
    gate = {"gate": action.gate, "detail": action.gate_detail} if action.gate else None
    if with_gate and action.status in ("open", "exhausted"):
        from recovery.actions import current_gate

        hold = current_gate(action)
        gate = {"gate": hold.gate, "detail": hold.detail, "lifted_by": hold.lifted_by} if hold else None
    return {
        "id": action.pk,
        "task": action.task_id,
        "run": action.run_id,
        "kind": action.kind,
        "status": action.status,
        "cause": action.cause,
        "evidence": action.evidence,
        "seq": action.seq,
        "original_owner": action.original_owner.name,
        "recovery_owner": action.recovery_owner or None,
        "repair_task": action.repair_task_id,
        "return_owner": action.return_owner or None,
        "attempts": action.attempts,
        "max_attempts": action.max_attempts,
        "due_at": iso(action.due_at),
        "next_action": action.next_action,
        "gate": gate,
        "version": action.version,
        "resolution": action.resolution or None,
        "resolution_note": action.resolution_note or None,
        "created_at": iso(action.created_at),
        "updated_at": iso(action.updated_at),
        "attempt_history": [attempt_data(a) for a in action.attempt_history.all()],
        "repairs": [
            {
                "id": r.pk,
                "repair": r.repair,
                "requested_by": r.requested_by.username if r.requested_by else None,
                "status": r.status,
                "result": r.result,
                "created_at": iso(r.created_at),
                "completed_at": iso(r.completed_at),
            }
            for r in action.repairs.all()
        ],
    }


def task_data(task: Task, *, detail: bool = False) -> dict:
    actions = getattr(task, "action_list", None)
    if actions is None:
        actions = list(task.actions.all())
    current = getattr(task, "current_run", None)
    data = {
        "id": task.pk,
        "title": task.title,
        "agent": task.agent.name,
        "status": task.status,
        "state": task_state(task, current, actions),
        "paused": task.paused,
        "budget_limit": task.budget_limit,
        "budget_used": task.budget_used,
        "private": task.private,
        "parent": task.parent_id,
        "current_run": current.pk if current else None,
        "current_run_status": current.status if current else None,
        "actions": [action_data(a) for a in actions],
        "created_at": iso(task.created_at),
        "updated_at": iso(task.updated_at),
    }
    if detail:
        data.update(
            {
                "runs": [r.pk for r in task.run_list],
                "messages": [message_data(m) for m in task.message_list],
                "workspace": task.workspace,
                "export_destination": task.export_destination,
                "creator": task.creator.username if task.creator else None,
            }
        )
    return data


def run_data(run: Run) -> dict:
    from recovery.selectors import diagnose

    steps = getattr(run, "step_list", None)
    if steps is None:
        steps = list(run.steps.order_by("seq"))
    continued_by = run.continuations.filter(effective_continuation()).order_by("-id").first()
    return {
        "id": run.pk,
        "task": run.task_id,
        "agent": run.agent.name,
        "status": run.status,
        "attempt": run.attempt,
        "continues": run.continues_id,
        "continued_by": continued_by.pk if continued_by else None,
        "error_code": run.error_code or None,
        "error_detail": run.error_detail or None,
        "stop_reason": run.stop_reason or None,
        "stop_receipt": run.stop_receipt,
        "recovery_disabled": run.recovery_disabled or None,
        "lease_owner": run.lease_owner or None,
        "lease_epoch": run.lease_epoch,
        "lease_expires_at": iso(run.lease_expires_at),
        "created_at": iso(run.created_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "input": run.input,
        "steps": [step_data(s) for s in steps],
        "diagnosis": diagnose(run, steps).as_dict(),
    }
