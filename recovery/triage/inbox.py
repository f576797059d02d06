"""The inbox: the open and exhausted recovery actions that wait on a person, and the navigation's count."""

from django.db.models import Case, Q, When

from recovery.models import ActionStatus, RecoveryAction
from recovery.triage.filters import WAITING
from tasks.models import Role
from tasks.selectors import memberships_of, visible_via


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
        .select_related("task", "org")
        .annotate(rank=Case(When(status=ActionStatus.EXHAUSTED, then=0), default=1))
        .order_by("rank", "due_at", "id")[:limit]
    )


def inbox_count(user, *, cap: int = 99) -> int:
    """The navigation's count (one query, at most cap + 1 rows read)."""
    if not memberships_of(user):
        return 0
    return _inbox_queryset(user).order_by().values("pk")[: cap + 1].count()
