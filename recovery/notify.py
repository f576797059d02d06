"""Notifications when a person is needed, and decision deadlines (DESIGN §14).

- **Destinations**: per organization, a signed webhook (the Standard Webhooks scheme, signed with the
  destination's `whsec_` secret through the `standardwebhooks` library) or an Apprise URL (chat, mail), and the
  notices it wants (`models.NOTICE_TYPES`). The URL and secret are stored as given — the supervisor needs both to
  deliver and sign, and the database is where every other credential of the deployment lives — and never shown back:
  the secret only in the answer that created it, the URL redacted (`redacted`).
- **Outbox**: `on_event` is called by `tasks.events.event_append` with every event, in its transaction (registered in
  recovery/apps.py, since `tasks` may not import `recovery`). An event that means a person is needed
  (`notice_of`) writes one delivery row per enabled, non-failing destination of its organization that wants it, in
  that same transaction: the notice exists exactly when the event does, and (destination, event) is unique, so it
  is sent once per event.
- **Delivery** (`deliveries_run`, a supervisor duty): claims due rows (SKIP LOCKED on PostgreSQL, a compare-and-set on
  `attempts` everywhere), posts with nothing locked and a short timeout, then records the try with the delivery's
  move. A failed try is tried again after an exponential backoff; after `CONSOLE_NOTIFY_MAX_ATTEMPTS` it is given up,
  and a destination with `CONSOLE_NOTIFY_FAILING_AFTER` deliveries in a row given up is marked failing: shown so on
  the settings page and sent nothing new until an admin turns it on again.
- **Decision deadlines** (`overdue_notice`, a supervisor duty): a decision open longer than
  its organization's deadline (`recovery.limits`; by default `CONSOLE_DECISION_DEADLINE_SECONDS`) is overdue
  (`is_overdue`, read from its opening time by the board and inbox);
  the first pass that finds it writes its `OverdueDecision` row (unique per action) with a `decision_overdue` event,
  whose outbox rows are the `deadline_passed` notices. A deadline decides nothing: the action stays open.
"""

import base64
import json
import logging
import os
import secrets
import time
import warnings
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone
from standardwebhooks import Webhook

from recovery import limits
from recovery.models import (
    DELIVERY_DUE,
    NOTICE_TYPES,
    ActionStatus,
    DeliveryStatus,
    DestinationKind,
    NotificationDelivery,
    NotificationDestination,
    OverdueDecision,
    RecoveryAction,
)
from recovery.rules.classify import WORKSPACE_KINDS
from recovery.transitions import DELIVERIES
from recovery.words.breakers import breaker_notice_title
from recovery.words.notifications import notice_message
from tasks.authz import require_role
from tasks.errors import Invalid, NotFound
from tasks.events import actor_name, event_append, on_appended
from tasks.models import Event, Role, Task

log = logging.getLogger("recovery.notify")

MAX_DESTINATIONS = 20
MAX_URL = 2000
DELIVERY_LOG = 100


def _setting(name: str, default: float) -> float:
    """A Django setting if set (tests set them), else the environment, else `default`."""
    value = getattr(settings, name, None)
    if value is None:
        value = os.environ.get(name) or default
    return float(value)


def deadline_seconds(org=None) -> int:
    """How long a decision may wait before it is overdue in `org` (an Organization already loaded): its own deadline
    where an admin set one, else the deployment's [4 hours]."""
    return limits.limits_of(org).decision_deadline_seconds


def max_attempts() -> int:
    return max(1, int(_setting("CONSOLE_NOTIFY_MAX_ATTEMPTS", 5)))


def backoff(attempts: int) -> timedelta:
    """The wait after the `attempts`-th failed try: 30 s, 60 s, 120 s, … (CONSOLE_NOTIFY_BACKOFF_SECONDS doubled)."""
    return timedelta(seconds=_setting("CONSOLE_NOTIFY_BACKOFF_SECONDS", 30) * 2 ** max(0, attempts - 1))


def failing_after() -> int:
    return max(1, int(_setting("CONSOLE_NOTIFY_FAILING_AFTER", 3)))


def send_timeout() -> float:
    return _setting("CONSOLE_NOTIFY_TIMEOUT_SECONDS", 5)


# --- destinations ------------------------------------------------------------------------------


def new_secret() -> str:
    """A Standard Webhooks signing secret: `whsec_` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def redacted(kind: str, url: str) -> str:
    """What is shown of a saved URL: a webhook's scheme, host and port; an Apprise URL's service only (its host and
    path may be tokens). Never credentials, paths or queries."""
    parts = urlsplit(url)
    if kind == DestinationKind.WEBHOOK and parts.hostname:
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname}{port}/…"
    return f"{parts.scheme or 'apprise'}://…"


def _apprise():
    """The `apprise` module with its plugins loaded. Loaded on first use: its plugins take a moment to load, and only
    Apprise destinations need them. Its mail plugin imports the standard library's `imghdr`, deprecated since
    Python 3.11 (a warning only, harmless here): loading the plugins once without it keeps it out of every log."""
    import apprise  # on use, as said above
    from apprise.plugins import N_MGR  # on use, as said above

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*imghdr.*", category=DeprecationWarning)
        N_MGR.load_modules()
    return apprise


def _validate(kind, url, events) -> tuple[str, str, list[str]]:
    if kind not in DestinationKind.values:
        raise Invalid("The kind must be webhook or apprise.", code="invalid_kind", field="kind")
    if not isinstance(url, str) or not url.strip() or len(url) > MAX_URL:
        raise Invalid(f"The URL must be text of at most {MAX_URL} characters.", code="invalid_url", field="url")
    url = url.strip()
    if kind == DestinationKind.WEBHOOK:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 — reading it checks the port
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise Invalid("A webhook URL is an http:// or https:// address.", code="invalid_url", field="url")
    else:
        if not _apprise().Apprise().add(url):
            raise Invalid("Apprise does not recognise this URL.", code="invalid_url", field="url")
    if (
        not isinstance(events, list)
        or not events
        or any(not isinstance(e, str) or e not in NOTICE_TYPES for e in events)
    ):
        raise Invalid(
            f"The events must be a list of: {', '.join(NOTICE_TYPES)}.", code="invalid_events", field="events"
        )
    return kind, url, sorted(set(events), key=NOTICE_TYPES.index)


def destination_add(*, actor, org_id: int, kind, url, events) -> tuple[NotificationDestination, str]:
    """Add a destination (admin); returns it and its signing secret, which nothing shows again."""
    require_role(actor, org_id, Role.ADMIN)
    kind, url, events = _validate(kind, url, events)
    with transaction.atomic():
        if NotificationDestination.objects.filter(org_id=org_id).count() >= MAX_DESTINATIONS:
            raise Invalid(f"An organization has at most {MAX_DESTINATIONS} destinations.", code="too_many_destinations")
        secret = new_secret()
        dest = NotificationDestination.objects.create(
            org_id=org_id, kind=kind, url=url, secret=secret, events=events, created_by=actor_name(actor)
        )
        event_append(
            org_id=org_id,
            kind="notify_destination_added",
            actor=actor,
            payload={"destination": dest.pk, "kind": kind, "url": redacted(kind, url), "events": events},
        )
    return dest, secret


def _destination_locked(org_id: int, destination_id: int) -> NotificationDestination:
    dest = NotificationDestination.objects.select_for_update().filter(org_id=org_id, pk=destination_id).first()
    if dest is None:
        raise NotFound(f"No notification destination #{destination_id}.")
    return dest


def destination_enable(*, actor, org_id: int, destination_id: int) -> NotificationDestination:
    """Turn a failing (or off) destination on again: it counts its failures from zero and gets new notices."""
    require_role(actor, org_id, Role.ADMIN)
    with transaction.atomic():
        dest = _destination_locked(org_id, destination_id)
        NotificationDestination.objects.filter(pk=dest.pk).update(enabled=True, failures=0, failing_since=None)
        event_append(org_id=org_id, kind="notify_destination_enabled", actor=actor, payload={"destination": dest.pk})
    dest.refresh_from_db()
    return dest


def destination_remove(*, actor, org_id: int, destination_id: int) -> None:
    """Remove a destination and its delivery log."""
    require_role(actor, org_id, Role.ADMIN)
    with transaction.atomic():
        dest = _destination_locked(org_id, destination_id)
        shown = redacted(dest.kind, dest.url)
        dest.delete()
        event_append(
            org_id=org_id,
            kind="notify_destination_removed",
            actor=actor,
            payload={"destination": destination_id, "url": shown},
        )


def destinations(org_id: int) -> list[NotificationDestination]:
    return list(NotificationDestination.objects.filter(org_id=org_id).order_by("id"))


def deliveries(org_id: int, *, limit: int = DELIVERY_LOG, before: int | None = None) -> list[NotificationDelivery]:
    """The organization's newest deliveries (older than delivery `before`, when given), each with its tries."""
    rows = NotificationDelivery.objects.filter(org_id=org_id)
    if before is not None:
        rows = rows.filter(pk__lt=before)
    return list(rows.select_related("destination", "task").order_by("-id")[:limit])


def destination_data(dest: NotificationDestination) -> dict:
    """A destination as the API shows it: never its secret, its URL redacted."""
    return {
        "id": dest.pk,
        "kind": dest.kind,
        "url": redacted(dest.kind, dest.url),
        "events": dest.events,
        "enabled": dest.enabled,
        "failing": dest.failing_since is not None,
        "failures": dest.failures,
        "last_error": dest.last_error,
        "created_by": dest.created_by,
        "created_at": dest.created_at.isoformat(),
    }


def delivery_data(d: NotificationDelivery) -> dict:
    return {
        "id": d.pk,
        "destination": d.destination_id,
        "event": d.notice,
        "event_id": d.event_id,
        "task": d.task_id,
        "attempts": d.attempts,
        "status": d.status,
        "last_error": d.last_error,
        "tries": d.tries,
        "created_at": d.created_at.isoformat(),
        "delivered_at": d.delivered_at.isoformat() if d.delivered_at else None,
    }


# --- the outbox --------------------------------------------------------------------------------


def notice_of(event: Event) -> str | None:
    """The notice an event is, if it means a person is needed; None for every other event (no query)."""
    kind, payload = event.kind, event.payload or {}
    if kind == "action_opened":
        if payload.get("kind") in WORKSPACE_KINDS:
            return "repair_waiting"
        return "exhausted" if payload.get("status") == ActionStatus.EXHAUSTED else "decision_waiting"
    if kind == "action_exhausted":
        return "exhausted"
    if kind == "breaker_opened":  # registered by the recovery breaker (issue 25, part 2)
        return "breaker_opened"
    if kind == "decision_overdue":
        return "deadline_passed"
    return None


_STATES = {
    "decision_waiting": "needs_decision",
    "exhausted": "exhausted",
    "repair_waiting": "needs_decision",
    "breaker_opened": "breaker_open",
    "deadline_passed": "needs_decision",
}


def task_url(task_id: int | None) -> str:
    base = settings.CONSOLE_URL.rstrip("/")
    return f"{base}/tasks/{task_id}/" if task_id else f"{base}/"


def notice_payload(event: Event, notice: str) -> dict:
    """The body every destination of the notice is sent (API.md, Power tools)."""
    payload = event.payload or {}
    title = ""
    if event.task_id:
        title = Task.objects.filter(pk=event.task_id).values_list("title", flat=True).first() or ""
    elif notice == "breaker_opened":
        title = breaker_notice_title(payload.get("agent") or "", payload.get("signature") or "")
    else:
        title = str(payload.get("title") or notice)
    url = task_url(event.task_id)
    if notice == "breaker_opened" and payload.get("breaker"):
        url = f"{settings.CONSOLE_URL.rstrip('/')}/breakers/{payload['breaker']}/"
    data = {"task": event.task_id, "title": title, "state": _STATES[notice], "url": url}
    if payload.get("action"):
        data["action"] = payload["action"]
    return {"type": notice, "timestamp": event.created_at.isoformat(), "data": data}


def on_event(event: Event) -> None:
    """Write the event's delivery rows, in its transaction (called by `event_append` for every event)."""
    notice = notice_of(event)
    if notice is None:
        return
    wanted = [
        d
        for d in NotificationDestination.objects.filter(
            org_id=event.org_id, enabled=True, failing_since__isnull=True
        ).only("pk", "events")
        if notice in d.events
    ]
    if not wanted:
        return
    body = notice_payload(event, notice)
    now = timezone.now()
    NotificationDelivery.objects.bulk_create(
        [
            NotificationDelivery(
                org_id=event.org_id,
                destination_id=d.pk,
                notice=notice,
                event_id=event.pk,
                task_id=event.task_id,
                payload=body,
                next_attempt_at=now,
            )
            for d in wanted
        ]
    )


def register() -> None:
    on_appended(on_event)


# --- delivery (the supervisor) -----------------------------------------------------------------


def _claim(*, now: datetime, limit: int) -> list[NotificationDelivery]:
    """Take due deliveries: each try is owned by the pass whose compare-and-set on `attempts` moved its
    `next_attempt_at` past the try's timeout; a pass that died mid-try leaves it to be taken again then."""
    lease = timedelta(seconds=send_timeout() * 2 + 30)
    claimed = []
    with transaction.atomic():
        qs = NotificationDelivery.objects.filter(status__in=DELIVERY_DUE, next_attempt_at__lte=now).order_by(
            "next_attempt_at", "id"
        )
        if connection.vendor == "postgresql":
            qs = qs.select_for_update(skip_locked=True, of=("self",))
        for d in qs.select_related("destination")[:limit]:
            taken = NotificationDelivery.objects.filter(pk=d.pk, attempts=d.attempts, status=d.status).update(
                attempts=F("attempts") + 1, next_attempt_at=now + lease
            )
            if taken:
                d.attempts += 1
                claimed.append(d)
    return claimed


def _post_webhook(d: NotificationDelivery, dest: NotificationDestination) -> tuple[int | None, str]:
    body = json.dumps(d.payload, separators=(",", ":"), sort_keys=True)
    msg_id = f"msg_{d.pk}"  # the same on every try, so a receiver can drop a repeat
    sent_at = timezone.now()
    signature = Webhook(dest.secret).sign(msg_id, sent_at, body)
    headers = {
        "content-type": "application/json",
        "user-agent": "recovery-console",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": signature,
    }
    try:
        response = httpx.post(dest.url, content=body, headers=headers, timeout=send_timeout(), follow_redirects=False)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:300] or type(exc).__name__
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, (response.reason_phrase or "not accepted")[:300]


def _notify_apprise(d: NotificationDelivery, dest: NotificationDestination) -> tuple[int | None, str]:
    apprise = _apprise()
    data = d.payload.get("data", {})
    title, body = notice_message(
        d.notice, task_id=data.get("task"), title=data.get("title", ""), url=data.get("url", "")
    )
    sender = apprise.Apprise()
    if not sender.add(dest.url):
        return None, "Apprise does not recognise this URL."
    try:
        ok = sender.notify(title=title, body=body)
    except Exception as exc:  # a plugin's own failure is this try's error, never the pass's
        return None, f"{type(exc).__name__}: {exc}"[:300]
    return None, "" if ok else "Apprise could not deliver it (its log says why)."


def _send(d: NotificationDelivery) -> tuple[int | None, str]:
    dest = d.destination
    if dest.kind == DestinationKind.WEBHOOK:
        return _post_webhook(d, dest)
    return _notify_apprise(d, dest)


def _record(d: NotificationDelivery, status: int | None, error: str, *, at: datetime) -> str:
    """Record one try with the delivery's move, if this pass still owns the try; returns the status it moved to."""
    tries = [*d.tries, {"at": at.isoformat(), "status": status, "error": error}]
    with transaction.atomic():
        owned = {"attempts": d.attempts}
        if not error:
            to = DeliveryStatus.DELIVERED
            moved = DELIVERIES.move(
                d.pk, to, where=owned, strict=False, tries=tries, last_error="", delivered_at=timezone.now()
            )
            if moved:
                NotificationDestination.objects.filter(pk=d.destination_id).update(failures=0, last_error="")
            return to if moved else ""
        if d.attempts < max_attempts():
            to = DeliveryStatus.FAILED
            retry_at = at + backoff(d.attempts)
            moved = DELIVERIES.move(
                d.pk, to, where=owned, strict=False, tries=tries, last_error=error, next_attempt_at=retry_at
            )
            return to if moved else ""
        to = DeliveryStatus.GIVEN_UP
        if not DELIVERIES.move(d.pk, to, where=owned, strict=False, tries=tries, last_error=error):
            return ""
        dest = NotificationDestination.objects.select_for_update().get(pk=d.destination_id)
        failures = dest.failures + 1
        failing = dest.failing_since or (timezone.now() if failures >= failing_after() else None)
        NotificationDestination.objects.filter(pk=dest.pk).update(
            failures=failures, failing_since=failing, last_error=error[:500]
        )
        return to


def deliveries_run(*, batch: int = 10, seconds: float | None = None) -> dict:
    """Send what is due, a batch at a time, for at most `seconds` [CONSOLE_NOTIFY_PASS_SECONDS, 10] (what is left
    waits for the next pass, so slow destinations never stall the supervisor); returns the count per status moved
    to (`delivered`, `failed`, `given_up`)."""
    seconds = _setting("CONSOLE_NOTIFY_PASS_SECONDS", 10) if seconds is None else seconds
    started = time.monotonic()
    done: dict[str, int] = {}
    while time.monotonic() - started < seconds:
        claimed = _claim(now=timezone.now(), limit=batch)
        if not claimed:
            break
        for d in claimed:
            _deliver(d, done)
    return done


def _deliver(d: NotificationDelivery, done: dict) -> None:
    now = timezone.now()
    dest = d.destination
    if not dest.enabled or dest.failing_since is not None:
        status, error = None, "Not sent: the destination is failing or off."
        with transaction.atomic():
            moved = DELIVERIES.move(
                d.pk,
                DeliveryStatus.GIVEN_UP,
                strict=False,
                tries=[*d.tries, {"at": now.isoformat(), "status": None, "error": error}],
                last_error=error,
            )
        if moved:
            done["given_up"] = done.get("given_up", 0) + 1
        return
    try:
        status, error = _send(d)
    except Exception as exc:  # one destination's failure is its own try's error, never the others'
        log.exception("notify: delivery #%s failed to send", d.pk)
        status, error = None, f"{type(exc).__name__}: {exc}"[:300]
    moved_to = _record(d, status, error, at=timezone.now())
    if moved_to:
        done[moved_to] = done.get(moved_to, 0) + 1


# --- decision deadlines ------------------------------------------------------------------------


def is_overdue(action, *, now: datetime | None = None, deadline: int | None = None) -> bool:
    """An open decision (not a workspace repair) opened longer ago than the deadline. Read from saved facts."""
    if action.status != ActionStatus.OPEN or action.kind in WORKSPACE_KINDS or action.created_at is None:
        return False
    deadline = deadline_seconds() if deadline is None else deadline
    return action.created_at <= (now or timezone.now()) - timedelta(seconds=deadline)


def overdue_notice(*, limit: int = 200) -> list[int]:
    """Record each decision newly past its deadline, once (its `decision_overdue` event is the notice). The action
    is not touched: it stays open, for a person. Each organization's own deadline applies."""
    now = timezone.now()
    default = deadline_seconds()
    own = limits.deadline_overrides()
    due = Q(created_at__lte=now - timedelta(seconds=default)) & ~Q(org_id__in=list(own))
    for seconds in set(own.values()):
        orgs = [org for org, s in own.items() if s == seconds]
        due |= Q(org_id__in=orgs, created_at__lte=now - timedelta(seconds=seconds))
    found = (
        RecoveryAction.objects.filter(due, status=ActionStatus.OPEN, overdue__isnull=True)
        .exclude(kind__in=WORKSPACE_KINDS)
        .order_by("id")
        .values_list("pk", flat=True)[:limit]
    )
    noticed = []
    for pk in list(found):
        try:
            with transaction.atomic():
                action = (
                    RecoveryAction.objects.select_for_update(of=("self",))
                    .filter(pk=pk, status=ActionStatus.OPEN)
                    .first()
                )
                if action is None:
                    continue
                deadline = own.get(action.org_id, default)
                OverdueDecision.objects.create(action=action, org_id=action.org_id, deadline_seconds=deadline)
                event_append(
                    org_id=action.org_id,
                    task_id=action.task_id,
                    run_id=action.run_id,
                    kind="decision_overdue",
                    actor="supervisor",
                    payload={
                        "action": action.pk,
                        "kind": action.kind,
                        "deadline_seconds": deadline,
                        "waiting_since": action.created_at.isoformat(),
                    },
                )
        except IntegrityError:  # another supervisor noticed it first
            continue
        noticed.append(pk)
    return noticed
