"""The board's reads: its page (keyset by last change or urgency), its count, the ids a bulk preview resolves
(`matching_ids`, the same filter the board counted), and the options its filters offer."""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Case, Exists, F, IntegerField, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from recovery.models import RecoveryAction
from recovery.selectors import action_prefetch, attach_current_runs, task_queryset
from recovery.triage.filters import AGES, CLOSED, OPTIONS_SAMPLE, WAITING, BoardFilter
from tasks.errors import Invalid
from tasks.models import Agent
from tasks.selectors import visible_via


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


def board_page(user, f: BoardFilter, *, cursor: str | None = None, limit: int = 50, matching=None):
    """One page of the board and the cursor of the next (keyset, no OFFSET).

    sort "recent": most recently changed first, cursor "<updated_at>_<id>".
    sort "urgency": exhausted, needs decision, blocked, idle, then stopping, queued, running, closed; longest
    waiting first within each; cursor "<rank>~<waiting_since>~<id>".
    `matching`: `board_queryset(user, f)` when the caller built it already (the board counts the same one).
    """
    matching = board_queryset(user, f) if matching is None else matching
    qs = matching.select_related("agent", "org")  # its org: the decision deadline, no query
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


def board_count(user, f: BoardFilter, *, cap: int = 10_000, matching=None) -> int:
    """How many tasks match, counting at most cap + 1 rows (never an unbounded COUNT(*)).

    `matching`: `board_queryset(user, f)` when the caller built it already: the board builds its filtered,
    annotated queryset once for its page and its count (building one is several milliseconds of Python).
    """
    matching = board_queryset(user, f) if matching is None else matching
    return matching.order_by().values("pk")[: cap + 1].count()


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
