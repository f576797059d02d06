"""What a live page is sent when it connects or reconnects: every part of it from saved state, rendered by the
same templates the page uses; the cursor and the reconnect notice (templates/console/live/fragments.html)."""

from functools import lru_cache

from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from console.cards.actions import render_actions, render_run_repair
from console.cards.runs import render_chain, render_conversation, render_run_card, render_run_page_parts, task_runs_of
from console.cards.task import render_composer, render_messages, render_task_header, render_task_row, render_workspace
from console.views.bulk import ledger_args, render_ledger, render_status
from console.views.triage import render_inbox_list, render_nav_count
from recovery.bulk.selectors import operation
from recovery.selectors import task_detail
from recovery.triage.board import board_page
from recovery.triage.filters import board_filter
from tasks.errors import NotFound
from tasks.models import Event, Role, Run

RECONNECT_NOTICE = (
    "Live updates reconnected — this page now shows saved state. Reconnecting does not restart the agent."
)


FRAGMENTS = "console/live/fragments.html"


@lru_cache(maxsize=64)
def cursor_fragment(event_id: int) -> str:
    """The page's cursor; one render per event id, not one per socket of a push to 200 pages."""
    return render_to_string(f"{FRAGMENTS}#cursor", {"event_id": int(event_id)})


def notice_fragment() -> str:
    return render_to_string(f"{FRAGMENTS}#notice", {"text": RECONNECT_NOTICE})


def board_snapshot(user, *, filters: dict, selectable: bool = False) -> str:
    """The board's rows for its parameters (tab, search, agent, owner, tool, age, order), from saved state."""
    tab, f = board_filter(filters)
    tasks, _ = board_page(user, f, limit=50)
    # Each row is a rendered template (cards/task_row.html); the empty sentence is the board page's own.
    rows = mark_safe("".join(render_task_row(t, user=user, selectable=selectable) for t in tasks))  # noqa: S308
    return render_to_string(f"{FRAGMENTS}#board_rows", {"rows": rows, "tab": tab, "q": f.q})


def can_select(role: str | None) -> bool:
    """Board rows carry selection checkboxes for those who may act on them (operators, admins)."""
    return role in (Role.OPERATOR, Role.ADMIN)


def inbox_snapshot(user) -> str:
    """The inbox list and the navigation's count, from saved state."""

    return render_inbox_list(user, oob=True) + render_nav_count(user)


def nav_count(user) -> str:

    return render_nav_count(user)


def bulk_snapshot(user, op_id: int, filters: dict) -> str:
    """A bulk operation's progress and the ledger page the viewer has open, from saved state."""

    try:
        op = operation(user, op_id)
    except NotFound:
        return ""
    result, pos = ledger_args(filters)
    return render_status(op, user, oob=True) + render_ledger(op, user, result=result, pos=pos, oob=True)


# Event kinds after which what waits on a person (the inbox, its count) may differ.
# `decision_overdue`: the supervisor noticed a decision past its deadline, so open inboxes draw its overdue badge.
INBOX_EVENTS = frozenset(
    {"member_set", "member_removed", "task_closed", "task_reopened", "task_reassigned", "decision_overdue"}
)


def changes_inbox(kind: str) -> bool:
    return kind.startswith("action_") or kind in INBOX_EVENTS


def task_snapshot(user, task_id: int) -> str:
    """Every card of a task page from saved state (connect, reconnect), the follow-up composer included: a task
    closed while the page was away no longer offers "Send follow-up". What is typed survives the swap (the page
    carries it into the new composer, or keeps it beside the sentence that says why it cannot be sent)."""
    try:
        task = task_detail(user, task_id)
    except NotFound:
        return ""
    task_runs = task_runs_of(task.pk)
    return (
        render_task_header(task, user=user, oob=True)
        + render_actions(task, user=user, task_runs=task_runs, oob=True)
        + render_messages(task, user=user, oob=True)
        + render_composer(task, user=user, oob=True)
        + render_chain(task, task_runs, user=user, oob=True)
        + render_workspace(task, user=user, oob=True)
    )


def run_snapshot(user, run_id: int) -> str:
    run = Run.objects.filter(pk=run_id).only("task_id").first()
    if run is None:
        return ""
    task_runs = task_runs_of(run.task_id)
    run = task_runs[run_id]
    return (
        render_run_card(run, task_runs, user=user, oob=True, conversation=True)
        + render_conversation(run, task_runs, oob=True)
        + render_run_repair(run, user=user, oob=True)
        + render_run_page_parts(run, task_runs, user=user, oob=True)
    )


def render_page_for(user, page: str, obj_id: int | None, filters: dict, role: str | None = None) -> str:
    """Every part of a page from saved state, the navigation's count included (connect, reconnect)."""
    if page == "inbox":
        return inbox_snapshot(user)
    if page == "board":
        html = board_snapshot(user, filters=filters, selectable=can_select(role))
    elif page == "bulk":
        html = bulk_snapshot(user, obj_id, filters)
    elif page == "task":
        html = task_snapshot(user, obj_id)
    else:
        html = run_snapshot(user, obj_id)
    return html + nav_count(user)


def changed_since(page: str, *, org_id: int, task_id: int | None, after: int, obj_id: int | None = None) -> bool:
    qs = Event.objects.filter(id__gt=after)
    if page in ("board", "inbox"):
        qs = qs.filter(org_id=org_id)
    elif page == "bulk":
        qs = qs.filter(org_id=org_id, payload__bulk=obj_id)
    else:
        qs = qs.filter(task_id=task_id)
    return qs.exists()
