"""One render function per card. The page, the action response and the live push all use these.

Every word comes from recovery.words; this module gathers the loaded rows
it needs and hands the presenter's views to the templates.
"""

from django.db.models import F, Prefetch
from django.template.loader import render_to_string
from django.utils.dateparse import parse_datetime

from console.start_over_card import start_over_context
from recovery import conversation
from recovery.actions import followups
from recovery.actions.start_over import duplicate_risk
from recovery.api.shapes import action_view_of
from recovery.models import LIVE_ACTION_STATUSES, ActionKind, RecoveryAction, RecoveryAttempt
from recovery.selectors import action_detail, diagnose, run_usage, step_modes_now, task_detail
from recovery.words.agent_runs import (
    diverged_calls,
    diverged_summary,
    notice_row,
    output_heading,
    prompt_line,
    usage_line,
)
from recovery.words.bulk import age_label
from recovery.words.followups import followup_line
from recovery.words.runs import (
    carried_lines,
    continued_by_text,
    diagnosis_line,
    duration,
    run_lines,
    step_mode,
    step_row,
)
from recovery.words.task import row_attempts, row_why, task_state, task_view
from recovery.words.vocabulary import RUN_STATUSES, TASK_STATES, controls_summary, owner, reason_items
from recovery.words.workspaces import WORKSPACE_KINDS, step_files_note, workspace_view
from recovery.workspaces.validation import workspace_state
from tasks.authz import can_admin, can_operate
from tasks.holds import task_hold
from tasks.models import LIVE_RUN_STATUSES, WORKSPACE_VALIDATION_FAILED, Agent, Message, Run, Step, Task
from tasks.selectors import task_facts

FINAL_FOR_DIAGNOSIS = ("interrupted", "stopped")


# --- recovery actions ---------------------------------------------------------------


def action_context(
    action: RecoveryAction, user, *, message: str = "", message_code: str = "", task_runs=None, typed=None
) -> dict:
    view = action_view_of(action, user=user, task_runs=task_runs)
    evidence = action.evidence or {}
    workspace = action.kind in WORKSPACE_KINDS
    agents = (
        list(Agent.objects.filter(org_id=action.org_id).order_by("name").values_list("name", flat=True)[:200])
        if workspace and "repair_task" in view.controls
        else []
    )
    diverged = action.kind == ActionKind.DIVERGED
    unknown = action.kind == ActionKind.UNKNOWN_OUTCOME
    return {
        "reason": _model_reason(action, task_runs) if unknown and action.run.kind == "agent" else None,
        "is_diverged": diverged,
        "diverged_summary": diverged_summary(evidence) if diverged else None,
        "diverged_calls": diverged_calls(evidence) if diverged else [],
        # Start over from the card: the duplicate risk it must name (one query, only where it is offered).
        "start_over_risk": duplicate_risk(action.task_id) if "start_over" in view.controls else None,
        "is_workspace": workspace,
        "return_owner": owner(action.return_owner),
        "agents": agents,
        "username": getattr(user, "username", ""),
        "action": action,
        "view": view,
        "reasons": reason_items(evidence.get("reasons")),
        "evidence": evidence,
        "dispatched_at": _parse(evidence.get("dispatched_at")),
        "is_unknown": action.kind == ActionKind.UNKNOWN_OUTCOME,
        "original_owner": action.original_owner.name,
        "recovery_owner": owner(action.recovery_owner),
        "live": action.live,
        "can_operate": can_operate(user, action.org_id),
        "message": message,
        "message_code": message_code,
        "typed": typed or {},
    }


def _model_reason(action: RecoveryAction, task_runs=None):
    """The model's reason for the cut-off call: its last text before the call (one query without `task_runs`)."""
    # A batch item's or nested call's reason is its parent's: the turn before the top-level step that holds it.
    seq = (action.evidence or {}).get("parent_seq") or action.seq
    if not isinstance(seq, int):
        return None
    if task_runs is not None and action.run_id in task_runs:
        steps = task_runs[action.run_id].step_list
    else:
        steps = list(
            Step.objects.filter(run_id=action.run_id, tool="model", parent_seq__isnull=True, seq__lt=seq)
            .order_by("-seq")
            .only("seq", "tool", "parent_seq", "phase", "result")[:20]
        )
    text = conversation.reason_for_call(steps, seq)
    return conversation.text_of(text) if text else None


def _parse(value):

    try:
        return parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        return None


def render_action_card(
    action: RecoveryAction,
    *,
    user,
    request=None,
    message: str = "",
    message_code: str = "",
    task_runs=None,
    typed=None,
    oob: bool = False,
) -> str:
    ctx = action_context(action, user, message=message, message_code=message_code, task_runs=task_runs, typed=typed)
    ctx["oob"] = oob
    return render_to_string("console/cards/action.html#card", ctx, request=request)


# --- the task header ------------------------------------------------------------------


def task_header_context(task: Task, user, *, message: str = "", typed=None) -> dict:
    actions = getattr(task, "action_list", [])
    live = [a for a in actions if a.live]
    current = getattr(task, "current_run", None)
    hold = task_hold(task_facts(task))
    last = current  # the latest run of the task
    wait = followups.waiting_reason(task) if getattr(task, "followups_waiting", 0) else ""
    view = task_view(task, current, actions, hold=hold, last_run=last, followup_wait=wait)
    operate = can_operate(user, task.org_id)
    admin = can_admin(user, task.org_id)
    closed = task.status in ("done", "cancelled")
    run_live = current is not None and current.status in LIVE_RUN_STATUSES
    agents = list(Agent.objects.filter(org_id=task.org_id).order_by("name").values_list("name", flat=True)[:200])
    return {
        "task": task,
        "view": view,
        "state": view.state,
        "current_run": current,
        "recovery_owner": next((owner(a.recovery_owner) for a in live if a.recovery_owner), ""),
        "can_operate": operate,
        "can_admin": admin,
        "closed": closed,
        "controls_summary": controls_summary(closed=closed, can_admin=admin),
        "run_live": run_live,
        # Offered only when it can go through: no live run, no action deciding, no gate holding the task.
        "can_continue": operate and not closed and not run_live and not live and bool(last) and hold is None,
        # Follow-ups a closing left undelivered, offered again once the task is open (through normal admission).
        "can_deliver": operate and not closed and bool(getattr(task, "followups_undelivered", 0)),
        "undelivered": getattr(task, "followups_undelivered", 0),
        "agents": agents,
        "dependencies": list(task.dependencies.order_by("id").values("id", "title", "status")),
        "start_over": start_over_context(task, current, hold=hold, live_actions=live) if operate else None,
        "message": message,
        "typed": typed or {},
    }


def render_task_header(task: Task, *, user, request=None, message: str = "", typed=None, oob: bool = False) -> str:
    ctx = task_header_context(task, user, message=message, typed=typed)
    ctx["oob"] = oob
    return render_to_string("console/cards/task.html#header", ctx, request=request)


# --- runs -----------------------------------------------------------------------------


def run_context(run: Run, task_runs: dict[int, Run], user) -> dict:
    steps = run.step_list
    diagnosis = diagnose(run, steps, task_runs=task_runs) if run.status in FINAL_FOR_DIAGNOSIS else None
    verdicts = {(v.parent_seq, v.seq): v for v in diagnosis.steps} if diagnosis is not None else {}
    disposition = diagnosis.disposition if diagnosis is not None else None
    continuation = next(
        (r for r in task_runs.values() if r.continues_id == run.pk and (r.status in LIVE_RUN_STATUSES or r.started_at)),
        None,
    )
    rows = []
    modes_now = step_modes_now(run, steps)  # a step planned before a settings change keeps its mode
    notices = {
        (n.get("parent_seq"), n.get("seq")): n for n in (run.carry or {}).get("notices", []) if isinstance(n, dict)
    }
    for s in steps:
        notice = notices.get((s.parent_seq, s.seq)) if s.reused_from_id else None
        row = (
            notice_row(notice)
            if notice is not None
            else step_row(
                s,
                run=run,
                verdict=verdicts.get((s.parent_seq, s.seq)),
                disposition=disposition,
                reused_run_id=getattr(s, "reused_run_id", None),
                continued_in=continuation,
            )
        )
        rows.append(
            {
                "step": s,
                "label": row.label,
                "note": row.note,
                "declared": row.declared,
                "took": "" if row.declared else duration(s.dispatched_at, s.completed_at),
                "mode": step_mode(s.recovery_mode, modes_now.get(s.pk)),
                "files": step_files_note(s.workspace_notes),
            }
        )
    refused = next(
        (
            r
            for r in sorted(task_runs.values(), key=lambda r: -r.pk)
            if r.continues_id == run.pk and r.error_code == WORKSPACE_VALIDATION_FAILED and r.started_at is None
        ),
        None,
    )
    profile = getattr(run.agent, "profile", None)
    auto_resume = profile.auto_resume if profile is not None else True
    carried_messages = [m for m in getattr(run, "carried_messages", [])]
    agent = run.kind == "agent"
    return {
        "run": run,
        "agent_run": agent,
        "prompt": prompt_line(run) if agent else None,
        "output_heading": output_heading(run) if run.output is not None else "",
        "usage": usage_line(run_usage(run, steps, task_runs=task_runs)),
        "recovery_cost": conversation.run_recovery_line(
            conversation.run_tally(run, task_runs), continuation=run.continues_id is not None
        )
        if agent
        else None,
        "status_text": RUN_STATUSES.get(run.status, run.status),
        "lines": run_lines(run, auto_resume=auto_resume, disposition=disposition),
        "rows": rows,
        "dropped": sorted(d.get("seq") for d in (run.carry or {}).get("dropped", []) if d.get("seq") is not None),
        "diagnosis": diagnosis,
        "diagnosis_reasons": reason_items(diagnosis.reasons) if diagnosis is not None else [],
        "diagnosis_line": diagnosis_line(
            run, diagnosis, auto_resume=auto_resume, continued_by=continuation, refused_by=refused
        ),
        "continuation": continuation,
        "continued_by_text": continued_by_text(continuation),
        "carried": carried_lines(getattr(run, "carried_decisions", []), carried_messages),
        "can_operate": can_operate(user, run.org_id),
    }


def render_run_card(
    run: Run, task_runs: dict[int, Run], *, user, request=None, oob: bool = False, conversation: bool = False
) -> str:
    """`conversation`: the card heads an agent run's own page, whose conversation shows the prompt, the steps
    and the output (the card then leaves them to it)."""
    ctx = run_context(run, task_runs, user)
    ctx["oob"] = oob
    ctx["in_conversation"] = conversation and ctx["agent_run"]
    return render_to_string("console/cards/run.html#card", ctx, request=request)


def run_page_context(run: Run, ctx: dict) -> dict:
    """What a run page shows around its card (lineage, diagnosis), from the card's own context."""
    keys = ("diagnosis", "diagnosis_reasons", "diagnosis_line", "continuation", "continued_by_text")
    return {"run": run, **{k: ctx[k] for k in keys}}


def render_run_page_parts(run: Run, task_runs: dict[int, Run], *, user, request=None, oob: bool = False) -> str:
    """A run page's lineage and diagnosis, as the page draws them: a push redraws them with the card."""
    ctx = {**run_page_context(run, run_context(run, task_runs, user)), "oob": oob}
    return render_to_string("console/run.html#lineage", ctx, request=request) + render_to_string(
        "console/run.html#diagnosis", ctx, request=request
    )


def conversation_context(run: Run, task_runs: dict[int, Run]) -> dict:
    """An agent run as its conversation (recovery.conversation), from the task's loaded runs: no query."""
    diagnosis = diagnose(run, run.step_list, task_runs=task_runs) if run.status in FINAL_FOR_DIAGNOSIS else None
    continuation = next(
        (r for r in task_runs.values() if r.continues_id == run.pk and (r.status in LIVE_RUN_STATUSES or r.started_at)),
        None,
    )
    talk = conversation.conversation(
        run,
        task_runs,
        verdicts={(v.parent_seq, v.seq): v for v in diagnosis.steps} if diagnosis is not None else {},
        disposition=diagnosis.disposition if diagnosis is not None else None,
        continued_in=continuation,
        messages=getattr(run, "carried_messages", []),
    )
    return {
        "run": run,
        "talk": talk,
        "heading": conversation.conversation_heading(run),
        "output_heading": output_heading(run) if run.output is not None else "",
    }


def render_conversation(run: Run, task_runs: dict[int, Run], *, request=None, oob: bool = False) -> str:
    """The conversation section of an agent run's page; empty for a scripted run (its page lists its steps)."""
    if run.kind != "agent":
        return ""
    ctx = conversation_context(run, task_runs)
    ctx["oob"] = oob
    return render_to_string("console/cards/conversation.html#conversation", ctx, request=request)


def task_runs_of(task_id: int) -> dict[int, Run]:
    """Every run of the task with its steps, carried messages and decisions, in a fixed number of queries."""

    runs = (
        Run.objects.filter(task_id=task_id)
        .select_related("agent__profile")
        .prefetch_related(
            Prefetch(
                "steps",
                queryset=Step.objects.annotate(reused_run_id=F("reused_from__run_id")).order_by("seq"),
                to_attr="step_list",
            ),
            Prefetch(
                "messages",
                queryset=Message.objects.select_related("author").order_by("created_at", "id"),
                to_attr="carried_messages",
            ),
        )
        .order_by("id")
    )
    by_id = {r.pk: r for r in runs}
    decisions = RecoveryAttempt.objects.filter(continuation_run_id__in=list(by_id)).exclude(decision="")
    for run in by_id.values():
        run.carried_decisions = []
    for attempt in decisions:
        by_id[attempt.continuation_run_id].carried_decisions.append(attempt)
    return by_id


# --- board rows -------------------------------------------------------------------------


def task_row_context(task: Task, user) -> dict:
    actions = getattr(task, "action_list", [])
    live = [a for a in actions if a.live]
    current = getattr(task, "current_run", None)
    state = task_state(task, current, actions)
    waiting = [a for a in live if a.status in ("open", "exhausted")]
    lead = (waiting or live or [None])[0]
    why = row_why(task, state, lead, current)
    # Its age: since when it waits on a person (its oldest open or exhausted action), else its last change.
    opened = [a.created_at for a in waiting]
    attempts, attempts_title = row_attempts(lead, current)
    return {
        "attempts": attempts,
        "attempts_title": attempts_title,
        "since": min(opened) if opened else task.updated_at,
        "since_label": age_label(bool(opened)),
        "task": task,
        "state": state,
        "state_text": TASK_STATES[state],
        "current_run": current,
        "lead": lead,
        "cause_text": why,
        "recovery_owner": owner(lead.recovery_owner) if lead else "",
    }


def render_task_row(task: Task, *, user, request=None, oob: bool = False, selectable: bool = False) -> str:
    ctx = task_row_context(task, user)
    ctx["oob"] = oob
    ctx["selectable"] = selectable
    return render_to_string("console/cards/task_row.html#row", ctx, request=request)


# --- the recovery column ----------------------------------------------------------------


def recovery_context(task: Task, *, user, request=None, task_runs=None) -> dict:
    live = [a for a in task.action_list if a.status in LIVE_ACTION_STATUSES]
    settled = [a for a in task.action_list if a.status not in LIVE_ACTION_STATUSES]
    return {
        "task": task,
        "can_operate": can_operate(user, task.org_id),
        "live_cards": [render_action_card(a, user=user, request=request, task_runs=task_runs) for a in live],
        "settled_cards": [render_action_card(a, user=user, request=request, task_runs=task_runs) for a in settled],
    }


def render_actions(task: Task, *, user, request=None, task_runs=None, oob: bool = False) -> str:
    ctx = recovery_context(task, user=user, request=request, task_runs=task_runs)
    ctx["oob"] = oob
    return render_to_string("console/cards/sections.html#actions", ctx, request=request)


def render_messages(task: Task, *, user, request=None, oob: bool = False) -> str:
    messages = task.message_list
    # One reason for all of a task's waiting follow-ups, read from the facts now (never a stale saved string).
    wait = followups.waiting_reason(task) if any(m.status == "waiting" for m in messages) else ""
    closed = task.status in ("done", "cancelled")
    items = []
    for m in messages:
        badge, line = followup_line(m, wait_text=wait, closed=closed)
        items.append({"m": m, "badge": badge, "line": line})
    ctx = {"task": task, "items": items, "can_operate": can_operate(user, task.org_id), "oob": oob}
    return render_to_string("console/cards/sections.html#messages", ctx, request=request)


def render_composer(task: Task, *, user, request=None, message: str = "", body: str = "", oob: bool = False) -> str:
    ctx = {
        "oob": oob,
        "task": task,
        "can_operate": can_operate(user, task.org_id),
        "closed": task.status in ("done", "cancelled"),
        "message": message,
        "body": body,
    }
    return render_to_string("console/cards/sections.html#composer", ctx, request=request)


def render_chain(task: Task, task_runs: dict[int, Run], *, user, request=None, oob: bool = False) -> str:
    ctx = {
        "oob": oob,
        "task": task,
        "run_cards": [render_run_card(r, task_runs, user=user, request=request) for r in task_runs.values()],
        "chain_recovery": chain_recovery(task_runs),
    }
    return render_to_string("console/cards/sections.html#chain", ctx, request=request)


def chain_recovery(task_runs: dict[int, Run]):
    """An agent's chain: what recovery reused and what it spent again, over all its runs (None for a plan)."""
    latest = task_runs[max(task_runs)] if task_runs else None
    if latest is None or latest.kind != "agent":
        return None
    return conversation.chain_recovery_line(conversation.chain_tally(latest, task_runs))


def render_chain_recovery(task: Task, task_runs: dict[int, Run], *, request=None, oob: bool = False) -> str:
    """The chain's recovery line alone: a push redraws it whenever a run of the chain changed."""
    ctx = {"oob": oob, "task": task, "chain_recovery": chain_recovery(task_runs)}
    return render_to_string("console/cards/sections.html#chain_recovery", ctx, request=request)


# --- workspaces ------------------------------------------------------------------------------


def render_workspace(task: Task, *, user, request=None, oob: bool = False) -> str:
    """The task page's workspace panel: every file with its status now, the hold, held copies, the last export."""

    ctx = {"task": task, "view": workspace_view(workspace_state(task)), "oob": oob}
    return render_to_string("console/cards/workspace.html#panel", ctx, request=request)


def run_repair_action(run: Run) -> RecoveryAction | None:
    """The live workspace_validation action a run page hosts: only for a failed run refused by validation."""

    if run.status != "failed" or run.error_code != WORKSPACE_VALIDATION_FAILED:
        return None
    return (
        RecoveryAction.objects.filter(
            task_id=run.task_id, kind=ActionKind.WORKSPACE_VALIDATION, status__in=LIVE_ACTION_STATUSES
        )
        .order_by("-id")
        .first()
    )


def render_run_repair(run: Run, *, user, request=None, oob: bool = False) -> str:
    """The repair controls on a run page, or an empty placeholder where they do not apply (so a push removes them)."""

    live = run_repair_action(run)
    card = ""
    if live is not None:
        action = action_detail(user, live.pk)
        if action is not None:
            card = render_action_card(action, user=user, request=request)
    ctx = {"run": run, "card": card, "oob": oob}
    return render_to_string("console/cards/workspace.html#run_repair", ctx, request=request)


def task_page_parts(task_id: int, *, user, request=None) -> dict:
    """Every card of the task page, from saved state: used by the page and by a live resync."""
    task = task_detail(user, task_id)
    task_runs = task_runs_of(task.pk)
    return {
        "task": task,
        "header_html": render_task_header(task, user=user, request=request),
        "actions_html": render_actions(task, user=user, request=request, task_runs=task_runs),
        "messages_html": render_messages(task, user=user, request=request),
        "composer_html": render_composer(task, user=user, request=request),
        "chain_html": render_chain(task, task_runs, user=user, request=request),
        "workspace_html": render_workspace(task, user=user, request=request),
    }
