"""Service errors with stable codes, and the API's one error format."""

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
BUSY_RETRY_AFTER = 5


def database_busy(exc: BaseException | None) -> bool:
    """Whether a request failed because it waited out the connection pool (psycopg_pool.PoolTimeout, which
    Django re-raises as its own OperationalError): it never got a connection, so it wrote nothing."""
    from psycopg_pool import PoolTimeout

    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, PoolTimeout):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
