"""Reads shared by pages and the API. Organization and privacy boundaries live here."""

from django.db.models import Q, QuerySet

from tasks.models import Event, Membership, Role, Run, Task, Worker


def memberships_of(user) -> list[Membership]:
    if user is None or not getattr(user, "is_authenticated", False) or isinstance(user, Worker):
        return []
    cached = getattr(user, "_console_memberships", None)
    if cached is None:
        cached = list(Membership.objects.filter(user=user).select_related("org").order_by("id"))
        user._console_memberships = cached
    return cached


def membership_in(user, org_id: int) -> Membership | None:
    return next((m for m in memberships_of(user) if m.org_id == org_id), None)


def primary_membership(user) -> Membership | None:
    ms = memberships_of(user)
    return ms[0] if ms else None


def visible_tasks(user) -> QuerySet[Task]:
    """Tasks of the user's organizations; a private task only for its creator and the org's admins."""
    ms = memberships_of(user)
    if not ms:
        return Task.objects.none()
    orgs = [m.org_id for m in ms]
    admin_orgs = [m.org_id for m in ms if m.role == Role.ADMIN]
    return Task.objects.filter(org_id__in=orgs).filter(
        Q(private=False) | Q(creator_id=user.pk) | Q(org_id__in=admin_orgs)
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
