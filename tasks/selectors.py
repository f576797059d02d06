"""Reads shared by pages and the API. Organization and privacy boundaries live here."""

from django.db.models import Q, QuerySet

from tasks.holds import TaskFacts
from tasks.models import Event, Membership, Role, Run, RunStatus, Task, TaskStatus, Worker


def memberships_of(user) -> list[Membership]:
    """The user's memberships, read once per user object (a request's); `memberships_forget` reads them again."""
    if user is None or not getattr(user, "is_authenticated", False) or isinstance(user, Worker):
        return []
    cached = getattr(user, "_console_memberships", None)
    if cached is None:
        cached = list(Membership.objects.filter(user=user).select_related("org").order_by("id"))
        user._console_memberships = cached
    return cached


def memberships_forget(user) -> None:
    """The next role or visibility check reads the user's memberships from the database again: a long operation
    acting for a person (a bulk operation, item after item) sees a role lost midway at its next step."""
    if user is not None:
        user.__dict__.pop("_console_memberships", None)


def membership_in(user, org_id: int) -> Membership | None:
    return next((m for m in memberships_of(user) if m.org_id == org_id), None)


def primary_membership(user) -> Membership | None:
    ms = memberships_of(user)
    return ms[0] if ms else None


def visible_tasks(user) -> QuerySet[Task]:
    """Tasks of the user's organizations; a private task only for its creator and the org's admins."""
    q = visible_tasks_q(user)
    return Task.objects.none() if q is None else Task.objects.filter(q)


def visible_tasks_q(user) -> Q | None:
    """visible_tasks as a condition on Task (None: the user sees no task at all)."""
    ms = memberships_of(user)
    if not ms:
        return None
    orgs = [m.org_id for m in ms]
    admin_orgs = [m.org_id for m in ms if m.role == Role.ADMIN]
    return Q(org_id__in=orgs) & (Q(private=False) | Q(creator_id=user.pk) | Q(org_id__in=admin_orgs))


def visible_via(user, via: str = "task") -> Q:
    """The `visible_tasks` condition for rows that carry their own `org_id` and point at their task (`via`).

    A join, not `task__in=visible_tasks(...)`: the planner can then lead with an index on the row's own
    columns (SQLite otherwise walks every task of the organization and probes for its rows).
    """
    ms = memberships_of(user)
    if not ms:
        return Q(pk__in=[])
    orgs = [m.org_id for m in ms]
    admin_orgs = [m.org_id for m in ms if m.role == Role.ADMIN]
    return Q(org_id__in=orgs) & (
        Q(**{f"{via}__private": False}) | Q(**{f"{via}__creator_id": user.pk}) | Q(org_id__in=admin_orgs)
    )


def task_visible_to(user, task: Task) -> bool:
    m = membership_in(user, task.org_id)
    if m is None:
        return False
    return not task.private or task.creator_id == user.pk or m.role == Role.ADMIN


def visible_runs(user) -> QuerySet[Run]:
    return Run.objects.filter(task__in=visible_tasks(user))


def visible_events(user) -> QuerySet[Event]:
    ms = memberships_of(user)
    if not ms:
        return Event.objects.none()
    return Event.objects.filter(
        Q(task__isnull=True, org_id__in=[m.org_id for m in ms]) | Q(task__in=visible_tasks(user))
    )


def task_facts(task: Task) -> TaskFacts:
    """The facts the holds decide on (a few queries, independent of history size)."""
    paused_ancestors = []
    seen = {task.pk}
    parent_id = task.parent_id
    while parent_id and parent_id not in seen:
        seen.add(parent_id)
        parent = Task.objects.filter(pk=parent_id).values("id", "paused", "parent_id").first()
        if parent is None:
            break
        if parent["paused"]:
            paused_ancestors.append(parent["id"])
        parent_id = parent["parent_id"]
    open_deps = tuple(
        Task.dependencies.through.objects.filter(from_task_id=task.pk)
        .exclude(to_task__status=TaskStatus.DONE)
        .order_by("to_task_id")
        .values_list("to_task_id", flat=True)
    )
    return TaskFacts(
        task_id=task.pk,
        status=task.status,
        paused=task.paused,
        budget_limit=task.budget_limit,
        budget_used=task.budget_used,
        paused_ancestors=tuple(paused_ancestors),
        open_dependencies=open_deps,
    )


# A walk guard only: a chain is bounded by the runs that count (verified stops do not), so it may hold more.
CHAIN_LIMIT = 100_000


def chain_runs(run: Run, runs_by_id: dict[int, Run] | None = None) -> list[tuple[int, str]]:
    """(id, status) of each run of the chain ending at `run`, oldest first.

    With `runs_by_id` (the task's runs) it reads nothing; otherwise one query
    (the task's runs, by id), whatever the length of the chain.
    """
    if run.continues_id is None:
        return [(run.pk, run.status)]
    if runs_by_id is None:
        links = {
            pk: (continues_id, status)
            for pk, continues_id, status in Run.objects.filter(task_id=run.task_id).values_list(
                "pk", "continues_id", "status"
            )
        }
    else:
        links = {pk: (r.continues_id, r.status) for pk, r in runs_by_id.items()}
    out = [(run.pk, run.status)]
    prev = run.continues_id
    while prev is not None and len(out) < CHAIN_LIMIT:
        link = links.get(prev)
        if link is None:
            break
        out.append((prev, link[1]))
        prev = link[0]
    return list(reversed(out))


def counted_runs(chain: list[tuple[int, str]]) -> int:
    """How many runs of a chain count toward its bound: a verified stop (a stop with a receipt: a person's
    Stop, a pause, the budget, closing) is not an interruption and counts against no bound."""
    return sum(1 for _, status in chain if status != RunStatus.STOPPED)


def org_admin_names(org_id: int, limit: int = 5) -> list[str]:
    """Who can change a person's role or act for them: the organization's admins, by name."""
    return list(
        Membership.objects.filter(org_id=org_id, role=Role.ADMIN)
        .order_by("user__username")
        .values_list("user__username", flat=True)[:limit]
    )
