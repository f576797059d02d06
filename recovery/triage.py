"""Triage at scale (DESIGN §12): the board's filters and sort orders, the inbox, and saved views.

Reads for pages, the API and bulk previews; their query counts do not grow
with data. The filter a board lists is the filter a bulk preview resolves
(`matching_ids`), so "select all N matching this filter" acts on exactly the
tasks the board counted, never on a page of them.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Case, Exists, F, IntegerField, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from recovery.models import ActionStatus, RecoveryAction, SavedView
from recovery.selectors import action_prefetch, attach_current_runs, task_queryset
from tasks.authz import require_role
from tasks.errors import Invalid, NotFound
from tasks.models import Agent, Role
from tasks.selectors import memberships_of, visible_via

# The states a filter may name: the API's vocabulary, plus `active` (the board's Running tab: running or stopping).
STATES = (
    "all",
    "needs_decision",
    "exhausted",
    "blocked",
    "running",
    "active",
    "stopping",
    "queued",
    "idle",
    "follow_through",
    "done",
    "cancelled",
)
# "Waiting longer than": the moment a task's wait began is its oldest open or exhausted recovery action's
# opening, or else its last change.
AGES = {"1h": timedelta(hours=1), "4h": timedelta(hours=4), "1d": timedelta(days=1), "1w": timedelta(weeks=1)}
SORTS = ("recent", "urgency")
WAITING = (ActionStatus.OPEN, ActionStatus.EXHAUSTED)
OPTIONS_SAMPLE = 500
CLOSED = ("done", "cancelled")
MAX_Q = 200


def text_ok(value: str) -> bool:
    """Text a database can store: no NUL byte, no lone surrogate."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class BoardFilter:
    """What the board lists: a state, a search, an agent, a recovery owner, a tool, an age; and its order."""

    state: str = "all"
    q: str = ""
    agent: str = ""
    owner: str = ""
    tool: str = ""
    age: str = ""
    sort: str = "recent"

    @classmethod
    def parse(cls, data: Mapping, *, strict: bool = False) -> "BoardFilter":
        """From query parameters or an API body. `strict` refuses a bad value (API); otherwise it is dropped."""
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise Invalid("`filter` must be an object.", field="filter")
        values = {}
        limits = {"q": MAX_Q, "agent": 100, "owner": 150, "tool": 100}
        for f in fields(cls):
            raw = data.get(f.name)
            if raw in (None, ""):
                continue
            if not isinstance(raw, str) or not text_ok(raw):
                if strict:
                    raise Invalid(f"`{f.name}` must be a string.", field=f.name)
                continue
            value = raw.strip()
            ok = {
                "state": value in STATES,
                "age": value in AGES,
                "sort": value in SORTS,
            }.get(f.name, len(value) <= limits.get(f.name, 0))
            if not ok:
                if strict:
                    raise Invalid(f"`{f.name}` is not a value the board knows.", field=f.name)
                continue
            values[f.name] = value
        return cls(**values)

    def params(self) -> dict:
        """The non-default values, as query parameters (saved views, links, the bulk form)."""
        default = BoardFilter()
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)
        }

    @property
    def narrowed(self) -> bool:
        """Anything beyond the state: a new task may not belong to such a list."""
        return bool(self.q or self.agent or self.owner or self.tool or self.age)

    def with_sort(self, sort: str) -> "BoardFilter":
        return replace(self, sort=sort)


# The board's tabs, by the key its URL carries; the Running tab lists running and stopping.
BOARD_TABS = ("needs_decision", "exhausted", "blocked", "running", "follow_through", "all")
BOARD_PARAMS = ("state", "q", "agent", "owner", "tool", "age", "sort")


def board_filter(params: Mapping) -> tuple[str, BoardFilter]:
    """(the tab, the filter it lists) from the board's URL parameters; unknown values are dropped."""
    tab = params.get("state") or "all"
    if tab not in BOARD_TABS:
        tab = "all"
    values = {k: params.get(k) for k in BOARD_PARAMS if k != "state"}
    return tab, BoardFilter.parse({**values, "state": "active" if tab == "running" else tab})


def page_params(tab: str, f: BoardFilter) -> dict:
    """The board's URL parameters for this tab and filter (the tab's key, not the filter's state)."""
    params = {k: v for k, v in f.params().items() if k != "state"}
    return {"state": tab, **params} if tab != "all" else params


# --- the board ------------------------------------------------------------------------


def _waiting_since():
    waiting = (
        RecoveryAction.objects.filter(task=OuterRef("pk"), status__in=WAITING)
        .order_by("created_at")
        .values("created_at")
    )
    return Coalesce(Subquery(waiting[:1]), F("updated_at"))


def _urgency():
    """The SQL twin of the urgency order (recovery/words/task.py): what waits on a person first, closed tasks last.

    The cases follow the order of `state_filter` / `recovery.words.task.task_state`, so each task ranks by its state.
    """
    blocked = (
        Q(paused=True) | Q(budget_limit__isnull=False, budget_used__gte=F("budget_limit")) | Q(has_open_dependency=True)
    )
    return Case(
        When(status__in=CLOSED, then=Value(8)),
        When(has_exhausted=True, then=Value(0)),
        When(has_open=True, then=Value(1)),
        When(current_run_status="stopping", then=Value(5)),
        When(current_run_status="running", then=Value(7)),
        When(blocked, then=Value(2)),
        When(current_run_status="queued", then=Value(6)),
        default=Value(3),  # idle: nothing is scheduled, someone should look
        output_field=IntegerField(),
    )


def _owned_by(owner: str) -> Q:
    # Operators own what names no owner (the inbox reads it the same way).
    if owner == "role:operator":
        return Q(recovery_owner__in=("role:operator", ""))
    return Q(recovery_owner=owner)


def board_queryset(user, f: BoardFilter, *, org_id: int | None = None):
    """Visible tasks matching `f`, annotated with state, `waiting_since` and `urgency` (unordered)."""
    qs = task_queryset(user, state=f.state, q=f.q)
    if org_id is not None:
        qs = qs.filter(org_id=org_id)
    if f.agent:
        qs = qs.filter(agent__name=f.agent)
    waiting = RecoveryAction.objects.filter(task=OuterRef("pk"), status__in=WAITING)
    if f.owner:
        qs = qs.filter(Exists(waiting.filter(_owned_by(f.owner))))
    if f.tool:
        qs = qs.filter(Exists(waiting.filter(evidence__tool=f.tool)))
    qs = qs.annotate(waiting_since=_waiting_since())
    if f.age:
        qs = qs.filter(waiting_since__lte=timezone.now() - AGES[f.age])
    return qs


def _cursor_error() -> Invalid:
    return Invalid("That page cursor is not valid.", field="cursor")


def board_page(user, f: BoardFilter, *, cursor: str | None = None, limit: int = 50):
    """One page of the board and the cursor of the next (keyset, no OFFSET).

    sort "recent": most recently changed first, cursor "<updated_at>_<id>".
    sort "urgency": exhausted, needs decision, blocked, idle, then stopping, queued, running, closed; longest
    waiting first within each; cursor "<rank>~<waiting_since>~<id>".
    """
    qs = board_queryset(user, f).select_related("agent")
    if f.sort == "urgency":
        qs = qs.annotate(urgency=_urgency())
        if cursor:
            try:
                rank, stamp, last = str(cursor).split("~")
                rank, when, last = int(rank), datetime.fromisoformat(stamp), int(last)
            except ValueError as exc:
                raise _cursor_error() from exc
            qs = qs.filter(
                Q(urgency__gt=rank)
                | Q(urgency=rank, waiting_since__gt=when)
                | Q(urgency=rank, waiting_since=when, pk__gt=last)
            )
        qs = qs.order_by("urgency", "waiting_since", "id")
    else:
        if cursor:
            stamp, _, last_id = str(cursor).rpartition("_")
            try:
                when, last = datetime.fromisoformat(stamp), int(last_id)
            except ValueError as exc:
                raise _cursor_error() from exc
            qs = qs.filter(Q(updated_at__lt=when) | Q(updated_at=when, pk__lt=last))
        qs = qs.order_by("-updated_at", "-id")
    tasks = list(qs.prefetch_related(action_prefetch(live_only=True))[: limit + 1])
    more = len(tasks) > limit
    tasks = tasks[:limit]
    attach_current_runs(tasks)
    if not (more and tasks):
        return tasks, None
    last = tasks[-1]
    if f.sort == "urgency":
        return tasks, f"{last.urgency}~{last.waiting_since.isoformat()}~{last.pk}"
    return tasks, f"{last.updated_at.isoformat()}_{last.pk}"


def board_count(user, f: BoardFilter, *, cap: int = 10_000) -> int:
    """How many tasks match, counting at most cap + 1 rows (never an unbounded COUNT(*))."""
    return board_queryset(user, f).order_by().values("pk")[: cap + 1].count()


def matching_ids(user, f: BoardFilter, *, org_id: int, chunk: int = 1000) -> Iterator[list[int]]:
    """Every id matching `f` in `org_id`, in id order, a chunk at a time (memory stays bounded for any N)."""
    last = 0
    while True:
        ids = list(
            board_queryset(user, f, org_id=org_id)
            .filter(pk__gt=last)
            .order_by("pk")
            .values_list("pk", flat=True)[:chunk]
        )
        if not ids:
            return
        yield ids
        last = ids[-1]
        if len(ids) < chunk:
            return


@dataclass(frozen=True)
class FilterOptions:
    agents: list[str]
    owners: list[str]  # recovery owners of waiting actions: "role:operator", "role:admin", "user:ada", …
    tools: list[str]  # tools named by waiting actions (the operation of unknown outcome)


def filter_options(user, org_id: int) -> FilterOptions:
    """What the filter menus offer: the organization's agents, the owners and tools of what waits now (2 queries)."""
    agents = list(Agent.objects.filter(org_id=org_id).order_by("name").values_list("name", flat=True)[:500])
    # The menus are drawn from the newest OPTIONS_SAMPLE waiting actions, so the board's cost does not grow
    # with everything that waits (a rarer value still filters when it is in the URL).
    recent = (
        RecoveryAction.objects.filter(visible_via(user), org_id=org_id, status__in=WAITING)
        .order_by("-id")
        .values("pk")[:OPTIONS_SAMPLE]
    )
    pairs = (
        RecoveryAction.objects.filter(pk__in=Subquery(recent))
        .values_list("recovery_owner", "evidence__tool")
        .order_by()
        .distinct()[:1000]
    )
    owners, tools = set(), set()
    for owner, tool in pairs:
        owners.add(owner or "role:operator")
        if isinstance(tool, str) and tool:
            tools.add(tool)
    return FilterOptions(agents=agents, owners=sorted(owners), tools=sorted(tools))


# --- the inbox ---------------------------------------------------------------------------


def _inbox_q(user) -> Q:
    """What waits on this person: their own actions, and what their role owns, in each of their organizations."""
    owners = Q(pk__in=[])
    for m in memberships_of(user):
        mine = Q(recovery_owner=f"user:{user.username}")
        if m.allows(Role.OPERATOR):
            mine |= Q(recovery_owner="role:operator") | Q(recovery_owner="")
        if m.allows(Role.ADMIN):
            mine |= Q(recovery_owner="role:admin")
        owners |= Q(org_id=m.org_id) & mine
    return owners


def _inbox_queryset(user):
    return RecoveryAction.objects.filter(_inbox_q(user), visible_via(user), status__in=WAITING)


INBOX_LIMIT = 200


def inbox_actions(user, *, limit: int = INBOX_LIMIT) -> list[RecoveryAction]:
    """Open and exhausted actions that wait on the person, exhausted first, then by due time."""
    return list(
        _inbox_queryset(user)
        .select_related("task")
        .annotate(rank=Case(When(status=ActionStatus.EXHAUSTED, then=0), default=1))
        .order_by("rank", "due_at", "id")[:limit]
    )


def inbox_count(user, *, cap: int = 99) -> int:
    """The navigation's count (one query, at most cap + 1 rows read)."""
    if not memberships_of(user):
        return 0
    return _inbox_queryset(user).order_by().values("pk")[: cap + 1].count()


# --- saved views ---------------------------------------------------------------------------

MAX_VIEWS = 50
MAX_VIEW_NAME = 80


def saved_views(user, org_id: int) -> list[SavedView]:
    return list(SavedView.objects.filter(user=user, org_id=org_id).order_by("name", "id")[:MAX_VIEWS])


@transaction.atomic
def view_save(*, user, org_id: int, name: str, params: Mapping) -> SavedView:
    """Save the board's current filter under a name, for this person only; the same name is replaced.

    Any member may (a view only changes what its owner's board lists). Values the
    board does not know are dropped, as the board drops them.
    """
    require_role(user, org_id, Role.VIEWER)
    name = " ".join(name.split()) if isinstance(name, str) else ""
    if not name:
        raise Invalid("Give the view a name.", field="name")
    if len(name) > MAX_VIEW_NAME or not text_ok(name):
        raise Invalid(f"A view's name holds at most {MAX_VIEW_NAME} characters.", field="name")
    values = BoardFilter.parse(params if isinstance(params, Mapping) else {}).params()
    existing = SavedView.objects.select_for_update().filter(user=user, org_id=org_id, name=name).first()
    if existing is not None:
        SavedView.objects.filter(pk=existing.pk).update(params=values, updated_at=timezone.now())
        existing.refresh_from_db()
        return existing
    if SavedView.objects.filter(user=user, org_id=org_id).count() >= MAX_VIEWS:
        raise Invalid(f"You have {MAX_VIEWS} saved views, the most one person may: delete one first.", field="name")
    return SavedView.objects.create(user=user, org_id=org_id, name=name, params=values)


@transaction.atomic
def view_delete(*, user, view_id: int) -> None:
    """Delete one of the person's own views; anyone else's is 404, like one that does not exist."""
    deleted, _ = SavedView.objects.filter(pk=view_id, user=user).delete()
    if not deleted:
        raise NotFound(f"No saved view #{view_id}.")
