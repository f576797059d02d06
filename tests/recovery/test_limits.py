"""Recovery limits per organization (DESIGN §14): the breaker's threshold and the decision deadline an admin sets for
the organization, the deployment's defaults for every other, and the settings page that sets them."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from recovery import limits, notify
from recovery.models import OverdueDecision, RecoveryAction, RecoveryBreaker
from recovery.supervisor.loop import supervise_once
from tasks.errors import Forbidden, Invalid
from tasks.models import Event, Organization, Run
from tests.console.scenarios import unknown_outcome_action
from tests.factories import make_agent, make_member
from tests.recovery import engine as e

SAFE3 = [e.SAFE, e.SAFE, e.SAFE]


@pytest.fixture
def defaults(settings):
    settings.CONSOLE_BREAKER_TASKS = 3
    settings.CONSOLE_BREAKER_WINDOW_SECONDS = 600
    settings.CONSOLE_BREAKER_COOLOFF_SECONDS = 900
    settings.CONSOLE_DECISION_DEADLINE_SECONDS = 3600
    return settings


def continued(runs: list[Run]) -> list[Run]:
    return [r for r in runs if Run.objects.filter(continues=r).exists()]


@pytest.mark.django_db
def test_an_organizations_threshold_of_two_trips_at_its_third_task_while_another_keeps_the_default(
    org, other_org, agent, admin_user, defaults
):
    make_agent(other_org, "builder")
    limits.org_limits_set(user=admin_user, org_id=org.pk, values={"breaker_tasks": 2})
    ours = [e.interrupted(org, SAFE3, 2, title=f"acme {i}") for i in range(3)]
    theirs = [e.interrupted(other_org, SAFE3, 2, title=f"globex {i}") for i in range(3)]

    report = supervise_once()

    assert continued(ours) == ours[:2] and report.held == [ours[2].pk]
    (b,) = RecoveryBreaker.objects.all()
    assert (b.org_id, b.state, b.tasks) == (org.pk, "open", 3)
    assert Event.objects.get(kind="breaker_opened").payload["threshold"] == 2
    assert continued(theirs) == theirs, "globex keeps the default threshold of 3: three tasks do not trip it"


@pytest.mark.django_db
def test_an_organizations_cool_off_half_opens_its_breaker_and_not_another_ones(org, other_org, agent, defaults):
    make_agent(other_org, "builder")
    Organization.objects.filter(pk=org.pk).update(breaker_tasks=1, breaker_cooloff_seconds=60)
    Organization.objects.filter(pk=other_org.pk).update(breaker_tasks=1)
    for o in (org, other_org):
        for i in range(2):
            e.interrupted(o, SAFE3, 2, title=f"{o.slug} {i}")
    supervise_once()
    assert RecoveryBreaker.objects.filter(state="open").count() == 2
    RecoveryBreaker.objects.update(opened_at=timezone.now() - timedelta(seconds=120))

    supervise_once()

    assert dict(RecoveryBreaker.objects.values_list("org__slug", "state")) == {"acme": "half_open", "globex": "open"}


@pytest.mark.django_db
def test_an_organizations_deadline_of_a_minute_marks_its_decision_overdue_and_not_another_ones(
    org, other_org, admin_user, operator, defaults
):
    make_agent(org, "builder")
    make_agent(other_org, "builder")
    limits.org_limits_set(user=admin_user, org_id=org.pk, values={"decision_deadline_seconds": 60})
    ours = unknown_outcome_action(org, title="acme waits")
    theirs = unknown_outcome_action(other_org, title="globex waits")
    RecoveryAction.objects.filter(pk__in=[ours.pk, theirs.pk]).update(created_at=timezone.now() - timedelta(minutes=5))

    page = Client()
    page.force_login(operator)
    board = page.get("/?state=all").content.decode()
    row = board[board.index(f'id="task-{ours.task_id}"') :]
    assert 'class="badge overdue"' in row[: row.index("</tr>")]
    inbox = page.get("/inbox/").content.decode()
    assert "Waiting longer than the 1 minute deadline" in inbox

    globex = Client()
    globex.force_login(make_member(other_org, "gina", "operator"))
    board = globex.get("/?state=all").content.decode()
    row = board[board.index(f'id="task-{theirs.task_id}"') :]
    assert "badge overdue" not in row[: row.index("</tr>")], "globex keeps the default deadline of an hour"

    supervise_once()
    (late,) = OverdueDecision.objects.all()
    assert (late.action_id, late.deadline_seconds) == (ours.pk, 60)
    theirs.refresh_from_db()
    assert not notify.is_overdue(theirs, deadline=notify.deadline_seconds(other_org))


# --- the settings page -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_admin_sets_the_limits_and_blank_keeps_the_default(org, admin_user, defaults):
    page = Client()
    page.force_login(admin_user)
    shown = page.get("/settings/recovery/").content.decode()
    assert "Recovery limits" in shown and "Blank: the deployment&#x27;s default, 3 tasks." in shown
    assert "Blank: the deployment&#x27;s default, 1 hour." in shown

    saved = page.post(
        "/settings/recovery/",
        {
            "breaker_tasks": "5",
            "breaker_window_seconds": "",
            "breaker_cooloff_seconds": "",
            "decision_deadline_seconds": "7200",
        },
        follow=True,
    )
    assert "Recovery limits saved." in saved.content.decode()
    org.refresh_from_db()
    assert (org.breaker_tasks, org.breaker_window_seconds, org.decision_deadline_seconds) == (5, None, 7200)
    assert limits.limits_of(org) == limits.Limits(5, 600, 900, 7200)
    event = Event.objects.get(kind="org_recovery_settings_changed")
    assert event.payload["before"]["breaker_tasks"] is None and event.payload["after"]["breaker_tasks"] == 5
    assert event.actor == "ada"

    page.post("/settings/recovery/", {"breaker_tasks": "", "decision_deadline_seconds": "7200"})
    org.refresh_from_db()
    assert org.breaker_tasks is None, "blank is the default again"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "typed"),
    [
        ("breaker_tasks", "0"),
        ("breaker_tasks", "10001"),
        ("breaker_window_seconds", "59"),
        ("breaker_cooloff_seconds", "86401"),
        ("decision_deadline_seconds", "2592001"),
        ("decision_deadline_seconds", "an hour"),
    ],
)
def test_a_limit_out_of_bounds_is_refused_on_the_page_with_what_was_typed(org, admin_user, field, typed):
    page = Client()
    page.force_login(admin_user)
    refused = page.post("/settings/recovery/", {field: typed})
    assert refused.status_code == 400
    body = refused.content.decode()
    assert 'role="alert"' in body and "or blank for the deployment" in body
    assert f'value="{typed}" aria-describedby="limit-{field}-help" aria-invalid="true"' in body
    org.refresh_from_db()
    assert getattr(org, field) is None
    assert not Event.objects.filter(kind="org_recovery_settings_changed").exists()


@pytest.mark.django_db
def test_operators_and_viewers_are_refused_the_page_and_the_service(org, operator, viewer):
    for person in (operator, viewer):
        page = Client()
        page.force_login(person)
        assert page.get("/settings/recovery/").status_code == 403
        assert page.post("/settings/recovery/", {"breaker_tasks": "2"}).status_code == 403
    with pytest.raises(Forbidden):
        limits.org_limits_set(user=operator, org_id=org.pk, values={"breaker_tasks": 2})
    org.refresh_from_db()
    assert org.breaker_tasks is None


@pytest.mark.django_db
def test_the_service_refuses_a_value_out_of_bounds(org, admin_user):
    with pytest.raises(Invalid):
        limits.org_limits_set(user=admin_user, org_id=org.pk, values={"breaker_window_seconds": 30})


@pytest.mark.django_db
def test_an_overdue_decision_is_marked_on_the_task_pages_action_card(org, operator, defaults):
    make_agent(org, "builder")
    late = unknown_outcome_action(org, title="Waited all afternoon")
    fresh = unknown_outcome_action(org, title="Just opened")
    RecoveryAction.objects.filter(pk=late.pk).update(created_at=timezone.now() - timedelta(hours=2))
    page = Client()
    page.force_login(operator)

    def card(action) -> str:
        body = page.get(f"/tasks/{action.task_id}/").content.decode()
        start = body.index(f'id="action-{action.pk}"')
        return body[start : body.index("</article>", start)]

    marked = card(late)
    assert 'class="badge overdue"' in marked
    assert "Waiting longer than the 1 hour deadline; it still waits for a person." in marked
    assert "badge overdue" not in card(fresh)
