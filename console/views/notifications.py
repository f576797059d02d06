"""The notifications settings page (admin): destinations, the secret shown once, and the delivery log."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from console.views.settings_pages import settings_admin
from recovery import notify
from recovery.models import NOTICE_TYPES
from recovery.words.notifications import (
    DELIVERY_STATUSES,
    DESTINATION_KINDS,
    NOTICE_NAMES,
    deadline_rule_text,
    delivery_try_text,
    destination_state,
)
from tasks.errors import Invalid, NotFound

WHAT = "Notification settings"


def _destination_rows(org_id: int) -> list[dict]:
    return [
        {
            "d": d,
            "kind": DESTINATION_KINDS.get(d.kind, d.kind),
            "url": notify.redacted(d.kind, d.url),
            "events": [NOTICE_NAMES.get(e, e) for e in d.events],
            "state": destination_state(d),
            "failing": d.failing_since is not None,
            "off": not d.enabled or d.failing_since is not None,
        }
        for d in notify.destinations(org_id)
    ]


def _delivery_rows(org_id: int) -> list[dict]:
    return [
        {
            "d": d,
            "notice": NOTICE_NAMES.get(d.notice, d.notice),
            "status": DELIVERY_STATUSES.get(d.status, d.status),
            "destination": f"#{d.destination_id} {notify.redacted(d.destination.kind, d.destination.url)}",
            "tries": [{"at": t.get("at"), "text": delivery_try_text(t)} for t in d.tries],
        }
        for d in notify.deliveries(org_id)
    ]


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def settings_notifications(request):
    """GET: the page. POST: add a destination; the answer shows its signing secret, once."""
    membership = settings_admin(request, WHAT)
    context = {"form": {"kind": "webhook", "url": "", "events": list(NOTICE_TYPES)}, "error": "", "secret": ""}
    status = 200
    if request.method == "POST":
        kind, url = request.POST.get("kind", ""), request.POST.get("url", "")
        events = request.POST.getlist("events")
        try:
            dest, secret = notify.destination_add(
                actor=request.user, org_id=membership.org_id, kind=kind, url=url, events=events
            )
        except Invalid as exc:
            context.update(form={"kind": kind, "url": url, "events": events}, error=exc.detail)
            status = 400
        else:
            context.update(secret=secret, created=dest, created_url=notify.redacted(dest.kind, dest.url))
    return render(
        request,
        "console/settings_notifications.html",
        {
            **context,
            "org": membership.org,
            "membership": membership,
            "nav": "settings",
            "notes": [str(m) for m in messages.get_messages(request)],
            "notice_types": [(t, NOTICE_NAMES[t]) for t in NOTICE_TYPES],
            "kinds": list(DESTINATION_KINDS.items()),
            "destinations": _destination_rows(membership.org_id),
            "deliveries": _delivery_rows(membership.org_id),
            "deadline_text": deadline_rule_text(notify.deadline_seconds(membership.org)),
        },
        status=status,
    )


@login_required
@require_POST
def settings_notifications_enable(request, destination_id: int):
    membership = settings_admin(request, WHAT)
    try:
        notify.destination_enable(actor=request.user, org_id=membership.org_id, destination_id=destination_id)
    except NotFound:
        raise Http404("No such destination.") from None
    messages.success(request, f"Destination #{destination_id} is on again: it gets the next notices.")
    return redirect("settings-notifications")


@login_required
@require_POST
def settings_notifications_remove(request, destination_id: int):
    membership = settings_admin(request, WHAT)
    try:
        notify.destination_remove(actor=request.user, org_id=membership.org_id, destination_id=destination_id)
    except NotFound:
        raise Http404("No such destination.") from None
    messages.success(request, f"Removed destination #{destination_id}: it gets no more notices.")
    return redirect("settings-notifications")
