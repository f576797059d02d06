"""Operations over HTTP (DESIGN §11): the workers API, /api/health/ and /healthz, and /metrics."""

import hmac
from datetime import datetime

from django.conf import settings
from django.db import connection
from django.http import Http404, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from console import metrics
from console.live.relay import relay
from recovery.supervisor.passes import supervisor_health
from tasks.api import BaseAPIView
from tasks.auth import IsPerson
from tasks.models import ApiToken, Membership, Role
from tasks.worker_instances import worker_instances


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


class HeldRunOut(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    lease_expires_at = serializers.DateTimeField(allow_null=True)
    last_heartbeat_at = serializers.DateTimeField(allow_null=True)


class WorkerInstanceOut(serializers.Serializer):
    identity = serializers.CharField()
    instance = serializers.CharField()
    org = serializers.CharField()
    alive = serializers.BooleanField()
    first_seen_at = serializers.DateTimeField(allow_null=True)
    last_seen_at = serializers.DateTimeField(allow_null=True)
    last_claim_at = serializers.DateTimeField(allow_null=True)
    last_heartbeat_at = serializers.DateTimeField(allow_null=True)
    runs = HeldRunOut(many=True)
    hidden_runs = serializers.IntegerField(help_text="Runs it holds of private tasks the caller may not see.")


class WorkersPageOut(serializers.Serializer):
    results = WorkerInstanceOut(many=True)
    next = serializers.URLField(allow_null=True)


class SupervisorHealthOut(serializers.Serializer):
    last_pass_at = serializers.DateTimeField(allow_null=True)
    alive = serializers.BooleanField()
    interval_seconds = serializers.FloatField()


RELAY_STATUSES = ("idle", "running", "stopped")


class RelayHealthOut(serializers.Serializer):
    status = serializers.ChoiceField(choices=RELAY_STATUSES)
    sockets = serializers.IntegerField()
    last_event_id = serializers.IntegerField(allow_null=True, help_text="Null before its first event.")


class HealthOut(serializers.Serializer):
    database = serializers.ChoiceField(choices=["ok", "unavailable"])
    supervisor = SupervisorHealthOut()
    relay = RelayHealthOut()


class WorkersView(BaseAPIView):
    """`GET /api/workers/`: worker instances of the caller's organizations and the runs they hold."""

    permission_classes = [IsPerson]

    @extend_schema(responses=WorkersPageOut, operation_id="workers_list")
    def get(self, request):
        rows = worker_instances(request.user)
        results = [
            {
                "identity": row.identity,
                "instance": row.instance.instance,
                "org": row.instance.org.slug,
                "alive": row.alive,
                "first_seen_at": iso(row.instance.first_seen_at),
                "last_seen_at": iso(row.instance.last_seen_at),
                "last_claim_at": iso(row.instance.last_claim_at),
                "last_heartbeat_at": iso(row.instance.last_heartbeat_at),
                "runs": [
                    {
                        "id": r.pk,
                        "status": r.status,
                        "lease_expires_at": iso(r.lease_expires_at),
                        "last_heartbeat_at": iso(r.last_heartbeat_at),
                    }
                    for r in row.runs
                ],
                "hidden_runs": row.hidden_runs,
            }
            for row in rows
        ]
        return Response({"results": results, "next": None})


# How long /healthz and /api/health/ wait for a pooled connection: a prober wants its answer in seconds, while
# a request queues for one up to CONSOLE_DB_POOL_TIMEOUT (see settings).
HEALTH_POOL_TIMEOUT = 3.0


def database_ok() -> bool:
    try:
        pool = getattr(connection, "pool", None)  # psycopg's pool: PostgreSQL with CONSOLE_DB_POOL on
        if pool is not None:
            pool.open()
            with pool.connection(timeout=HEALTH_POOL_TIMEOUT) as conn:
                conn.execute("SELECT 1").fetchone()
            return True
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return True
    except Exception:  # any failure to answer is "unavailable"; the reason is for the logs, not the prober
        connection.close_if_unusable_or_obsolete()
        return False


@never_cache
def healthz(request):
    """200 when the database answers, 503 otherwise. No auth, no data: for load balancers."""
    if database_ok():
        return HttpResponse("ok\n", content_type="text/plain")
    return HttpResponse("unavailable\n", status=503, content_type="text/plain")


def relay_health() -> dict:
    task = relay.task
    if task is None:
        status = "idle"  # started by the first live page of this process
    elif task.done():
        status = "stopped"
    else:
        status = "running"
    return {"status": status, "sockets": len(relay.consumers()), "last_event_id": relay.last_id}


class HealthView(BaseAPIView):
    """`GET /api/health/`: the database, the supervisor and this web process's event relay."""

    permission_classes = [IsPerson]

    @extend_schema(responses={200: HealthOut, 503: HealthOut}, operation_id="health")
    def get(self, request):
        db = database_ok()
        health = supervisor_health()
        return Response(
            {
                "database": "ok" if db else "unavailable",
                "supervisor": {
                    "last_pass_at": iso(health.last_pass_at),
                    "alive": health.alive,
                    "interval_seconds": health.interval,
                },
                "relay": relay_health(),
            },
            status=200 if db else 503,
        )


def metrics_scope(request) -> list[int] | None:
    """The organizations a scrape may see: None for the scrape token (all), an admin's organizations
    for an admin's API token. No credentials: 404 (the endpoint is not advertised); others: 403."""
    header = request.headers.get("Authorization", "")
    if not header.strip():
        raise Http404("Not found.")
    scheme, _, key = header.strip().partition(" ")
    key = key.strip()
    if scheme.lower() not in ("bearer", "token") or not key:
        raise PermissionError
    configured = settings.CONSOLE_METRICS_TOKEN
    if configured and hmac.compare_digest(key.encode(), configured.encode()):
        return None
    token = ApiToken.objects.filter(digest=ApiToken.hash(key), user__is_active=True).only("user_id").first()
    if token is None or token.user_id is None:
        raise PermissionError
    orgs = list(Membership.objects.filter(user_id=token.user_id, role=Role.ADMIN).values_list("org_id", flat=True))
    if not orgs:
        raise PermissionError
    return orgs


@never_cache
def metrics_view(request):
    try:
        org_ids = metrics_scope(request)
    except PermissionError:
        detail = "This needs the metrics token or an admin's API token."
        return JsonResponse({"code": "forbidden", "detail": detail}, status=403)
    body, content_type = metrics.exposition_for(org_ids, request.headers.get("Accept", ""))
    return HttpResponse(body, content_type=content_type)
