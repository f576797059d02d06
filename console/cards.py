"""One render function per card. The page, the action response and the live push all use these."""

from dataclasses import dataclass

from django.db.models import Prefetch
from django.template.loader import render_to_string

from console import phrases
from console.permissions import can_admin, can_operate
from recovery.actions import current_gate
from recovery.models import LIVE_ACTION_STATUSES, ActionKind, ActionStatus, RecoveryAction
from recovery.presenters import task_state
from recovery.selectors import diagnose, task_detail
from tasks.models import LIVE_RUN_STATUSES, Run, Step, Task

FINAL_FOR_DIAGNOSIS = ("interrupted", "stopped")


@dataclass
class Progress:
    """Where the latest attempt stands, told only as far as the evidence goes."""

    phase: str  # requested | continuing | finished | rejected
    attempt: object
    run: Run | None


def action_progress(action: RecoveryAction) -> Progress | None:
    attempts = list(action.attempt_history.all())
    if not attempts:
        return None
    latest = attempts[-1]
    run = latest.continuation_run
    if latest.outcome == "rejected":
        return Progress("rejected", latest, run)
    if run is None or run.status == "queued":
        return Progress("requested", latest, run)
    if run.status in ("running", "stopping"):
        return Progress("continuing", latest, run)
    return Progress("finished", latest, run)


def action_context(
    action: RecoveryAction, user, *, message: str = "", message_code: str = "", task_runs: dict | None = None
) -> dict:
    live_gate = action.status in (ActionStatus.OPEN, ActionStatus.EXHAUSTED)
    gate = current_gate(action, task_runs=task_runs) if live_gate else None
    evidence = action.evidence or {}
    operate = can_operate(user, action.org_id)
    return {
        "action": action,
        "cause_text": phrases.cause(action.cause),
        "reasons": evidence.get("reasons", []),
        "evidence": evidence,
        "is_unknown": action.kind == ActionKind.UNKNOWN_OUTCOME,
        "original_owner": action.original_owner.name,
        "recovery_owner": phrases.owner(action.recovery_owner),
        "pips": [i < action.attempts for i in range(max(action.max_attempts, action.attempts))],
        "gate": gate,
        "gate_text": phrases.GATES.get(gate.gate, gate.gate) if gate else "",
        "progress": action_progress(action),
        "live": action.live,
        "can_operate": operate,
        "can_admin": can_admin(user, action.org_id),
        "message": message,
        "message_code": message_code,
    }


def render_action_card(
    action: RecoveryAction, *, user, request=None, message: str = "", message_code: str = "", task_runs=None
) -> str:
    ctx = action_context(action, user, message=message, message_code=message_code, task_runs=task_runs)
    return render_to_string("console/cards/action.html#card", ctx, request=request)


def task_header_context(task: Task, user, *, message: str = "") -> dict:
    actions = getattr(task, "action_list", [])
    live = [a for a in actions if a.live]
    current = getattr(task, "current_run", None)
    state = task_state(task, current, actions)
    return {
        "task": task,
        "state": state,
        "state_text": phrases.STATES.get(state, state),
        "current_run": current,
        "recovery_owner": next((phrases.owner(a.recovery_owner) for a in live if a.recovery_owner), ""),
        "can_operate": can_operate(user, task.org_id),
        "message": message,
    }


def render_task_header(task: Task, *, user, request=None, message: str = "") -> str:
    return render_to_string(
        "console/cards/task.html#header", task_header_context(task, user, message=message), request=request
    )


def run_context(run: Run, task_runs: dict[int, Run], user) -> dict:
    steps = run.step_list
    diagnosis = diagnose(run, steps, task_runs=task_runs) if run.status in FINAL_FOR_DIAGNOSIS else None
    verdicts = {}
    if diagnosis is not None:
        verdicts = {(v.parent_seq, v.seq): v for v in diagnosis.steps}
    rows = []
    dropped = {d.get("seq") for d in (run.carry or {}).get("dropped", [])}
    for s in steps:
        verdict = verdicts.get((s.parent_seq, s.seq))
        if s.reused_from_id:
            label, note = "reused", "saved result carried over; not run again"
        elif verdict is not None and verdict.verdict == "reuse":
            label = "completed" if s.phase == "completed" else "failed"
            note = "saved result; a continuation reuses it" if s.phase == "completed" else verdict.detail
        elif verdict is not None:
            label, note = phrases.VERDICTS.get(verdict.verdict, verdict.verdict), verdict.detail
        else:
            label, note = s.phase, ""
        rows.append({"step": s, "label": label, "note": note})
    continued_by = next(
        (
            r
            for r in task_runs.values()
            if r.continues_id == run.pk and (r.status in LIVE_RUN_STATUSES or r.started_at is not None)
        ),
        None,
    )
    return {
        "run": run,
        "rows": rows,
        "dropped": sorted(x for x in dropped if x is not None),
        "diagnosis": diagnosis,
        "disposition_text": phrases.DISPOSITIONS.get(diagnosis.disposition, "") if diagnosis else "",
        "continued_by": continued_by,
        "can_operate": can_operate(user, run.org_id),
    }


def render_run_card(run: Run, task_runs: dict[int, Run], *, user, request=None) -> str:
    return render_to_string("console/cards/run.html#card", run_context(run, task_runs, user), request=request)


def task_row_context(task: Task, user) -> dict:
    actions = getattr(task, "action_list", [])
    live = [a for a in actions if a.live]
    current = getattr(task, "current_run", None)
    state = task_state(task, current, actions)
    lead = live[0] if live else None
    return {
        "task": task,
        "state": state,
        "state_text": phrases.STATES.get(state, state),
        "current_run": current,
        "lead": lead,
        "cause_text": phrases.cause(lead.cause) if lead else "",
        "recovery_owner": phrases.owner(lead.recovery_owner) if lead else "",
    }


def render_task_row(task: Task, *, user, request=None) -> str:
    return render_to_string("console/cards/task_row.html#row", task_row_context(task, user), request=request)


def task_runs_of(task_id: int) -> dict[int, Run]:
    """Every run of the task with its steps, in two queries whatever the size."""
    runs = (
        Run.objects.filter(task_id=task_id)
        .select_related("agent")
        .prefetch_related(Prefetch("steps", queryset=Step.objects.order_by("seq"), to_attr="step_list"))
        .order_by("id")
    )
    return {r.pk: r for r in runs}


def render_recovery_section(task: Task, *, user, request=None, message: str = "", task_runs=None) -> str:
    live = [a for a in task.action_list if a.status in LIVE_ACTION_STATUSES]
    settled = [a for a in task.action_list if a.status not in LIVE_ACTION_STATUSES]
    ctx = {
        "task": task,
        "messages": task.message_list,
        "message": message,
        "can_operate": can_operate(user, task.org_id),
        "live_cards": [render_action_card(a, user=user, request=request, task_runs=task_runs) for a in live],
        "settled_cards": [render_action_card(a, user=user, request=request, task_runs=task_runs) for a in settled],
    }
    return render_to_string("console/cards/sections.html#recovery", ctx, request=request)


def render_chain(task: Task, task_runs: dict[int, Run], *, user, request=None) -> str:
    ctx = {
        "task": task,
        "run_cards": [render_run_card(r, task_runs, user=user, request=request) for r in task_runs.values()],
    }
    return render_to_string("console/cards/sections.html#chain", ctx, request=request)


def task_page_parts(task_id: int, *, user, request=None) -> dict:
    """Every card of the task page, from saved state: used by the page and by a live resync."""
    task = task_detail(user, task_id)
    task_runs = task_runs_of(task.pk)
    return {
        "task": task,
        "header_html": render_task_header(task, user=user, request=request),
        "recovery_html": render_recovery_section(task, user=user, request=request, task_runs=task_runs),
        "chain_html": render_chain(task, task_runs, user=user, request=request),
    }
