"""Who may watch a live page: the session's user (read from the session store), their access to the page's
object, and the organizations whose events they see. A live page is re-checked on each push."""

from dataclasses import dataclass
from datetime import datetime
from importlib import import_module

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model, load_backend
from django.core.exceptions import ValidationError
from django.utils.crypto import constant_time_compare

from recovery.models import BulkOperation
from tasks.models import Task
from tasks.selectors import membership_in, memberships_of, primary_membership, task_visible_to, visible_runs


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


def nav_orgs(user) -> list[int]:
    return [m.org_id for m in memberships_of(user)]
