"""Notifications (issue 25, part 3) and decision deadlines (part 4): destinations through the API and the settings
page, an outbox row in the transaction of the event that needs a person, delivery by a real supervisor pass to a
real receiver on 127.0.0.1 (signed, verified with the Standard Webhooks library), retries, giving up, and deadlines
that notify once and never decide."""

import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from recovery import notify
from recovery.actions.commands import actions_settle
from recovery.models import NotificationDelivery, NotificationDestination, OverdueDecision, RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.events import event_append
from tasks.models import Event
from tests.console.scenarios import unknown_outcome_action
from tests.factories import make_member, user_token
from tests.recovery.receivers import start_receiver

ALL = ["decision_waiting", "exhausted", "repair_waiting", "breaker_opened", "deadline_passed"]


@pytest.fixture(autouse=True)
def builder(agent):
    """The agent the scenarios' tasks run under."""
    return agent


@pytest.fixture
def admin_api(admin_user, make_token_client):
    return make_token_client(user_token(admin_user))


@pytest.fixture
def fast_retries(settings):
    """A failed try is due again at once (the backoff is 0 s), so the next pass retries it."""
    settings.CONSOLE_NOTIFY_BACKOFF_SECONDS = 0


@pytest.fixture
def receiver():
    got, stop = start_receiver()
    yield got
    stop()


def add(api, **body):
    return api.post("/api/notifications/destinations/", {"kind": "webhook", "events": ALL, **body}, format="json")


# --- the API -------------------------------------------------------------------------------------------------


def test_a_destination_is_answered_with_its_secret_once_and_listed_without_it(admin_api):
    r = add(admin_api, url="https://user:hunter2@hooks.example.com/services/T0/B0/XYZ?token=abc")
    assert r.status_code == 201, r.content
    secret = r.json()["secret"]
    assert secret.startswith("whsec_")
    assert r.json()["url"] == "https://hooks.example.com/…"
    Webhook(secret)  # a secret the scheme's library accepts

    listed = admin_api.get("/api/notifications/destinations/")
    assert listed.status_code == 200
    (shown,) = listed.json()["results"]
    assert "secret" not in shown and shown["events"] == ALL and shown["failing"] is False
    for hidden in (secret, secret[6:], "hunter2", "XYZ", "token=abc", "/services/"):
        assert hidden not in listed.content.decode()
    assert add(admin_api, url="https://hooks.example.com/2").json()["secret"] != secret


def test_an_apprise_url_is_checked_by_apprise_and_shown_as_its_service_only(admin_api):
    r = add(admin_api, kind="apprise", url="json://user:s3cret@127.0.0.1:9/path", events=["exhausted"])
    assert r.status_code == 201, r.content
    assert r.json()["url"] == "json://…"
    assert "s3cret" not in admin_api.get("/api/notifications/destinations/").content.decode()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"kind": "sms", "url": "https://h.example.com/"}, "invalid_kind"),
        ({"url": "ftp://h.example.com/"}, "invalid_url"),
        ({"url": ""}, "invalid_url"),
        ({"url": "https://"}, "invalid_url"),
        ({"kind": "apprise", "url": "nosuchservice://x"}, "invalid_url"),
        ({"url": "https://h.example.com/", "events": []}, "invalid_events"),
        ({"url": "https://h.example.com/", "events": ["decision_waiting", "tea_time"]}, "invalid_events"),
        ({"url": "https://h.example.com/", "events": "decision_waiting"}, "invalid_events"),
    ],
)
def test_a_bad_destination_is_refused_with_a_stable_code(admin_api, body, code):
    r = add(admin_api, **body)
    assert r.status_code == 400, r.content
    assert r.json()["code"] == code
    assert not NotificationDestination.objects.exists()


def test_only_admins_read_or_add_destinations(org, operator, viewer, make_token_client):
    for person in (operator, viewer):
        api = make_token_client(user_token(person))
        assert add(api, url="https://h.example.com/").status_code == 403
        assert api.get("/api/notifications/destinations/").status_code == 403
        assert api.get("/api/notifications/deliveries/").status_code == 403
    assert make_token_client("nope").get("/api/notifications/destinations/").status_code == 401
    assert not NotificationDestination.objects.exists()


def test_an_admin_of_another_organization_sees_none_of_its_destinations(org, other_org, admin_api, make_token_client):
    add(admin_api, url="https://acme.example.com/hook")
    gina = make_token_client(user_token(make_member(other_org, "gina", "admin")))
    assert gina.get("/api/notifications/destinations/").json()["results"] == []
    assert gina.get("/api/notifications/destinations/?org=acme").status_code == 404
    assert gina.get("/api/notifications/deliveries/?org=acme").status_code == 404
    assert add(gina, url="https://globex.example.com/hook", org="acme").status_code == 404
    assert NotificationDestination.objects.filter(org=other_org).count() == 0


# --- the outbox ----------------------------------------------------------------------------------------------


def test_a_waiting_decision_writes_one_delivery_per_destination_that_wants_it(org, other_org, admin_api, settings):
    settings.CONSOLE_URL = "https://console.example.com"
    wants = add(admin_api, url="https://a.example.com/", events=["decision_waiting"]).json()["id"]
    add(admin_api, url="https://b.example.com/", events=["exhausted"])  # not told of decisions
    failing = add(admin_api, url="https://c.example.com/", events=ALL).json()["id"]
    NotificationDestination.objects.filter(pk=failing).update(failing_since=timezone.now(), failures=3)
    NotificationDestination.objects.create(
        org=other_org, kind="webhook", url="https://g.example.com/", secret="whsec_eA==", events=ALL, created_by="g"
    )
    settings.CONSOLE_NOTIFY_PASS_SECONDS = 0  # nothing is sent: the rows are what this test reads

    action = unknown_outcome_action(org, title="Write the weekly report")

    (delivery,) = NotificationDelivery.objects.all()
    opened = Event.objects.get(kind="action_opened", task_id=action.task_id)
    assert (delivery.destination_id, delivery.event_id, delivery.notice) == (wants, opened.pk, "decision_waiting")
    assert delivery.status == "pending" and delivery.attempts == 0
    assert delivery.payload == {
        "type": "decision_waiting",
        "timestamp": opened.created_at.isoformat(),
        "data": {
            "task": action.task_id,
            "title": "Write the weekly report",
            "state": "needs_decision",
            "action": action.pk,
            "url": f"https://console.example.com/tasks/{action.task_id}/",
        },
    }


def test_an_exhaustion_is_told_to_those_who_want_exhaustions(org, admin_api, settings):
    settings.CONSOLE_NOTIFY_PASS_SECONDS = 0
    add(admin_api, url="https://a.example.com/", events=["exhausted"])
    action = unknown_outcome_action(org, title="Post the invoice")
    assert not NotificationDelivery.objects.exists()  # a waiting decision is not an exhaustion
    actions_settle(now=timezone.now() + timedelta(days=3))  # its due time passed: exhausted
    (delivery,) = NotificationDelivery.objects.all()
    assert delivery.notice == "exhausted" and delivery.payload["data"]["state"] == "exhausted"
    assert delivery.event_id == Event.objects.get(kind="action_exhausted", task_id=action.task_id).pk


@pytest.mark.parametrize(
    ("kind", "payload", "notice"),
    [
        ("action_opened", {"kind": "unknown_outcome", "status": "open"}, "decision_waiting"),
        ("action_opened", {"kind": "continuation", "status": "open"}, "decision_waiting"),
        ("action_opened", {"kind": "continuation", "status": "exhausted"}, "exhausted"),
        ("action_opened", {"kind": "workspace_validation", "status": "open"}, "repair_waiting"),
        ("action_opened", {"kind": "workspace_export", "status": "open"}, "repair_waiting"),
        ("action_exhausted", {"kind": "unknown_outcome", "status": "exhausted"}, "exhausted"),
        ("breaker_opened", {"agent": "coder"}, "breaker_opened"),
        ("decision_overdue", {"kind": "unknown_outcome"}, "deadline_passed"),
        ("action_decided", {"kind": "unknown_outcome"}, None),
        ("step_completed", {}, None),
    ],
)
def test_which_events_are_notices(kind, payload, notice):
    assert notify.notice_of(Event(kind=kind, payload=payload)) == notice


def test_no_delivery_outlives_the_event_it_tells_of(org, admin_api):
    add(admin_api, url="https://a.example.com/")
    with pytest.raises(RuntimeError), transaction.atomic():
        event_append(org_id=org.pk, kind="action_exhausted", actor="t", payload={"action": 1, "status": "exhausted"})
        assert NotificationDelivery.objects.count() == 1  # written in the event's transaction
        raise RuntimeError("the change is rolled back")
    assert not NotificationDelivery.objects.exists()


def test_a_breaker_notice_names_the_agent_and_failure_and_links_to_the_breaker(org, admin_api):
    add(admin_api, url="https://a.example.com/", events=["breaker_opened"])
    event_append(
        org_id=org.pk,
        kind="breaker_opened",
        actor="supervisor",
        payload={"breaker": 7, "agent": "coder", "signature": "http_post / lease_lapsed", "tasks": 11},
    )
    (delivery,) = NotificationDelivery.objects.all()
    data = delivery.payload["data"]
    assert data["task"] is None and data["state"] == "breaker_open"
    assert data["title"] == "Automatic recovery paused for coder: http_post / lease_lapsed"
    assert data["url"].endswith("/breakers/7/")


def test_the_delivery_log_is_paged_newest_first_and_next_says_when_there_is_more(org, admin_api):
    dest = NotificationDestination.objects.get(pk=add(admin_api, url="https://a.example.com/").json()["id"])
    now = timezone.now()
    NotificationDelivery.objects.bulk_create(
        NotificationDelivery(
            org=org, destination=dest, notice="decision_waiting", event_id=i, payload={}, next_attempt_at=now
        )
        for i in range(notify.DELIVERY_LOG + 5)
    )
    first = admin_api.get("/api/notifications/deliveries/").json()
    assert len(first["results"]) == notify.DELIVERY_LOG and first["next"]
    ids = [d["id"] for d in first["results"]]
    assert ids == sorted(ids, reverse=True)
    rest = admin_api.get(first["next"]).json()
    assert len(rest["results"]) == 5 and rest["next"] is None
    assert max(d["id"] for d in rest["results"]) < min(ids)


# --- delivery by the supervisor ------------------------------------------------------------------------------


def test_a_receiver_gets_one_signed_delivery_per_waiting_decision_retried_after_a_500(
    org, admin_api, admin_user, fast_retries
):
    """The issue's test: a real receiver on 127.0.0.1, real supervisor passes, the scheme's own verification."""
    receiver, stop = start_receiver(500)
    try:
        made = add(admin_api, url=receiver.url, events=["decision_waiting"]).json()
        secret = made["secret"]
        first = unknown_outcome_action(org, title="Write the weekly report")  # its pass's try gets the 500
        second = unknown_outcome_action(org, title="Write the monthly report")
        supervise_once()
        supervise_once()
    finally:
        stop()

    assert [r.answered for r in receiver.got] == [500, 204, 204]
    hook = Webhook(secret)
    told = {}
    for got in receiver.accepted():
        body = hook.verify(got.body, got.headers)  # raises unless signed with the destination's secret
        assert body["type"] == "decision_waiting"
        told.setdefault(body["data"]["action"], []).append(got.headers["webhook-id"])
    assert sorted(told) == sorted([first.pk, second.pk])  # exactly one accepted delivery per waiting decision
    assert all(len(ids) == 1 for ids in told.values())
    refused = receiver.got[0]
    assert refused.headers["webhook-id"] == told[first.pk][0]  # the retry is the same message
    with pytest.raises(WebhookVerificationError):  # a wrong secret fails the scheme's verification
        Webhook("whsec_" + "QUJD" * 8).verify(refused.body, refused.headers)

    log = {d["task"]: d for d in admin_api.get("/api/notifications/deliveries/").json()["results"]}
    retried = log[first.task_id]
    assert (retried["status"], retried["attempts"], retried["event"]) == ("delivered", 2, "decision_waiting")
    assert [t["status"] for t in retried["tries"]] == [500, 204]
    assert (log[second.task_id]["status"], log[second.task_id]["attempts"]) == ("delivered", 1)

    page = Client()
    page.force_login(admin_user)
    html = page.get("/settings/notifications/").content.decode()
    row = html[html.index(f'id="delivery-{retried["id"]}"') :]
    row = row[: row.index("</tr>")]
    assert "HTTP 500" in row and "HTTP 204" in row and "Delivered" in row
    assert secret not in html


def test_a_destination_that_keeps_failing_is_given_up_and_shown_failing(org, admin_api, admin_user, settings):
    settings.CONSOLE_NOTIFY_BACKOFF_SECONDS = 0
    settings.CONSOLE_NOTIFY_MAX_ATTEMPTS = 2
    settings.CONSOLE_NOTIFY_FAILING_AFTER = 1
    receiver, stop = start_receiver(500, 503, 500, 500)
    try:
        dest = add(admin_api, url=receiver.url, events=["decision_waiting"]).json()["id"]
        first = unknown_outcome_action(org, title="Write the weekly report")
        report = supervise_once()
        assert not report.failed
        unknown_outcome_action(org, title="Written after it failed")
        supervise_once()
    finally:
        stop()

    assert [r.answered for r in receiver.got] == [500, 503]  # two tries, then given up; nothing more is sent
    delivery = NotificationDelivery.objects.get(task_id=first.task_id)
    assert (delivery.status, delivery.attempts) == ("given_up", 2)
    assert NotificationDelivery.objects.count() == 1  # a failing destination gets no new deliveries
    destination = NotificationDestination.objects.get(pk=dest)
    assert destination.failing_since is not None and destination.failures == 1

    page = Client()
    page.force_login(admin_user)
    html = page.get("/settings/notifications/").content.decode()
    assert "Failing: 1 delivery in a row were given up" in html
    assert page.post(f"/settings/notifications/{dest}/enable/").status_code == 302
    destination.refresh_from_db()
    assert destination.failing_since is None and destination.failures == 0


def test_a_receiver_that_is_gone_costs_the_pass_nothing(org, admin_api):
    receiver, stop = start_receiver()
    stop()  # nothing listens there any more
    add(admin_api, url=receiver.url, events=["decision_waiting"])
    action = unknown_outcome_action(org)
    report = supervise_once()
    assert not report.failed
    delivery = NotificationDelivery.objects.get(task_id=action.task_id)
    assert delivery.status == "failed" and delivery.tries[0]["status"] is None and "Connect" in delivery.last_error


def test_an_apprise_destination_is_told_through_apprise(org, admin_api, receiver):
    port = receiver.url.split(":")[2].split("/")[0]
    add(admin_api, kind="apprise", url=f"json://127.0.0.1:{port}/hook", events=["decision_waiting"])
    action = unknown_outcome_action(org, title="Write the weekly report")
    (got,) = receiver.accepted()
    sent = json.loads(got.body)
    assert "A decision is waiting" in sent["title"] + sent["message"]
    assert f"task #{action.task_id}" in sent["message"] and "Write the weekly report" in sent["message"]
    assert NotificationDelivery.objects.get().status == "delivered"


# --- the settings page ---------------------------------------------------------------------------------------


def test_the_settings_page_adds_a_destination_and_shows_its_secret_once(org, admin_user, operator):
    page = Client(enforce_csrf_checks=False)
    page.force_login(admin_user)
    r = page.post(
        "/settings/notifications/",
        {"kind": "webhook", "url": "https://hooks.example.com/T/B/XYZ", "events": ["decision_waiting", "exhausted"]},
    )
    assert r.status_code == 200
    dest = NotificationDestination.objects.get()
    assert dest.secret in r.content.decode() and dest.events == ["decision_waiting", "exhausted"]
    again = page.get("/settings/notifications/").content.decode()
    assert dest.secret not in again and "XYZ" not in again and "https://hooks.example.com/…" in again

    bad = page.post("/settings/notifications/", {"kind": "webhook", "url": "ftp://x", "events": ["exhausted"]})
    assert bad.status_code == 400 and "http:// or https://" in bad.content.decode()
    assert NotificationDestination.objects.count() == 1

    other = Client()
    other.force_login(operator)
    assert other.get("/settings/notifications/").status_code == 403
    refused = other.post("/settings/notifications/", {"kind": "webhook", "url": "https://x.example.com/"})
    assert refused.status_code == 403


# --- decision deadlines --------------------------------------------------------------------------------------


def test_a_decision_past_its_deadline_is_overdue_notified_once_and_never_decided(
    org, admin_api, admin_user, operator, settings
):
    settings.CONSOLE_DECISION_DEADLINE_SECONDS = 3600
    receiver, stop = start_receiver()
    try:
        add(admin_api, url=receiver.url, events=["deadline_passed"])
        late = unknown_outcome_action(org, title="Waited all afternoon")
        fresh = unknown_outcome_action(org, title="Just opened")
        RecoveryAction.objects.filter(pk=late.pk).update(created_at=timezone.now() - timedelta(hours=2))
        late.refresh_from_db()
        version = late.version

        page = Client()
        page.force_login(operator)
        board = page.get("/?state=all").content.decode()
        row = board[board.index(f'id="task-{late.task_id}"') :]
        assert 'class="badge overdue"' in row[: row.index("</tr>")]
        other = board[board.index(f'id="task-{fresh.task_id}"') :]
        assert "badge overdue" not in other[: other.index("</tr>")]
        inbox = page.get("/inbox/").content.decode()
        item = inbox[inbox.index(f'id="inbox-action-{late.pk}"') :]
        assert "Waiting longer than the 1 hour deadline" in item[: item.index("</li>")]

        supervise_once()
        supervise_once()
    finally:
        stop()

    assert OverdueDecision.objects.filter(action=late).count() == 1
    assert not OverdueDecision.objects.filter(action=fresh).exists()
    assert Event.objects.filter(kind="decision_overdue").count() == 1
    (got,) = receiver.accepted()  # notified once over two passes
    body = Webhook(NotificationDestination.objects.get().secret).verify(got.body, got.headers)
    assert body["type"] == "deadline_passed" and body["data"]["action"] == late.pk
    late.refresh_from_db()
    assert (late.status, late.decision, late.version) == ("open", "", version)  # the deadline decided nothing
