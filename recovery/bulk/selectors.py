"""Reads of bulk operations and the facts their items are judged on. Query counts do not grow with data.

An operation is visible to the members of its organization; its items (and the
counts shown) only for the tasks the reader may see, so a private task in
someone's scope stays as invisible as it is everywhere else.
"""

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count
from django.utils import timezone

from recovery.models import LIVE_ACTION_STATUSES, BulkItem, BulkOperation, BulkResult, RecoveryAction
from recovery.rules.breaker import BreakerFacts
from recovery.rules.bulk import ActionFacts, ItemFacts
from recovery.selectors import annotate_state, attach_current_runs, breaker_facts, breakers_in_force
from recovery.words.task import task_state
from tasks.errors import Invalid, NotFound
from tasks.holds import TaskFacts
from tasks.models import LEASED_RUN_STATUSES, Task
from tasks.selectors import memberships_of, visible_tasks

ANCESTOR_DEPTH = 32


def item_facts(task_ids: list[int], *, user=None, breakers: bool = True) -> dict[int, tuple[Task, ItemFacts]]:
    """The facts `rules.bulk.verdict` decides on, for up to a few hundred tasks in a fixed number of queries.

    Tasks with state, their live actions (with their source runs' leases), the latest runs, open
    dependencies, and the ancestors of those that have a parent (one query per level of nesting). Actions
    are read as plain rows, not prefetched instances, so nothing here forms a reference cycle: a chunk's
    memory is freed as soon as the chunk is done, whatever the size of the scope. With `user`, only the
    tasks that person may see are read (the others are simply absent). `breakers=False` skips the breakers in
    force (an item applied now: the service it calls refuses `breaker_open` itself, read in its transaction).
    """
    if not task_ids:
        return {}
    base = visible_tasks(user) if user is not None else Task.objects.all()
    tasks = list(annotate_state(base.filter(pk__in=task_ids)).select_related("agent"))
    attach_current_runs(tasks)
    # The breakers in force on these tasks' agents (a query per organization): their continuations are refused.
    in_force: dict[int, BreakerFacts] = {}
    for org_id in {t.org_id for t in tasks} if breakers else ():
        for b in breakers_in_force(org_id, {t.agent_id for t in tasks if t.org_id == org_id}):
            in_force.setdefault(b.agent_id, breaker_facts(b, b.agent.name))
    now = timezone.now()
    live: dict[int, list[ActionFacts]] = {}
    for row in (
        RecoveryAction.objects.filter(task_id__in=task_ids, status__in=LIVE_ACTION_STATUSES)
        .order_by("-id")
        .values_list(
            "task_id",
            "id",
            "kind",
            "status",
            "version",
            "cause",
            "original_owner__name",
            "attempts",
            "max_attempts",
            "run__status",
            "run__lease_expires_at",
            "exhaustion",
            "run__kind",
        )
    ):
        task_id, *facts, run_status, lease_expires_at, exhaustion, run_kind = row
        lease_live = run_status in LEASED_RUN_STATUSES and lease_expires_at is not None and lease_expires_at > now
        live.setdefault(task_id, []).append(
            ActionFacts(*facts, source_lease_live=lease_live, exhaustion=exhaustion, run_kind=run_kind or "plan")
        )
    deps: dict[int, list[int]] = {}
    for from_id, to_id in (
        Task.dependencies.through.objects.filter(from_task_id__in=task_ids)
        .exclude(to_task__status="done")
        .order_by("to_task_id")
        .values_list("from_task_id", "to_task_id")
    ):
        deps.setdefault(from_id, []).append(to_id)
    ancestors: dict[int, tuple[bool, int | None]] = {}
    frontier = {t.parent_id for t in tasks if t.parent_id}
    for _ in range(ANCESTOR_DEPTH):
        if not frontier:
            break
        rows = list(Task.objects.filter(pk__in=frontier).values_list("id", "paused", "parent_id"))
        for pk, paused, parent in rows:
            ancestors[pk] = (paused, parent)
        frontier = {parent for _, _, parent in rows if parent and parent not in ancestors}
    out = {}
    for task in tasks:
        paused_ancestors, seen, parent = [], {task.pk}, task.parent_id
        while parent and parent not in seen and parent in ancestors:
            seen.add(parent)
            paused, nxt = ancestors[parent]
            if paused:
                paused_ancestors.append(parent)
            parent = nxt
        current = task.current_run
        actions = tuple(live.get(task.pk, ()))
        facts = ItemFacts(
            task=TaskFacts(
                task_id=task.pk,
                status=task.status,
                paused=task.paused,
                budget_limit=task.budget_limit,
                budget_used=task.budget_used,
                paused_ancestors=tuple(paused_ancestors),
                open_dependencies=tuple(deps.get(task.pk, ())),
            ),
            state=task_state(task, current, actions),
            owner=task.agent.name,
            run_id=current.pk if current else None,
            run_status=current.status if current else "",
            actions=actions,
            breaker=in_force.get(task.agent_id),
        )
        out[task.pk] = (task, facts)
    return out


# --- operations ----------------------------------------------------------------------------


def visible_operations(user):
    orgs = [m.org_id for m in memberships_of(user)]
    return BulkOperation.objects.filter(org_id__in=orgs)


def operation(user, op_id: int) -> BulkOperation:
    op = visible_operations(user).filter(pk=op_id).first()
    if op is None:
        raise NotFound(f"No bulk operation #{op_id}.")
    return op


def visible_items(user, op_ids):
    return BulkItem.objects.filter(op_id__in=op_ids, task__in=visible_tasks(user))


@dataclass(frozen=True)
class Counts:
    total: int = 0
    applied: int = 0
    skipped: int = 0
    failed: int = 0
    # Of the skipped: not reached because the operation was cancelled (untouched, not judged).
    untouched: int = 0

    @property
    def done(self) -> int:
        return self.applied + self.skipped + self.failed

    @property
    def pending(self) -> int:
        return self.total - self.done

    @property
    def reached(self) -> int:
        """Judged and acted on or refused (a task the cancel skipped was never reached)."""
        return self.done - self.untouched

    def as_dict(self) -> dict:
        return {
            "total": self.total,
            "applied": self.applied,
            "skipped": self.skipped,
            "failed": self.failed,
            "pending": self.pending,
            "untouched": self.untouched,
        }


def counts_of(user, op_ids) -> dict[int, Counts]:
    """Op id → what happened to the items the reader may see (one grouped query)."""
    rows = visible_items(user, list(op_ids)).order_by().values_list("op_id", "result", "reason").annotate(n=Count("id"))
    tally: dict[int, Counter] = {}
    for op_id, result, reason, n in rows:
        t = tally.setdefault(op_id, Counter())
        t[result] += n
        if result == BulkResult.SKIPPED and reason == "cancelled":
            t["untouched"] += n
    out = {}
    for op_id in op_ids:
        t = tally.get(op_id, Counter())
        out[op_id] = Counts(
            total=t[BulkResult.PENDING] + t[BulkResult.APPLIED] + t[BulkResult.SKIPPED] + t[BulkResult.FAILED],
            applied=t[BulkResult.APPLIED],
            skipped=t[BulkResult.SKIPPED],
            failed=t[BulkResult.FAILED],
            untouched=t["untouched"],
        )
    return out


def history_page(user, *, cursor=None, limit: int = 50):
    """The organization's bulk operations, newest first (keyset on id), with their counts."""
    qs = visible_operations(user).order_by("-id")
    if cursor is not None:
        try:
            qs = qs.filter(pk__lt=int(cursor))
        except (TypeError, ValueError) as exc:
            raise Invalid("That page cursor is not valid.", field="cursor") from exc
    ops = list(qs[: limit + 1])
    more = len(ops) > limit
    ops = ops[:limit]
    counts = counts_of(user, [o.pk for o in ops])
    return [(o, counts[o.pk]) for o in ops], (ops[-1].pk if more and ops else None)


RESULT_FILTERS = {"applied": BulkResult.APPLIED, "skipped": BulkResult.SKIPPED, "failed": BulkResult.FAILED}
PENDING = "pending"


def ledger(user, op: BulkOperation, *, result: str = "", after=None, limit: int = 100):
    """One page of an operation's items the reader may see, in scope order, and the cursor of the next."""
    qs = visible_items(user, [op.pk]).select_related("task")
    if result == PENDING:
        qs = qs.filter(result=BulkResult.PENDING)
    elif result in RESULT_FILTERS:
        qs = qs.filter(result=RESULT_FILTERS[result])
    if after is not None:
        try:
            qs = qs.filter(position__gt=int(after))
        except (TypeError, ValueError) as exc:
            raise Invalid("That page cursor is not valid.", field="after") from exc
    items = list(qs.order_by("position")[: limit + 1])
    more = len(items) > limit
    items = items[:limit]
    return items, (items[-1].position if more and items else None)


def expired(op: BulkOperation, now: datetime | None = None) -> bool:
    return op.status == "previewed" and op.expires_at <= (now or timezone.now())
