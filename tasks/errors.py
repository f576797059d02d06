"""Service errors with stable codes, and the API's one error format."""

import time
from dataclasses import dataclass

from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class ServiceError(Exception):
    """A refusal a caller can act on. `code` is stable; `detail` is for people."""

    code = "invalid"
    status_code = 400

    def __init__(self, detail: str, *, code: str | None = None, status_code: int | None = None, **extra):
        super().__init__(detail)
        self.detail = detail
        if code:
            self.code = code
        if status_code:
            self.status_code = status_code
        self.extra = extra

    def as_dict(self) -> dict:
        return {"code": self.code, "detail": self.detail, **self.extra}


class Invalid(ServiceError):
    code = "invalid"
    status_code = 400


class NotFound(ServiceError):
    code = "not_found"
    status_code = 404


class Forbidden(ServiceError):
    code = "forbidden"
    status_code = 403


class StaleLease(ServiceError):
    code = "stale_lease"
    status_code = 409


class StaleVersion(ServiceError):
    code = "stale_version"
    status_code = 409


class GateClosed(ServiceError):
    code = "gate_closed"
    status_code = 409

    def __init__(self, detail: str, *, gate: str, **extra):
        super().__init__(detail, gate=gate, **extra)
        self.gate = gate


class NotEligible(ServiceError):
    code = "not_eligible"
    status_code = 409


class SeqConflict(ServiceError):
    """An agent run planned a step number out of order, or a taken number as another call (API.md, Agent runs)."""

    code = "seq_conflict"
    status_code = 409


class IdempotencyConflict(ServiceError):
    code = "idempotency_conflict"
    status_code = 409


class PayloadTooLarge(ServiceError):
    code = "payload_too_large"
    status_code = 413


_DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "not_authenticated",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.UnsupportedMediaType: "invalid",
    exceptions.ParseError: "invalid",
    exceptions.ValidationError: "invalid",
    exceptions.Throttled: "throttled",
}


def exception_handler(exc, context):
    """Every API error is `{"code", "detail", ...}` with the right status."""
    if isinstance(exc, ServiceError):
        response = Response(exc.as_dict(), status=exc.status_code)
        if exc.extra.get("retry_after"):
            response["Retry-After"] = str(exc.extra["retry_after"])
        return response
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {"code": "payload_too_large", "detail": "The request body is larger than 8 MiB."},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    if isinstance(exc, exceptions.ValidationError):
        response.data = {"code": code, "detail": "The request is not valid.", "errors": exc.detail}
    else:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        response.data = {"code": code, "detail": detail}
    return response


class TaskClosed(ServiceError):
    code = "task_closed"
    status_code = 409


class NeedsDecision(ServiceError):
    """A continuation waits on a person's decision; `action` names the action that takes it."""

    code = "needs_decision"
    status_code = 409


class DependencyCycle(ServiceError):
    code = "dependency_cycle"
    status_code = 409


class ScopeChanged(ServiceError):
    code = "scope_changed"
    status_code = 409


class Throttled(ServiceError):
    code = "throttled"
    status_code = 429


def not_found(request, exception=None):
    """`handler404`: under /api/ an unknown path is the API's error shape (`not_found`), not an HTML page."""
    from django.http import JsonResponse
    from django.views.defaults import page_not_found

    if request.path.startswith("/api/"):
        return JsonResponse({"code": "not_found", "detail": "There is no such API path."}, status=404)
    return page_not_found(request, exception)


DATABASE_BUSY = "Every database connection of this server is in use. Nothing was changed; try again in a few seconds."
DATABASE_UNAVAILABLE = "The console cannot reach its database. Nothing was changed; try again in a few seconds."
DATABASE_LOST = (
    "The console lost its connection to the database while answering. What you asked may or may not have been "
    "saved: reload to see, then try again if it was not."
)
DATABASE_LOCKED = (
    "Another process kept the database busy for too long. Reload in a few seconds to see whether what you asked "
    "was saved, then try again if it was not."
)
BUSY_RETRY_AFTER = 5


@dataclass(frozen=True)
class DatabaseTrouble:
    """Why a request could not be served by the database: `code` is the cause (`database_busy`: every connection
    of this process is in use, or SQLite's write lock is held; `database_unavailable`: the database cannot be
    reached or dropped the connection), `title` and `detail` say it to people."""

    code: str
    title: str
    detail: str


BUSY = DatabaseTrouble("database_busy", "The console is busy", DATABASE_BUSY)
UNAVAILABLE = DatabaseTrouble("database_unavailable", "The console cannot reach its database", DATABASE_UNAVAILABLE)
LOST = DatabaseTrouble("database_unavailable", "The console lost its database connection", DATABASE_LOST)
LOCKED = DatabaseTrouble("database_busy", "The console is busy", DATABASE_LOCKED)

# How long the last answer of `database_answers` stands: a burst of refused requests probes once.
PROBE_SECONDS = 1.0
PROBE_TIMEOUT = 2
_probe: dict = {}


def database_answers() -> bool:
    """Whether the database accepts a new connection now, outside the pool (PostgreSQL; SQLite always does)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return True
    now = time.monotonic()
    if _probe and now - _probe["at"] < PROBE_SECONDS:
        return _probe["ok"]
    params = connection.get_connection_params()  # the pool's own options are not connection parameters
    params["connect_timeout"] = PROBE_TIMEOUT
    try:
        with connection.Database.connect(**params) as conn:
            conn.execute("SELECT 1")
        ok = True
    except connection.Database.Error:
        ok = False
    _probe.update(at=time.monotonic(), ok=ok)
    return ok


def _chain(exc: BaseException | None):
    seen = set()
    while exc is not None and id(exc) not in seen:
        yield exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__


def _connection_lost(exc: BaseException) -> bool:
    """A psycopg error that means the connection is gone (it has no SQL state, or one of class 08, connection
    exception, or 57P, the server shutting down), as opposed to an error of the statement."""
    import psycopg

    if isinstance(exc, psycopg.InterfaceError):
        return True
    if isinstance(exc, psycopg.OperationalError):
        state = exc.sqlstate or ""
        return state == "" or state.startswith(("08", "57P"))
    return False


def database_trouble(exc: BaseException | None) -> DatabaseTrouble | None:
    """Whether a request failed because the database could not serve it, and why; None for any other error.

    - It waited out the connection pool (psycopg_pool.PoolTimeout, re-raised by Django as its OperationalError):
      it never got a connection, so it wrote nothing. `database_busy` when the database answers a connection of
      its own (every pooled connection is in use), `database_unavailable` when it does not.
    - Its connection dropped (a database restart, a failover, the network): `database_unavailable`; a change in
      flight may or may not have been committed, and the sentence says so.
    - SQLite's write lock stayed held past CONSOLE_SQLITE_TIMEOUT ("database is locked"): `database_busy`.
    """
    import sqlite3

    from django.db import InterfaceError as DjangoInterfaceError
    from psycopg_pool import PoolTimeout

    chain = list(_chain(exc))
    if any(isinstance(e, PoolTimeout) for e in chain):
        return BUSY if database_answers() else UNAVAILABLE
    if any(isinstance(e, sqlite3.OperationalError) and "locked" in str(e) for e in chain):
        return LOCKED
    if any(_connection_lost(e) for e in chain) or isinstance(exc, DjangoInterfaceError):
        return LOST
    return None
