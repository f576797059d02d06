"""What a live page receives: out-of-band fragments rendered from saved state.

Synchronous and ORM-backed; the relay and the consumer call these in a thread.
Every fragment is the same partial the page itself uses, so a pushed update and
a reload draw the same HTML.
"""

from dataclasses import dataclass
from datetime import datetime
from importlib import import_module

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model, load_backend
from django.core.exceptions import ValidationError
from django.template.loader import render_to_string
from django.utils.crypto import constant_time_compare
from django.utils.safestring import mark_safe

from console import bulk_views, cards, triage_views
from recovery.bulk.selectors import operation
from recovery.models import BulkOperation
from recovery.selectors import action_prefetch, annotate_state, attach_current_runs, task_detail
from recovery.triage.board import board_page
from recovery.triage.filters import board_filter
from tasks.errors import NotFound
from tasks.models import Event, Role, Run, Task
from tasks.selectors import membership_in, memberships_of, primary_membership, task_visible_to, visible_runs

RECONNECT_NOTICE = (
    "Live updates reconnected — this page now shows saved state. Reconnecting does not restart the agent."
)


FRAGMENTS = "console/live/fragments.html"


def cursor_fragment(event_id: int) -> str:
    return render_to_string(f"{FRAGMENTS}#cursor", {"event_id": int(event_id)})


def notice_fragment() -> str:
    return render_to_string(f"{FRAGMENTS}#notice", {"text": RECONNECT_NOTICE})


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


# --- access --------------------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    ok: bool
    org_id: int | None = None
    role: str | None = None
    task_id: int | None = None
    private: bool = False


def forget_memberships(user):
    """Drop cached memberships, so a role change or removal is seen."""
    user.__dict__.pop("_console_memberships", None)
    return user


@dataclass(frozen=True)
class SessionState:
    valid: bool
    expires_at: datetime | None = None


def session_user(session_key: str | None):
    """(the user `session_key` signs in, SessionState), or (None, invalid): the session exists (not signed out),
    has not expired, names an active user of a configured backend and carries that user's current password hash
    (a password change ends every other session). Two queries: the session row, the user row."""

    if not session_key:
        return None, SessionState(False)
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    data = store.load()  # {} and no key when the session is missing or expired
    backend_path = data.get(BACKEND_SESSION_KEY)
    if store.session_key is None or backend_path not in settings.AUTHENTICATION_BACKENDS:
        return None, SessionState(False)
    try:
        user_id = get_user_model()._meta.pk.to_python(data.get(SESSION_KEY))
    except ValidationError:
        return None, SessionState(False)
    get_user = getattr(load_backend(backend_path), "get_user", None)
    user = get_user(user_id) if get_user is not None and user_id is not None else None
    stored = data.get(HASH_SESSION_KEY) or ""
    if user is None or not user.is_active or not constant_time_compare(stored, user.get_session_auth_hash()):
        return None, SessionState(False)
    # The expiry from the data just read (get_expiry_date alone would load the session a second time).
    return user, SessionState(True, store.get_expiry_date(expiry=data.get("_session_expiry")))


def session_state(session_key: str | None, user) -> SessionState:
    """Whether the session a socket was opened with still signs `user` in (session_user)."""
    if not getattr(user, "is_authenticated", False):
        return SessionState(False)
    current, state = session_user(session_key)
    return state if current is not None and current.pk == user.pk else SessionState(False)


@dataclass(frozen=True)
class Admission:
    """What a socket learns at connect in one trip to the database thread: who signs in and what they may see.
    `user` is None when the session signs no one in (4401); `access.ok` is False when they may not watch (4403)."""

    user: object | None
    session: SessionState
    access: Access
    orgs: list[int]


def admit(session_key: str | None, page: str, obj_id: int | None) -> Admission:
    """A connecting socket's session, access and navigation organizations, read together: a burst of sockets
    queues its reads on the one database thread, so each socket goes there once."""
    user, session = session_user(session_key)
    if user is None:
        return Admission(None, session, Access(False), [])
    access = check_access(user, page, obj_id)
    return Admission(user, session, access, nav_orgs(user) if access.ok else [])


def check_access(user, page: str, obj_id: int | None) -> Access:
    forget_memberships(user)
    if page == "workers":
        return Access(bool(memberships_of(user)))
    if page in ("board", "inbox"):
        m = primary_membership(user)
        return Access(True, m.org_id, m.role) if m else Access(False)
    if page == "bulk":
        op = BulkOperation.objects.filter(pk=obj_id).only("id", "org_id").first()
        m = membership_in(user, op.org_id) if op is not None else None
        return Access(True, op.org_id, m.role) if m else Access(False)
    if page == "task":
        task = Task.objects.filter(pk=obj_id).only("id", "org_id", "private", "creator_id").first()
        if task is None or not task_visible_to(user, task):
            return Access(False)
        return Access(True, task.org_id, membership_in(user, task.org_id).role, task.pk, task.private)
    if page == "run":
        run = visible_runs(user).filter(pk=obj_id).select_related("task").first()
        if run is None:
            return Access(False)
        return Access(True, run.org_id, membership_in(user, run.org_id).role, run.task_id, run.task.private)
    return Access(False)


# --- snapshots (connect, reconnect) --------------------------------------------------


def board_snapshot(user, *, filters: dict, selectable: bool = False) -> str:
    """The board's rows for its parameters (tab, search, agent, owner, tool, age, order), from saved state."""
    tab, f = board_filter(filters)
    tasks, _ = board_page(user, f, limit=50)
    # Each row is a rendered template (cards/task_row.html); the empty sentence is the board page's own.
    rows = mark_safe("".join(cards.render_task_row(t, user=user, selectable=selectable) for t in tasks))  # noqa: S308
    return render_to_string(f"{FRAGMENTS}#board_rows", {"rows": rows, "tab": tab, "q": f.q})


def can_select(role: str | None) -> bool:
    """Board rows carry selection checkboxes for those who may act on them (operators, admins)."""
    return role in (Role.OPERATOR, Role.ADMIN)


def inbox_snapshot(user) -> str:
    """The inbox list and the navigation's count, from saved state."""

    return triage_views.render_inbox_list(user, oob=True) + triage_views.render_nav_count(user)


def nav_count(user) -> str:

    return triage_views.render_nav_count(user)


def bulk_snapshot(user, op_id: int, filters: dict) -> str:
    """A bulk operation's progress and the ledger page the viewer has open, from saved state."""

    try:
        op = operation(user, op_id)
    except NotFound:
        return ""
    result, pos = bulk_views.ledger_args(filters)
    return bulk_views.render_status(op, user, oob=True) + bulk_views.render_ledger(
        op, user, result=result, pos=pos, oob=True
    )


# Event kinds after which what waits on a person (the inbox, its count) may differ.
INBOX_EVENTS = frozenset({"member_set", "member_removed", "task_closed", "task_reopened", "task_reassigned"})


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
    task_runs = cards.task_runs_of(task.pk)
    return (
        cards.render_task_header(task, user=user, oob=True)
        + cards.render_actions(task, user=user, task_runs=task_runs, oob=True)
        + cards.render_messages(task, user=user, oob=True)
        + cards.render_composer(task, user=user, oob=True)
        + cards.render_chain(task, task_runs, user=user, oob=True)
        + cards.render_workspace(task, user=user, oob=True)
    )


def run_snapshot(user, run_id: int) -> str:
    run = Run.objects.filter(pk=run_id).only("task_id").first()
    if run is None:
        return ""
    task_runs = cards.task_runs_of(run.task_id)
    run = task_runs[run_id]
    return (
        cards.render_run_card(run, task_runs, user=user, oob=True, conversation=True)
        + cards.render_conversation(run, task_runs, oob=True)
        + cards.render_run_repair(run, user=user, oob=True)
        + cards.render_run_page_parts(run, task_runs, user=user, oob=True)
    )


# --- updates (from the relay) --------------------------------------------------------


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
        annotate_state(Task.objects.filter(pk__in=task_ids))
        .select_related("agent")
        .prefetch_related(action_prefetch(live_only=True))
    )
    attach_current_runs(tasks)
    return {
        t.pk: BoardRow(
            cards.render_task_row(t, user=viewer, oob=True, selectable=selectable), t.private, t.creator_id, t.org_id
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
    task_runs = cards.task_runs_of(task_id) if (run_ids or new_run_ids or "actions" in parts) else None
    if task_runs is not None:
        # A continuation starting or ending changes what its source run's card says too.
        run_ids = run_ids | {task_runs[r].continues_id for r in run_ids if r in task_runs and task_runs[r].continues_id}
    out = [cards.render_task_header(task, user=viewer, oob=True)]
    if "actions" in parts:
        out.append(cards.render_actions(task, user=viewer, task_runs=task_runs, oob=True))
    if "messages" in parts:
        out.append(cards.render_messages(task, user=viewer, oob=True))
    if "composer" in parts:
        out.append(cards.render_composer(task, user=viewer, oob=True))
    if "workspace" in parts:
        out.append(cards.render_workspace(task, user=viewer, oob=True))
    if task_runs is not None:
        for rid in sorted(run_ids - new_run_ids):
            if rid in task_runs:
                out.append(cards.render_run_card(task_runs[rid], task_runs, user=viewer, oob=True))
        for rid in sorted(new_run_ids):
            if rid in task_runs:
                card = cards.render_run_card(task_runs[rid], task_runs, user=viewer)
                # Before the chain's last line (its recovery line), which stays last.
                ctx = {"task_id": task_id, "card": mark_safe(card)}  # noqa: S308 — a rendered template
                out.append(render_to_string(f"{FRAGMENTS}#before_chain", ctx))
        if run_ids or new_run_ids:
            out.append(cards.render_chain_recovery(task, task_runs, oob=True))
    return "".join(out)


def run_update(run_id: int, *, viewer) -> str:
    return run_snapshot(viewer, run_id)


# --- leases (no event: read on the relay's schedule) -------------------------------------------

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


def nav_orgs(user) -> list[int]:
    return [m.org_id for m in memberships_of(user)]
