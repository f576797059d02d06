"""Start over: a fresh run from the beginning that reuses nothing, refused while it would be unsafe."""

import pytest
from django.test import Client

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.models import Event, Run, Step
from tasks.services import task_create
from tests.console.scenarios import claim, continuation_action, unknown_outcome_action
from tests.factories import make_agent, make_member, user_token
from tests.helpers import outer_html, plan, visible_text
from tests.recovery import engine
from tests.recovery.engine import SAFE

pytestmark = pytest.mark.django_db


def start_over(api, task_id, **body):
    return api.post(f"/api/tasks/{task_id}/start-over/", body, format="json")


def counts():
    return {"runs": Run.objects.count(), "events": Event.objects.count(), "steps": Step.objects.count()}


def test_start_over_after_a_decision_wait_needs_consent_then_queues_a_fresh_run(org, agent, api):
    action = unknown_outcome_action(org)  # step 1 file_write completed, step 2 file_write cut off
    old = action.run
    before = counts()
    refused = start_over(api, action.task_id)
    assert refused.status_code == 409
    body = refused.json()
    assert (body["code"], body["reason"]) == ("not_eligible", "duplicate_risk_not_accepted")
    assert [(s["run"], s["seq"], s["tool"], s["phase"]) for s in body["steps"]] == [
        (old.pk, 1, "file_write", "completed"),
        (old.pk, 2, "file_write", "dispatched"),
    ]
    assert "twice" in body["detail"]
    assert counts() == before  # nothing changed

    events = Event.objects.order_by("-id").values_list("id", flat=True).first()
    response = start_over(api, action.task_id, accept_duplicate_risk=True)
    assert response.status_code == 202, response.content
    fresh = Run.objects.get(pk=response.json()["run"])
    assert response.json()["continues"] is None
    assert (fresh.status, fresh.continues_id, fresh.attempt, fresh.input) == ("queued", None, 1, old.input)
    assert not Step.objects.filter(run=fresh).exists()  # reuses nothing
    # One transaction, one event, with its actor: the fresh run was queued.
    new_events = list(Event.objects.filter(pk__gt=events))
    assert [(e.kind, e.actor) for e in new_events] == [("run_queued", "olive")]
    payload = new_events[0].payload
    assert payload["fresh_start"] is True and payload["continues"] is None and payload["reuses"] == "nothing"
    assert payload["retired_actions"] == [action.pk] and payload["accepted_duplicate_risk"] is True
    action.refresh_from_db()
    assert action.status == "retired" and "started over by olive" in action.resolution_note
    # The run's API says what it is: it continues nothing.
    data = api.get(f"/api/runs/{fresh.pk}/").json()
    assert data["continues"] is None and data["attempt"] == 1 and data["steps"] == []


def test_start_over_is_refused_while_a_lease_is_live(org, agent, api):
    task = task_create(org=org, actor="t", title="busy", agent="builder", input=plan(SAFE))
    run = claim(task)
    before = counts()
    response = start_over(api, task.pk, accept_duplicate_risk=True)
    assert response.status_code == 409
    assert (response.json()["code"], response.json()["gate"]) == ("gate_closed", "lease_live")
    assert f"Run #{run.pk}" in response.json()["detail"]
    assert counts() == before


def test_start_over_is_refused_while_another_run_is_queued_or_the_task_is_closed(org, agent, api):
    task = task_create(org=org, actor="t", title="waiting", agent="builder", input=plan(SAFE))
    response = start_over(api, task.pk)
    assert response.status_code == 409 and response.json()["reason"] == "run_live"
    engine.run_to_end(engine.first_run(task))  # succeeded: the task is done
    response = start_over(api, task.pk)
    assert (response.status_code, response.json()["gate"]) == (409, "task_closed")


def test_start_over_needs_no_consent_when_nothing_of_notify_mode_was_dispatched(org, agent, api):
    make_agent(org, "careful", auto_resume=False)
    action = continuation_action(org)  # safe steps under an agent that does not resume by itself
    response = start_over(api, action.task_id)
    assert response.status_code == 202, response.content
    action.refresh_from_db()
    assert action.status == "retired"


def test_the_old_chain_is_no_longer_recovered_after_a_fresh_start(org, agent, api):
    task = engine.start(org, [SAFE, SAFE, SAFE])
    old = engine.crash_after_dispatch(engine.first_run(task), 2)  # interrupted; nobody looked at it yet
    response = start_over(api, task.pk)
    assert response.status_code == 202, response.content
    fresh = Run.objects.get(pk=response.json()["run"])
    engine.run_to_end(fresh)
    supervise_once()
    supervise_once()
    assert list(Run.objects.filter(task=task).order_by("id").values_list("pk", flat=True)) == [old.pk, fresh.pk]
    assert not RecoveryAction.objects.filter(run=old).exists()
    # And continuing the old run by hand is refused: the task was started over.
    from recovery.continuations import continuation_create
    from tasks.errors import NotEligible

    with pytest.raises(NotEligible, match="started over"):
        continuation_create(source=old, actor="t", reason="by hand")


def test_start_over_honours_the_idempotency_key(org, agent, api):
    task = engine.start(org, [SAFE])
    engine.crash_after_dispatch(engine.first_run(task), 1)
    first = api.post(f"/api/tasks/{task.pk}/start-over/", {}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    again = api.post(f"/api/tasks/{task.pk}/start-over/", {}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json() and again["Idempotent-Replayed"] == "true"
    assert Run.objects.filter(task=task).count() == 2
    other = api.post(
        f"/api/tasks/{task.pk}/start-over/", {"accept_duplicate_risk": True}, format="json", HTTP_IDEMPOTENCY_KEY="k1"
    )
    assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict"


def test_start_over_respects_roles_organizations_and_private_tasks(
    org, other_org, agent, api, viewer, make_token_client
):
    task = engine.start(org, [SAFE])
    engine.crash_after_dispatch(engine.first_run(task), 1)
    secret = engine.start(org, [SAFE], private=True, creator=make_member(org, "petra", "operator"))
    engine.crash_after_dispatch(engine.first_run(secret), 1)
    stranger = make_token_client(user_token(make_member(other_org, "gina", "operator")))
    before = counts()
    as_viewer = start_over(make_token_client(user_token(viewer)), task.pk)
    assert as_viewer.status_code == 403 and as_viewer.json()["code"] == "forbidden"
    assert start_over(stranger, task.pk).status_code == 404
    assert start_over(api, secret.pk).status_code == 404  # olive is not its creator nor an admin
    assert counts() == before


def test_recovery_unavailable_names_its_reason_and_leaves_start_over_and_cancel(org, agent, api, operator):
    # Step 1 ran scrape_v1 (the worker knew it then); the worker that resumes knows no such tool.
    task = engine.start(org, [("scrape_v1", {"url": "x"}), SAFE, ("scrape_v1", {"url": "y"})])
    old = engine.crash_after_dispatch(engine.first_run(task), 2)
    supervise_once()
    action = RecoveryAction.objects.get(run=old)
    body = api.get(f"/api/actions/{action.pk}/").json()
    assert body["cause"] == "tool_unknown" and body["status"] == "open"
    assert body["evidence"]["remaining"] == ["start_over", "cancel"]
    assert "is unavailable: Start over" in body["next_action"] and "cancel" in body["next_action"]
    assert body["evidence"]["reasons"][0]["code"] == "tool_unknown"
    retry = api.post(f"/api/actions/{action.pk}/retry/", {"version": body["version"]}, format="json")
    assert retry.status_code == 409 and retry.json()["reason"] == "tool_unknown"
    # The card says why and what remains; it counts no attempts and sets no due time, since no attempt can be
    # admitted (it would age into an exhaustion whose "one more attempt" is refused too).
    assert action.due_at is None
    client = Client()
    client.force_login(operator)
    page = client.get(f"/tasks/{task.pk}/").text
    card = visible_text(outer_html(page, f"action-{action.pk}"))
    assert "the worker no longer knows" in card and "Step 3 calls scrape_v1" in card
    assert "is unavailable: Start over" in card and "Cancel action" in card
    assert "attempts used" not in card and "Due" not in card and "Retry" not in card
    assert "Start over" in visible_text(outer_html(page, f"task-{task.pk}"))  # the control the card names
    assert start_over(api, task.pk).status_code == 202


def test_a_subagent_that_no_longer_exists_makes_recovery_unavailable(org, agent, api):
    from tasks.accounts import agent_add
    from tasks.models import Agent

    agent_add(org=org, name="scout")
    task = engine.start(org, [SAFE, ("subagent", {"agent": "scout", "input": plan(SAFE)})])
    old = engine.crash_after_dispatch(engine.first_run(task), 1)
    Agent.objects.filter(org=org, name="scout").delete()
    supervise_once()
    action = RecoveryAction.objects.get(run=old)
    assert action.cause == "agent_missing" and "scout" in action.evidence["reasons"][0]["detail"]
    assert action.evidence["remaining"] == ["start_over", "cancel"]
