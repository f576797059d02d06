"""Every gate of API.md refuses an admission through the API, changes nothing, and admits once lifted.

Gates are evaluated at the moment of the admission (a retry or a decision), not
taken from what a card showed: each test closes the gate *after* the action opened.
"""

import pytest
from django.db.models import F
from django.test import Client

from recovery.action_log import action_open
from recovery.models import RecoveryAction, RecoveryAttempt
from recovery.selectors import current_gate
from recovery.supervisor.loop import supervise_once
from tasks import services
from tasks.models import Run, Task
from tests.factories import make_agent, user_token
from tests.helpers import outer_html, visible_text
from tests.recovery import engine as e

pytestmark = pytest.mark.django_db

STEPS = [e.SAFE, e.WRITE, e.SAFE]  # crashes at 2: a file_write of unknown outcome


def post(client, action_id: int, endpoint: str, version: int, **extra):
    if endpoint == "retry":
        body = {"version": version, "accept_duplicate_risk": True, **extra}
    else:
        body = {"version": version, "outcome": "performed", "note": "report.md is on disk", **extra}
    return client.post(f"/api/actions/{action_id}/{endpoint}/", body, format="json")


def assert_gate(response, gate: str) -> dict:
    assert response.status_code == 409, response.content
    body = response.json()
    assert body["code"] == "gate_closed" and body["gate"] == gate, body
    assert body["detail"]
    return body


def assert_admitted(response, endpoint: str, action: RecoveryAction, runs_before: int) -> Run:
    assert response.status_code == (202 if endpoint == "retry" else 200), response.content
    assert RecoveryAttempt.objects.filter(action=action).count() == 1
    assert Run.objects.count() == runs_before + 1
    attempt = RecoveryAttempt.objects.get(action=action)
    assert attempt.continuation_run is not None and attempt.continuation_run.continues_id == action.run_id
    action.refresh_from_db()
    assert action.status == "retrying"
    return attempt.continuation_run


@pytest.fixture
def parent(org, agent):
    """A parent task whose own first run was stopped before it started (so the child's run is claimed)."""
    task = e.start(org, [e.SAFE], title="parent")
    services.run_request_stop(actor="test", run=e.first_run(task))
    return task


@pytest.fixture
def parked(org, agent, parent) -> RecoveryAction:
    """An open unknown-outcome action on a child task's interrupted run."""
    action = e.parked(org, STEPS, 2, parent=parent.pk)
    assert (action.kind, action.status, action.seq) == ("unknown_outcome", "open", 2)
    return action


# Each closes one task-level or action-level gate after the action opened, and returns how to lift it.


def close_task_paused(api, action, org, parent):
    assert api.post(f"/api/tasks/{action.task_id}/pause/").status_code == 200
    return lambda: api.post(f"/api/tasks/{action.task_id}/resume-task/")


def close_ancestor_paused(api, action, org, parent):
    assert api.post(f"/api/tasks/{parent.pk}/pause/").status_code == 200
    return lambda: api.post(f"/api/tasks/{parent.pk}/resume-task/")


def close_budget_exhausted(api, action, org, parent):
    Task.objects.filter(pk=action.task_id).update(budget_limit=F("budget_used"))
    assert Task.objects.get(pk=action.task_id).budget_used >= 1
    return lambda: Task.objects.filter(pk=action.task_id).update(budget_limit=F("budget_used") + 10)


def close_dependency_open(api, action, org, parent):
    other = e.start(org, [e.SAFE], title="prerequisite")
    Task.objects.get(pk=action.task_id).dependencies.add(other)
    return lambda: Task.objects.filter(pk=other.pk).update(status="done")


def close_task_closed(api, action, org, parent):
    Task.objects.filter(pk=action.task_id).update(status="done")
    return lambda: Task.objects.filter(pk=action.task_id).update(status="blocked")


def close_owner_changed(api, action, org, parent):
    fixer = make_agent(org, "fixer")
    original = Task.objects.get(pk=action.task_id).agent_id
    Task.objects.filter(pk=action.task_id).update(agent=fixer)
    return lambda: Task.objects.filter(pk=action.task_id).update(agent_id=original)


GATES = {
    "task_paused": close_task_paused,
    "ancestor_paused": close_ancestor_paused,
    "budget_exhausted": close_budget_exhausted,
    "dependency_open": close_dependency_open,
    "task_closed": close_task_closed,
    "owner_changed": close_owner_changed,
}


@pytest.mark.parametrize("endpoint", ["retry", "decision"])
@pytest.mark.parametrize("gate", GATES)
def test_a_closed_gate_refuses_the_admission_and_changes_nothing_until_it_lifts(
    api, org, parent, parked, gate, endpoint
):
    lift = GATES[gate](api, parked, org, parent)
    before = e.state(parked)

    body = assert_gate(post(api, parked.pk, endpoint, parked.version), gate)
    assert body["lifted_by"]
    assert e.state(parked) == before  # no run, no attempt, same version, no event

    # Asking again does not wear the gate down.
    assert_gate(post(api, parked.pk, endpoint, parked.version), gate)
    assert e.state(parked) == before

    lift()
    runs = Run.objects.count()
    assert_admitted(post(api, parked.pk, endpoint, parked.version), endpoint, parked, runs)


def test_the_card_shows_the_gate_that_holds_right_now_and_who_lifts_it(api, parked):
    assert api.get(f"/api/actions/{parked.pk}/").json()["gate"] is None
    api.post(f"/api/tasks/{parked.task_id}/pause/")
    gate = api.get(f"/api/actions/{parked.pk}/").json()["gate"]
    assert gate["gate"] == "task_paused" and gate["detail"] and gate["lifted_by"]
    api.post(f"/api/tasks/{parked.task_id}/resume-task/")
    assert api.get(f"/api/actions/{parked.pk}/").json()["gate"] is None


# Who each gate's "lifted by" sentence names, on which task's page that person finds the control, and the
# control's button. The sentence and the page must agree for that role.
LIFTERS = {
    "task_paused": ("an operator", "task", "Resume task"),
    "ancestor_paused": ("an operator", "parent", "Resume task"),
    "budget_exhausted": ("an admin", "task", "Set budget"),
    "dependency_open": ("an operator", "task", "Remove #"),
    "task_closed": ("an operator", "task", "Reopen"),
    "owner_changed": ("an operator", "task", "Reassign"),
}


@pytest.mark.parametrize("gate", GATES)
def test_every_lifted_by_sentence_names_a_control_its_role_finds_on_the_page(
    api, org, parent, parked, gate, operator, admin_user, viewer
):
    GATES[gate](api, parked, org, parent)
    lifted_by = current_gate(RecoveryAction.objects.select_related("task", "run").get(pk=parked.pk)).lifted_by
    role, where, button = LIFTERS[gate]
    assert role in lifted_by, lifted_by
    page_task = parent.pk if where == "parent" else parked.task_id

    def header(user) -> str:
        client = Client()
        client.force_login(user)
        page = client.get(f"/tasks/{parked.task_id}/").text
        if gate != "task_closed":  # a closed task's actions are retired: its header says what reopens it
            assert f"Lifted by {lifted_by}." in visible_text(outer_html(page, f"action-{parked.pk}"))
        return outer_html(client.get(f"/tasks/{page_task}/").text, f"task-{page_task}")

    lifter = admin_user if role == "an admin" else operator
    assert f"<button>{button}" in header(lifter) or f'">{button}' in header(lifter), (gate, button)
    if role == "an admin":  # an operator is not shown a control the sentence does not give them
        assert button not in header(operator)
    assert "<button" not in header(viewer)


# --- lease_live: the source run is still held by a worker --------------------------------------


@pytest.fixture
def held(org, agent) -> RecoveryAction:
    """An action opened on a run whose worker still holds a live lease (step 1 dispatched)."""
    task = e.start(org, [e.WRITE, e.SAFE])
    run = e.claim(e.first_run(task))
    e.plan_step(run, 1)
    e.dispatch_step(run, 1)
    return action_open(
        run=run,
        kind="unknown_outcome",
        cause="unknown_outcome",
        evidence={"seq": 1},
        seq=1,
        recovery_owner="role:operator",
    )


@pytest.mark.parametrize("endpoint", ["retry", "decision"])
def test_a_source_run_with_a_live_lease_cannot_be_taken_over(api, held, endpoint):
    before = e.state(held)
    assert_gate(post(api, held.pk, endpoint, held.version), "lease_live")
    assert e.state(held) == before
    assert Run.objects.get(pk=held.run_id).status == "running"

    e.lapse()  # the worker is gone: its lease lapses and the run is interrupted
    assert Run.objects.get(pk=held.run_id).status == "interrupted"
    runs = Run.objects.count()
    assert_admitted(post(api, held.pk, endpoint, held.version), endpoint, held, runs)


# --- attempts_exhausted ---------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["retry", "decision"])
def test_used_up_attempts_refuse_until_an_admin_grants_one_more(api, parked, admin_user, make_token_client, endpoint):
    # Every attempt this action may have is used (setup: the bound lowered to what was used).
    RecoveryAction.objects.filter(pk=parked.pk).update(max_attempts=F("attempts"))
    before = e.state(parked)
    body = assert_gate(post(api, parked.pk, endpoint, parked.version), "attempts_exhausted")
    assert "admin" in body["lifted_by"]
    assert e.state(parked) == before

    supervise_once()  # attempts used up: open → exhausted
    parked.refresh_from_db()
    assert parked.status == "exhausted"
    admin = make_token_client(user_token(admin_user))
    runs = Run.objects.count()
    r = post(admin, parked.pk, "retry", parked.version, reason="checked the file by hand")
    assert_admitted(r, "retry", parked, runs)
    assert parked.max_attempts == parked.attempts == 1


# --- chain_exhausted ----------------------------------------------------------------------------


def build_chain(org, length: int) -> Run:
    """A chain of `length` runs, each crashing at the next safe step and resumed by the supervisor."""
    task = e.start(org, [e.SAFE] * (length + 1))
    run = e.first_run(task)
    for k in range(1, length + 1):
        run = e.crash_after_dispatch(run, k)
        supervise_once()
        if k < length:
            run = Run.objects.get(continues=run)
            assert run.attempt == k + 1
    return run


def test_a_chain_of_32_runs_refuses_one_more_even_when_an_admin_grants_it(
    org, agent, api, admin_user, make_token_client
):
    last = build_chain(org, 32)
    assert last.attempt == 32
    action = RecoveryAction.objects.get(run=last)
    assert (action.status, action.cause) == ("exhausted", "chain_exhausted")
    assert "32" in action.evidence["reasons"][0]["detail"]

    before = e.state(action)
    admin = make_token_client(user_token(admin_user))
    body = assert_gate(post(admin, action.pk, "retry", action.version, reason="one more"), "chain_exhausted")
    assert "start over" in body["lifted_by"]
    assert e.state(action) == before  # the grant is undone with the refusal: still exhausted, same version
    # An operator may not even ask; exhaustion is lifted by an admin only.
    r = post(api, action.pk, "retry", action.version, reason="one more")
    assert r.status_code == 403 and r.json()["code"] == "forbidden"
    assert e.state(action) == before
