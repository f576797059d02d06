"""Who may do what, decided on the server for every page and action."""

from tasks.models import Role
from tasks.selectors import membership_in


def role_in(user, org_id: int) -> str | None:
    m = membership_in(user, org_id)
    return m.role if m else None


def allows(user, org_id: int, role: str) -> bool:
    m = membership_in(user, org_id)
    return bool(m and m.allows(role))


def can_operate(user, org_id: int) -> bool:
    return allows(user, org_id, Role.OPERATOR)


def can_admin(user, org_id: int) -> bool:
    return allows(user, org_id, Role.ADMIN)
