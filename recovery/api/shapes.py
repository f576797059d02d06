"""JSON shapes of the operator API (API.md), and the facts every presenter call needs, read once.

Words come from recovery.words; this module gathers what it needs (the
live gate, a hold on a queued continuation) and lays out the API's JSON.
"""

from django.utils import timezone

from recovery.words.actions import action_view
from recovery.words.card import ActionView
from recovery.words.lines import plain
from recovery.words.task import task_state
from recovery.words.workspaces import JOB_PENDING, WORKSPACE_KINDS, JobFacts, repair_line
from recovery.workspaces.repair_jobs import label_last_polled, silent_after
from tasks.api import iso, message_data, step_data
from tasks.authz import can_admin, can_operate
from tasks.holds import task_hold
from tasks.models import Run, Task, effective_continuation
from tasks.selectors import task_facts

__all__ = ["action_data", "action_view_of", "attempt_data", "run_data", "task_data", "task_state"]


def action_view_of(action, *, user=None, task_runs: dict | None = None) -> ActionView:
    """The presenter's view of an action, with the facts read now (gate, hold, roles)."""
    from recovery.selectors import current_gate

    attempts = list(action.attempt_history.all())
    runs = {a.continuation_run_id: a.continuation_run for a in attempts if a.continuation_run_id}
    workspace = action.kind in WORKSPACE_KINDS
    # A workspace action is settled by a repair, not an admission: the admission gates do not apply to it.
    gate = (
        current_gate(action, task_runs=task_runs) if action.status in ("open", "exhausted") and not workspace else None
    )
    repairs = sorted(action.repairs.all(), key=lambda r: r.pk) if workspace else []
    run_hold = None
    if action.status == "retrying":
        latest = runs.get(attempts[-1].continuation_run_id) if attempts else None
        if latest is not None and latest.status == "queued":
            run_hold = task_hold(task_facts(action.task))
    return action_view(
        action,
        attempts=attempts,
        runs=runs,
        gate=gate,
        run_hold=run_hold,
        can_operate=bool(user) and can_operate(user, action.org_id),
        can_admin=bool(user) and can_admin(user, action.org_id),
        repairs=repairs,
        repair_task=_repair_task(action) if workspace else None,
        job_facts=_job_facts(action, repairs[-1]) if repairs and repairs[-1].status in JOB_PENDING else None,
    )


def _job_facts(action, job) -> JobFacts:
    """Whether a worker that could do the action's repair job is asking for work, and whether its claimer is."""
    since = timezone.now() - silent_after()
    polled = label_last_polled(action.org_id, job.label)
    return JobFacts(
        polled_at=polled[0] if polled else None,
        polled_by=polled[1] if polled else "",
        polled_recently=polled is not None and polled[0] >= since,
        claim_silent=job.claimed_at is not None and job.claimed_at < since,
    )


def _repair_task(action):
    if not action.repair_task_id:
        return None
    return Task.objects.select_related("agent").filter(pk=action.repair_task_id).first()


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


def action_data(action, *, with_gate: bool = False, user=None) -> dict:
    """`gate` is the gate that would refuse an admission now (live), else the last refusal saved."""
    gate = {"gate": action.gate, "detail": action.gate_detail} if action.gate else None
    view = action_view_of(action, user=user)
    if with_gate and action.status in ("open", "exhausted") and action.kind not in WORKSPACE_KINDS:
        from recovery.selectors import current_gate

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
        "next_action": view.next_text,
        "label": view.badge,
        "summary": [plain(line) for line in view.progress],
        "decision": action.decision or None,
        "decided_by": action.decided_by or None,
        "decided_at": iso(action.decided_at),
        "decision_note": action.decision_note or None,
        "exhaustion": action.exhaustion or None,
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
                "label": r.label or None,
                "claimed_by": r.claimed_by or None,
                "claimed_at": iso(r.claimed_at),
                "created_at": iso(r.created_at),
                "completed_at": iso(r.completed_at),
                "summary": plain(repair_line(r)),
            }
            for r in sorted(action.repairs.all(), key=lambda r: r.pk)
        ],
        "repair_task_status": _repair_task(action).status if action.repair_task_id else None,
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
        "closed_by": task.closed_by or None,
        "closed_at": iso(task.closed_at),
        "close_reason": task.close_reason or None,
        "created_at": iso(task.created_at),
        "updated_at": iso(task.updated_at),
    }
    if detail:
        data.update(
            {
                "runs": [r.pk for r in task.run_list],
                "messages": _messages(task),
                "workspace": task.workspace,
                "export_destination": task.export_destination,
                "creator": task.creator.username if task.creator else None,
                "dependencies": sorted(d.pk for d in task.dependencies.all()),
                "kind": current.kind if current else "plan",
                "output": current.output if current else None,
            }
        )
    return data


def _messages(task: Task) -> list[dict]:
    """The task's follow-ups; a waiting one's reason is read from the facts now, never a stale saved string."""
    from recovery.actions.followups import waiting_reason

    wait = waiting_reason(task) if any(m.status == "waiting" for m in task.message_list) else None
    return [message_data(m, waiting_reason=wait if m.status == "waiting" else None) for m in task.message_list]


def run_data(run: Run) -> dict:
    from recovery.selectors import diagnose, run_usage

    steps = getattr(run, "step_list", None)
    if steps is None:
        steps = list(run.steps.order_by("seq"))
    continued_by = run.continuations.filter(effective_continuation()).order_by("-id").first()
    declared = (run.carry or {}).get("declared") or {}
    notices = {
        (n.get("parent_seq"), n.get("seq")): n for n in (run.carry or {}).get("notices", []) if isinstance(n, dict)
    }
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
        "last_heartbeat_at": iso(run.last_heartbeat_at),
        "checkpoint_purged_at": iso(run.checkpoint_purged_at),
        "created_at": iso(run.created_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "stop_requested_by": run.stop_requested_by or None,
        "stop_requested_at": iso(run.stop_requested_at),
        "input": run.input,
        "kind": run.kind,
        "output": run.output,
        "diverged": run.diverged,
        "usage": run_usage(run, steps).as_dict(),
        "notices": list((run.carry or {}).get("notices", [])),
        "steps": [_step(s, declared, notices) for s in steps],
        "diagnosis": diagnose(run, steps).as_dict(),
    }


def _step(step, declared: dict, notices: dict) -> dict:
    """A step as the API shows it; a step a person declared performed says so (it has no saved result), and so
    does a step of an agent run that the agent got a notice for instead of a result."""
    data = step_data(step)
    # A batch item a person declared performed is keyed by its own (nested) seq, like a top-level step.
    said = declared.get(str(step.seq)) if step.reused_from_id else None
    notice = notices.get((step.parent_seq, step.seq)) if step.reused_from_id else None
    data["carried"] = (
        ("notice" if notice else "declared_performed" if said else "saved_result") if step.reused_from_id else None
    )
    if said:
        data["declared"] = said
    if notice:
        data["notice"] = {k: notice.get(k) for k in ("decision", "decided_by", "decided_at", "note", "text")}
    return data
