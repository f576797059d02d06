"""The one role check. Services take the acting user and call `require_role`; pages ask `allows`.

An object of an organization the user does not belong to is `NotFound`, never
`Forbidden`: its existence is not revealed.
"""

from tasks.errors import Forbidden, NotFound
from tasks.models import Membership, Role
from tasks.selectors import membership_in


def require_role(user, org_id: int, role: str, *, what: str = "No such object.") -> Membership:
    """The user's membership in `org_id` if it allows `role`; NotFound for strangers, Forbidden for too low a role."""
    m = membership_in(user, org_id)
    if m is None:
        raise NotFound(what)
    if not m.allows(role):
        raise Forbidden(f"This needs the {role} role; you are {m.role}.", required_role=role)
    return m


def allows(user, org_id: int, role: str) -> bool:
    m = membership_in(user, org_id)
    return bool(m and m.allows(role))


def can_operate(user, org_id: int) -> bool:
    return allows(user, org_id, Role.OPERATOR)


def can_admin(user, org_id: int) -> bool:
    return allows(user, org_id, Role.ADMIN)
