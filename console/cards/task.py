"""A task's cards: its header, its board row, its follow-ups and composer, its workspace panel, and every
part of its page at once (`task_page_parts`, the contexts the task page renders its fragments from)."""

from django.template.loader import render_to_string

from console.cards.actions import recovery_context
from console.cards.continue_from import continue_from_offer
from console.cards.runs import chain_context, task_runs_of
from console.cards.start_over import start_over_context
from recovery import notify
from recovery.actions import followups
from recovery.selectors import task_detail
from recovery.words.bulk import age_label
from recovery.words.followups import followup_line
from recovery.words.notifications import OVERDUE_BADGE, overdue_text
from recovery.words.task import row_attempts, row_why, task_state, task_view
from recovery.words.vocabulary import TASK_STATES, controls_summary, owner
from recovery.words.workspaces import workspace_view
from recovery.workspaces.validation import workspace_state
from tasks.authz import can_admin, can_operate
from tasks.holds import task_hold
from tasks.models import LIVE_RUN_STATUSES, Agent, Task
from tasks.selectors import task_facts


def task_header_context(task: Task, user, *, message: str = "", typed=None, task_runs=None) -> dict:
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
    start_over = start_over_context(task, current, hold=hold, live_actions=live) if operate else None
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
        "start_over": start_over,
        # Continue from step k: offered where Start over is (the same refusals), on the latest run's steps.
        "continue_from": (
            continue_from_offer(task, (task_runs or {}).get(current.pk, current), operate=operate)
            if start_over and start_over["available"]
            else None
        ),
        "message": message,
        "typed": typed or {},
    }


def render_task_header(
    task: Task, *, user, request=None, message: str = "", typed=None, oob: bool = False, task_runs=None
) -> str:
    """The task page's header; `task_runs` (the page's runs with their steps) spares the step picker a query."""
    ctx = task_header_context(task, user, message=message, typed=typed, task_runs=task_runs)
    ctx["oob"] = oob
    return render_to_string("console/cards/task.html#header", ctx, request=request)


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
    deadline = notify.deadline_seconds(task.org)
    overdue = any(notify.is_overdue(a, deadline=deadline) for a in waiting)
    return {
        "overdue": overdue,
        "overdue_text": overdue_text(deadline) if overdue else "",
        "overdue_badge": OVERDUE_BADGE,
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


def messages_context(task: Task, user) -> dict:
    messages = task.message_list
    # One reason for all of a task's waiting follow-ups, read from the facts now (never a stale saved string).
    wait = followups.waiting_reason(task) if any(m.status == "waiting" for m in messages) else ""
    closed = task.status in ("done", "cancelled")
    items = []
    for m in messages:
        badge, line = followup_line(m, wait_text=wait, closed=closed)
        items.append({"m": m, "badge": badge, "line": line})
    return {"task": task, "items": items, "can_operate": can_operate(user, task.org_id)}


def render_messages(task: Task, *, user, request=None, oob: bool = False) -> str:
    ctx = {**messages_context(task, user), "oob": oob}
    return render_to_string("console/cards/sections.html#messages", ctx, request=request)


def composer_context(task: Task, user, *, message: str = "", body: str = "") -> dict:
    return {
        "task": task,
        "can_operate": can_operate(user, task.org_id),
        "closed": task.status in ("done", "cancelled"),
        "message": message,
        "body": body,
    }


def render_composer(task: Task, *, user, request=None, message: str = "", body: str = "", oob: bool = False) -> str:
    ctx = {"oob": oob, **composer_context(task, user, message=message, body=body)}
    return render_to_string("console/cards/sections.html#composer", ctx, request=request)


def workspace_context(task: Task) -> dict:
    """The task page's workspace panel: every file with its status now, the hold, held copies, the last export."""
    return {"task": task, "view": workspace_view(workspace_state(task))}


def render_workspace(task: Task, *, user, request=None, oob: bool = False) -> str:
    ctx = {**workspace_context(task), "oob": oob}
    return render_to_string("console/cards/workspace.html#panel", ctx, request=request)


def task_page_parts(task_id: int, *, user, request=None) -> dict:
    """Every card of the task page as the context of its fragment, from saved state: the page renders each
    fragment from its context (`{% fragment %}`), as a live push renders it through its `render_*` function."""
    task = task_detail(user, task_id)
    task_runs = task_runs_of(task.pk)
    return {
        "task": task,
        "cards": {
            "header": task_header_context(task, user, task_runs=task_runs),
            "actions": recovery_context(task, user=user, request=request, task_runs=task_runs),
            "messages": messages_context(task, user),
            "composer": composer_context(task, user),
            "chain": chain_context(task, task_runs, user=user, request=request),
            "workspace": workspace_context(task),
        },
    }
