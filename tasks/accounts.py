"""Organizations, members, agents, workers and their tokens. Each function is one transaction."""

from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from tasks.authz import require_role
from tasks.errors import Invalid, NotFound
from tasks.events import event_append
from tasks.models import Agent, AgentProfile, ApiToken, Membership, Organization, Role, Worker


@transaction.atomic
def org_create(*, slug: str, name: str = "", actor="cli") -> tuple[Organization, bool]:
    """Create an organization; an existing slug is returned unchanged."""
    org, created = Organization.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    if created:
        event_append(org_id=org.pk, kind="org_created", actor=actor, payload={"slug": slug})
    return org, created


def org_get(slug: str) -> Organization:
    org = Organization.objects.filter(slug=slug).first()
    if org is None:
        raise NotFound(f"No organization {slug!r}.")
    return org


@transaction.atomic
def member_add(*, org: Organization, username: str, role: str, password: str | None = None, actor="cli"):
    """Create the user if missing and set their role in `org`."""
    if role not in Role.values:
        raise Invalid(f"Role must be one of {', '.join(Role.values)}.", field="role")
    User = get_user_model()
    user, created = User.objects.get_or_create(username=username)
    if password:
        user.set_password(password)
        user.save(update_fields=["password"])
    elif created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    membership, _ = Membership.objects.update_or_create(user=user, org=org, defaults={"role": role})
    event_append(org_id=org.pk, kind="member_set", actor=actor, payload={"username": username, "role": role})
    return membership


@transaction.atomic
def member_remove(*, org: Organization, username: str, actor="cli") -> bool:
    deleted, _ = Membership.objects.filter(org=org, user__username=username).delete()
    if deleted:
        event_append(org_id=org.pk, kind="member_removed", actor=actor, payload={"username": username})
    return bool(deleted)


@transaction.atomic
def agent_add(*, org: Organization, name: str, auto_resume: bool = True, actor="cli") -> Agent:
    agent, created = Agent.objects.get_or_create(org=org, name=name)
    AgentProfile.objects.get_or_create(agent=agent, defaults={"auto_resume": auto_resume})
    if created:
        event_append(
            org_id=org.pk, kind="agent_created", actor=actor, payload={"name": name, "auto_resume": auto_resume}
        )
    return agent


@transaction.atomic
def token_issue(*, username: str | None = None, worker: str | None = None, org: Organization | None = None) -> str:
    """Issue a token for a person or a worker identity; returns the key (only its digest is kept)."""
    key = ApiToken.new_key()
    if worker:
        if org is None:
            raise Invalid("A worker token needs an organization.")
        worker_obj, _ = Worker.objects.get_or_create(org=org, name=worker)
        ApiToken.objects.create(digest=ApiToken.hash(key), worker=worker_obj)
        event_append(org_id=org.pk, kind="token_issued", actor="cli", payload={"worker": worker})
    else:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise NotFound(f"No user {username!r}.")
        ApiToken.objects.create(digest=ApiToken.hash(key), user=user)
    return key


SESSION_ENDED = "session_ended"


@transaction.atomic
def session_ended(*, user, reason: str) -> None:
    """A person's session ended (signed out, password changed): every web process re-checks that person's
    live sockets at once, and closes those whose session is gone (console/live/relay.py reads this event).

    One event per organization of the person (events belong to one); it names the person, never the session.
    """
    for org_id in Membership.objects.filter(user=user).values_list("org_id", flat=True):
        event_append(
            org_id=org_id,
            kind=SESSION_ENDED,
            actor=user,
            payload={"user_id": user.pk, "username": user.get_username(), "reason": reason},
        )


@transaction.atomic
def token_revoke(
    *,
    key: str | None = None,
    username: str | None = None,
    worker: str | None = None,
    org: Organization | None = None,
    actor="cli",
) -> int:
    """Revoke API tokens: one by its key, or every token of a person or of a worker identity. Returns how many.

    Revocation is immediate: every request looks its token up. Only digests are kept, so a key is found by its digest.
    """
    tokens = ApiToken.objects.all()
    if key:
        tokens = tokens.filter(digest=ApiToken.hash(key))
    elif username:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise NotFound(f"No user {username!r}.")
        tokens = tokens.filter(user=user)
    elif worker:
        if org is None:
            raise Invalid("A worker's tokens are named by the worker and its organization.")
        tokens = tokens.filter(worker__org=org, worker__name=worker)
    else:
        raise Invalid("Name a key, a user or a worker.")
    revoked = list(tokens.select_related("worker", "user"))
    for token in revoked:
        whose = {"worker": token.worker.name} if token.worker_id else {"username": token.user.get_username()}
        org_ids = (
            [token.worker.org_id]
            if token.worker_id
            else list(Membership.objects.filter(user_id=token.user_id).values_list("org_id", flat=True))
        )
        for org_id in org_ids:
            event_append(org_id=org_id, kind="token_revoked", actor=actor, payload={**whose, "token": token.pk})
    ApiToken.objects.filter(pk__in=[t.pk for t in revoked]).delete()
    return len(revoked)


# --- sign-in locks (django-axes) ---------------------------------------------------------------


def _locking(now=None):
    """The attempt records that lock a sign-in now: AXES_FAILURE_LIMIT wrong passwords for one username from one
    address, until AXES_COOLOFF_TIME after the last one."""
    now = now or timezone.now()
    return AccessAttempt.objects.filter(
        failures_since_start__gte=settings.AXES_FAILURE_LIMIT, attempt_time__gte=now - settings.AXES_COOLOFF_TIME
    )


def signin_locks(org_id: int, *, now=None) -> list[dict]:
    """Members of the organization whose sign-in is locked now. Newest first, at most 200."""
    members = Membership.objects.filter(org_id=org_id).values("user__username")
    return list(
        _locking(now)
        .filter(username__in=members)
        .order_by("-attempt_time", "id")
        .values("username", "ip_address", "failures_since_start", "attempt_time")[:200]
    )


@transaction.atomic
def signin_unlock(*, actor, org_id: int, username: str) -> int:
    """An admin lifts the sign-in lock of a member of their organization (every address) and clears their failed
    attempts; returns how many locks were in force (0: nothing was locked). A name that is not a member is
    NotFound, whether or not such a person exists."""
    require_role(actor, org_id, Role.ADMIN)
    if not isinstance(username, str) or not Membership.objects.filter(org_id=org_id, user__username=username).exists():
        raise NotFound("No such member.", field="username")
    locked = _locking().filter(username=username).count()
    AccessAttempt.objects.filter(username=username).delete()
    event_append(org_id=org_id, kind="signin_unlocked", actor=actor, payload={"username": username, "locks": locked})
    return locked
