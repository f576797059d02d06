"""The workers page (DESIGN §11): every worker instance with its leased runs, the supervisor's passes.

Heartbeats and supervisor passes are bookkeeping, not Events, so the relay never hears of them: the page
re-renders on a timer over its own websocket (console/live/ops.py)."""

from datetime import datetime

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils import timezone

from console.alerts import alerts_for
from recovery.models import SupervisorProcess
from recovery.supervisor.passes import expected_interval, recent_passes, supervisor_alive, supervisor_health
from tasks.selectors import memberships_of, primary_membership
from tasks.worker_instances import LIST_WINDOW, worker_instances


def workers_context(user, *, now: datetime | None = None) -> dict:
    now = now or timezone.now()
    org_ids = [m.org_id for m in memberships_of(user)]
    supervisors = list(SupervisorProcess.objects.filter(last_pass_at__gte=now - LIST_WINDOW).order_by("-last_pass_at"))
    for s in supervisors:
        s.alive = s.stopped_at is None and supervisor_alive(s.last_pass_at, expected_interval(s), now=now)
    health = supervisor_health(now=now)
    return {
        "instances": worker_instances(user, now=now),
        "supervisors": supervisors,
        "supervisor": health,
        "passes": recent_passes(org_ids),
        "lease_seconds": settings.CONSOLE_LEASE_SECONDS,
        "ops_alerts": alerts_for(user, now=now),
        "now": now,
    }


def render_workers_body(user, *, request=None, oob: bool = False) -> str:
    return render_to_string("console/workers.html#body", {**workers_context(user), "workers_oob": oob}, request=request)


@login_required
def workers_page(request):
    if not memberships_of(request.user):
        raise Http404("No organization.")
    context = workers_context(request.user)
    context.update(
        {
            "membership": primary_membership(request.user),
            "nav": "workers",
            "ws_path": "/ws/workers/",
            "last_event": 0,
        }
    )
    return render(request, "console/workers.html", context)
