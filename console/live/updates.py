"""What a live page is sent for an event: the parts the event's kind changes, board rows, the task page's and
run page's cards, and leases (read on the relay's schedule)."""

from dataclasses import dataclass

from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from console.cards.actions import render_actions, shared_render
from console.cards.runs import render_chain_recovery, render_run_card, task_runs_of
from console.cards.task import render_composer, render_messages, render_task_header, render_task_row, render_workspace
from console.live.snapshots import FRAGMENTS, run_snapshot
from recovery.models import RecoveryBreaker
from recovery.selectors import action_prefetch, attach_current_runs, awaiting_recovery, task_detail, tasks_with_state
from tasks.errors import NotFound
from tasks.models import Role, Run, Task
from tasks.selectors import membership_in

MESSAGE_EVENTS = frozenset(
    {
        "message_saved",
        "message_waiting",
        "messages_admitted",
        "messages_not_delivered",
        "messages_read",
        "messages_returned",
        "messages_requeued",
        "run_claimed",
        "run_cancelled",
        "run_stopped",
    }
)
# Events after which the task may be open or closed (a run that finishes its work closes it as done).
COMPOSER_EVENTS = frozenset({"task_closed", "task_reopened", "run_finished"})
# Events after which the files or the workspace's hold may differ (the panel reads the disk again).
QUIET_FOR_WORKSPACE = frozenset(
    {"step_planned", "step_dispatched", "run_claimed", "run_queued", "task_paused", "task_resumed"}
)


def parts_for(kinds: set[str]) -> set[str]:
    """Which parts of a task page an event batch changes, by the events' kinds.

    The header (state, budget) follows every change; step events touch only
    their run card; the follow-up composer is redrawn only when the task may close
    or reopen (a close, a reopen, a run that finished its work), and what is typed
    in it is carried into the new one (static/console/live.js).
    """
    parts = {"header"}
    if any(not k.startswith("step_") and not k.startswith("message") for k in kinds):
        parts.add("actions")
    # A waiting follow-up's reason is read from the facts now (a pause, a run's end, an action…): any change
    # but a step's checkpoint may change it.
    if kinds & MESSAGE_EVENTS or any(not k.startswith("step_") for k in kinds):
        parts.add("messages")
    if kinds & COMPOSER_EVENTS:
        parts.add("composer")
    if any(k not in QUIET_FOR_WORKSPACE and not k.startswith("message") for k in kinds):
        parts.add("workspace")
    return parts


@dataclass
class BoardRow:
    html: str
    private: bool
    creator_id: int | None
    org_id: int


def board_rows(task_ids: set[int], *, viewer, selectable: bool = False) -> dict[int, BoardRow]:
    """Rows of changed tasks, rendered once for every board of the organization that may (or may not) select:
    a row carries no other control, and its selection checkbox only for operators and admins."""
    tasks = list(
        tasks_with_state()
        .filter(pk__in=task_ids)
        .select_related("agent", "org")
        .prefetch_related(action_prefetch(live_only=True))
    )
    attach_current_runs(tasks)
    return {
        t.pk: BoardRow(
            render_task_row(t, user=viewer, oob=True, selectable=selectable), t.private, t.creator_id, t.org_id
        )
        for t in tasks
    }


def board_row_visible(row: BoardRow, user, role: str) -> bool:
    return not row.private or row.creator_id == user.pk or role == Role.ADMIN


def new_board_row(row: BoardRow) -> str:
    """A task the page has not seen goes on top of the list."""
    html = row.html.replace(' hx-swap-oob="true"', "", 1)
    return f'<tbody hx-swap-oob="afterbegin:#board-rows">{html}</tbody>'


# What a task that waits on a changed task may say differently (its gate, its "Waits on" line, a follow-up held
# by the dependency): it has no event of its own.
DEPENDENT_PARTS = frozenset({"header", "actions", "messages"})


def dependents_of(task_ids: set[int]) -> dict[int, int]:
    """{task: its organization} of the tasks that wait on any of `task_ids` (and are not among them): what they
    say (held by a dependency, the state of what they wait on) follows those tasks' events. One query."""
    if not task_ids:
        return {}
    through = Task.dependencies.through
    rows = through.objects.filter(to_task_id__in=task_ids).exclude(from_task_id__in=task_ids)
    return dict(rows.values_list("from_task_id", "from_task__org_id"))


def task_update(
    task_id: int, *, viewer, run_ids: set[int], new_run_ids: set[int], kinds: set[str], parts: frozenset | None = None
) -> str:
    """The parts of a task page that the events changed (or `parts`), for the viewer's role."""
    try:
        task = task_detail(viewer, task_id)
    except NotFound:
        return ""
    parts = parts if parts is not None else parts_for(kinds)
    # The runs with their steps: for the run cards the events touched, and for the recovery column's cards (a task
    # with no action draws its empty column without them: four queries fewer on most pushes).
    task_runs = task_runs_of(task_id) if (run_ids or new_run_ids or ("actions" in parts and task.action_list)) else None
    if task_runs is not None:
        # A continuation starting or ending changes what its source run's card says too.
        run_ids = run_ids | {task_runs[r].continues_id for r in run_ids if r in task_runs and task_runs[r].continues_id}
    out = [render_task_header(task, user=viewer, oob=True)]
    if "actions" in parts:
        out.append(render_actions(task, user=viewer, task_runs=task_runs, oob=True))
    if "messages" in parts:
        out.append(render_messages(task, user=viewer, oob=True))
    if "composer" in parts:
        out.append(render_composer(task, user=viewer, oob=True))
    if "workspace" in parts:
        out.append(render_workspace(task, user=viewer, oob=True))
    if task_runs is not None:
        for rid in sorted(run_ids - new_run_ids):
            if rid in task_runs:
                out.append(render_run_card(task_runs[rid], task_runs, user=viewer, oob=True))
        for rid in sorted(new_run_ids):
            if rid in task_runs:
                card = render_run_card(task_runs[rid], task_runs, user=viewer)
                # Before the chain's last line (its recovery line), which stays last.
                ctx = {"task_id": task_id, "card": mark_safe(card)}  # noqa: S308 — a rendered template
                out.append(render_to_string(f"{FRAGMENTS}#before_chain", ctx))
        if run_ids or new_run_ids:
            out.append(render_chain_recovery(task, task_runs, oob=True))
    return "".join(out)


def run_update(run_id: int, *, viewer) -> str:
    return run_snapshot(viewer, run_id)


def shared_update(render, viewer, *, org_id: int, role: str) -> str | None:
    """`render(viewer=viewer)` once for every socket of an audience (console.live.consumers: page, organization,
    role, and the viewer only on a private task): what a card shows depends on the viewer's role alone, except the
    viewer's own name, left as a stand-in each socket fills in (console.cards.actions.for_viewer).

    None when the renderer's role in the organization, as the render read it, is not the audience's (it changed
    since the socket's access check): such a render is nobody else's to receive. No query of its own when the
    render read the membership (every card does)."""
    with shared_render():
        html = render(viewer=viewer)
    m = membership_in(viewer, org_id)
    return html if m is not None and m.role == role else None


LEASE_STATUSES = ("running", "stopping")


@dataclass(frozen=True)
class Lease:
    """A running run's lease line as a page shows it: `key` changes with each heartbeat (a heartbeat appends no
    event, so the relay reads these on its re-check schedule and pushes the lines that moved)."""

    run_id: int
    key: tuple
    html: str


def leases_of(task_ids: set[int]) -> dict[int, list[Lease]]:
    """{task: the lease lines of its running or stopping runs}, from saved state, one query."""

    runs = Run.objects.filter(task_id__in=task_ids, status__in=LEASE_STATUSES).only(
        "id", "task_id", "status", "started_at", "last_heartbeat_at", "lease_expires_at"
    )
    out: dict[int, list[Lease]] = {t: [] for t in task_ids}
    for run in runs.order_by("id"):
        key = (run.status, run.started_at, run.last_heartbeat_at, run.lease_expires_at)
        html = render_to_string("console/run_ops.html#lease", {"run": run, "lease_oob": True})
        out[run.task_id].append(Lease(run.pk, key, html))
    return out


# --- recovery breakers (DESIGN §14) ------------------------------------------------------------

# A breaker's events name no task: every live page of its organization gets the header's warning again, and the
# board rows of the tasks its agent has waiting on recovery (held, or about to be continued) are drawn again.
BREAKER_EVENTS = frozenset({"breaker_opened", "breaker_half_open", "breaker_closed"})
BREAKER_ROWS = 200


def breaker_held_tasks(events) -> dict[int, int]:
    """{task: its organization} of the tasks awaiting recovery whose agent a breaker event names. One query."""
    ids = {e.payload.get("breaker") for e in events if e.kind in BREAKER_EVENTS}
    agents = RecoveryBreaker.objects.filter(pk__in=[i for i in ids if isinstance(i, int)]).values("agent_id")
    rows = awaiting_recovery().filter(task__agent_id__in=agents).values_list("task_id", "org_id")[:BREAKER_ROWS]
    return dict(rows)
