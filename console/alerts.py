"""The header's warnings (DESIGN §11): the supervisor silent or never seen, queued work with no worker.

Computed when a page draws them (a context processor) and re-sent to live pages by the relay when what they say
changes (`alerts_key`); the workers page shows them too.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, Subquery
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.functional import SimpleLazyObject

from recovery.models import BREAKER_IN_FORCE, RecoveryBreaker, SupervisorProcess
from recovery.selectors import breaker_facts
from recovery.supervisor.passes import supervisor_alive
from tasks.models import Organization, Run, RunStatus, WorkerInstance
from tasks.selectors import memberships_of


@dataclass(frozen=True)
class Alert:
    code: str  # supervisor_silent | supervisor_never | no_worker | breaker_open
    at: datetime | None = None
    interval: float = 0.0
    org: str = ""
    queued: int = 0
    # A recovery breaker in force (DESIGN §14): its id and its sentence (recovery.rules.breaker).
    breaker: int | None = None
    text: str = ""


def lease_period() -> timedelta:
    return timedelta(seconds=settings.CONSOLE_LEASE_SECONDS)


def alerts_for(user, *, now: datetime | None = None) -> list[Alert]:
    """What the header warns about, for the user's organizations, in one query."""
    return alerts_of_orgs([m.org_id for m in memberships_of(user)], now=now)


def alerts_of_orgs(org_ids, *, now: datetime | None = None) -> list[Alert]:
    """The header's warnings for members of these organizations, in one query."""
    org_ids = list(org_ids)
    if not org_ids:
        return []
    now = now or timezone.now()
    last = SupervisorProcess.objects.order_by("-last_pass_at")
    queued = Run.objects.filter(org=OuterRef("pk"), status=RunStatus.QUEUED)
    rows = list(
        Organization.objects.filter(pk__in=org_ids)
        .annotate(
            queued=Exists(queued),
            seen=Subquery(
                WorkerInstance.objects.filter(org=OuterRef("pk")).order_by("-last_seen_at").values("last_seen_at")[:1]
            ),
            last_pass=Subquery(last.values("last_pass_at")[:1]),
            pass_interval=Subquery(last.values("interval")[:1]),
            breakers=Exists(RecoveryBreaker.objects.filter(org=OuterRef("pk"), state__in=BREAKER_IN_FORCE)),
        )
        .order_by("name")
        .values("name", "queued", "seen", "last_pass", "pass_interval", "breakers")
    )
    alerts = []
    if rows:
        at, interval = rows[0]["last_pass"], rows[0]["pass_interval"]
        expected = max(float(settings.CONSOLE_SUPERVISE_SECONDS), interval or 0.0)
        if at is None:
            alerts.append(Alert("supervisor_never", interval=expected))
        elif not supervisor_alive(at, expected, now=now):
            alerts.append(Alert("supervisor_silent", at=at, interval=expected))
    for row in rows:
        if row["queued"] and (row["seen"] is None or now - row["seen"] > lease_period()):
            alerts.append(Alert("no_worker", at=row["seen"], org=row["name"]))
    if any(row["breakers"] for row in rows):  # a second query only while a breaker is in force
        for b in (
            RecoveryBreaker.objects.filter(org_id__in=org_ids, state__in=BREAKER_IN_FORCE)
            .select_related("agent", "org")
            .order_by("opened_at", "id")
        ):
            text = breaker_facts(b, b.agent.name).sentence()
            alerts.append(Alert("breaker_open", at=b.opened_at, org=b.org.name, breaker=b.pk, text=text))
    return alerts


def header_alerts(request):
    """Context processor: the header's warnings, computed only if a page draws them."""
    user = getattr(request, "user", None)
    return {"ops_alerts": SimpleLazyObject(lambda: alerts_for(user) if user is not None else [])}


def render_alerts(user, *, request=None, alerts: list[Alert] | None = None, oob: bool = False) -> str:
    alerts = alerts_for(user) if alerts is None else alerts
    ctx = {"ops_alerts": alerts, "user": user, "alerts_oob": oob}
    return render_to_string("console/ops_alerts.html", ctx, request=request)


def alerts_key(alerts: list[Alert]) -> tuple:
    """What the warnings say, without the clock: a live page is sent the header again only when this changes."""
    return tuple((a.code, a.at, a.org, a.text) for a in alerts)
