"""A recovery action's card: its context and markup, the task page's recovery column, a run page's repair controls."""

import secrets
from contextlib import contextmanager
from contextvars import ContextVar

from django.template.loader import render_to_string
from django.utils.dateparse import parse_datetime
from django.utils.html import escape

from recovery import conversation, limits, notify
from recovery.actions.start_over import duplicate_risk
from recovery.api.shapes import action_view_of
from recovery.models import LIVE_ACTION_STATUSES, ActionKind, RecoveryAction
from recovery.selectors import action_detail
from recovery.words.agent_runs import (
    diverged_calls,
    diverged_summary,
)
from recovery.words.continue_from import continue_from_split_text
from recovery.words.notifications import OVERDUE_BADGE, overdue_text
from recovery.words.vocabulary import owner, reason_items
from recovery.words.workspaces import WORKSPACE_KINDS
from tasks.authz import can_operate
from tasks.models import WORKSPACE_VALIDATION_FAILED, Agent, Run, Step, Task

# The only viewer-specific words a card holds beside what the viewer's role decides: the viewer's own name as the
# default owner a repaired workspace action returns to. A render shared by several viewers of one audience
# (console.live: one render per page and role) writes this unguessable stand-in instead, and each socket's copy
# gets its viewer's name (escaped, as the template would) in its place: no viewer is ever sent another's name.
VIEWER_NAME = "viewer-" + secrets.token_hex(16)
_shared: ContextVar[bool] = ContextVar("console_cards_shared_render", default=False)


@contextmanager
def shared_render():
    """Cards rendered inside are for every viewer of an audience: the viewer's name is VIEWER_NAME (for_viewer)."""
    token = _shared.set(True)
    try:
        yield
    finally:
        _shared.reset(token)


def for_viewer(html: str, user) -> str:
    """A shared render as `user` would have had it rendered for them alone."""
    return html.replace(VIEWER_NAME, escape(getattr(user, "username", ""))) if VIEWER_NAME in html else html


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
    split = (evidence.get("seq") or action.seq) if diverged else None
    unknown = action.kind == ActionKind.UNKNOWN_OUTCOME
    deadline = _deadline_of(action) if action.status == "open" and not workspace else 0
    overdue = bool(deadline) and notify.is_overdue(action, deadline=deadline)
    return {
        "overdue": overdue,
        "overdue_text": overdue_text(deadline) if overdue else "",
        "overdue_badge": OVERDUE_BADGE,
        "reason": _model_reason(action, task_runs) if unknown and action.run.kind == "agent" else None,
        "is_diverged": diverged,
        "diverged_summary": diverged_summary(evidence) if diverged else None,
        "diverged_calls": diverged_calls(evidence) if diverged else [],
        # Continue from step k at the step where the paths split: a link into its preview (continue_views).
        "diverged_seq": split,
        "continue_from_split": continue_from_split_text(split) if split else "",
        # Start over from the card: the duplicate risk it must name (one query, only where it is offered).
        "start_over_risk": duplicate_risk(action.task_id) if "start_over" in view.controls else None,
        "is_workspace": workspace,
        "return_owner": owner(action.return_owner),
        "agents": agents,
        "username": VIEWER_NAME if _shared.get() else getattr(user, "username", ""),
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


def _deadline_of(action: RecoveryAction) -> int:
    """The decision deadline of the action's organization, from the organization already loaded with the action or
    its task (the task page and the action's own answer load it); else one query."""
    if RecoveryAction._meta.get_field("org").is_cached(action):
        return notify.deadline_seconds(action.org)
    task = action.task if RecoveryAction._meta.get_field("task").is_cached(action) else None
    if task is not None and Task._meta.get_field("org").is_cached(task):
        return notify.deadline_seconds(task.org)
    return limits.limits_for(action.org_id).decision_deadline_seconds


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


def run_repair_context(run: Run, *, user, request=None) -> dict:
    live = run_repair_action(run)
    card = ""
    if live is not None:
        action = action_detail(user, live.pk)
        if action is not None:
            card = render_action_card(action, user=user, request=request)
    return {"run": run, "card": card}


def render_run_repair(run: Run, *, user, request=None, oob: bool = False) -> str:
    """The repair controls on a run page, or an empty placeholder where they do not apply (so a push removes them)."""
    ctx = {**run_repair_context(run, user=user, request=request), "oob": oob}
    return render_to_string("console/cards/workspace.html#run_repair", ctx, request=request)
