"""Task controls (DESIGN §6b) through the API: reassign, continue now, close / reopen, budget, dependencies."""

import pytest

from recovery.actions import action_cancel
from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.models import Event, Message, Run, Task
from tasks.services import run_request_stop
from tests.factories import make_agent, make_member, user_token
from tests.recovery import engine as e


@pytest.fixture
def other(org):
    return make_agent(org, "reviewer")


@pytest.fixture
def admin_api(admin_user, make_token_client):
    return make_token_client(user_token(admin_user))


@pytest.fixture
def viewer_api(viewer, make_token_client):
    return make_token_client(user_token(viewer))


def post(client, path, body=None, key=None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return client.post(path, body or {}, format="json", **headers)


def code(response):
    return response.status_code, response.json().get("code")


# --- reassign ---------------------------------------------------------------------------------


def test_reassigning_records_who_and_why_and_the_old_owners_action_can_no_longer_admit(api, org, agent, other):
    action = e.parked(org, [e.SAFE, e.WRITE], 2)
    r = post(api, f"/api/tasks/{action.task_id}/owner/", {"agent": "reviewer", "reason": "builder is busy"})
    assert r.status_code == 200, r.content
    assert r.json()["agent"] == "reviewer"
    event = Event.objects.get(kind="task_reassigned")
    assert event.actor == "olive" and event.payload == {
        "from": "builder",
        "to": "reviewer",
        "reason": "builder is busy",
    }
    r = post(api, f"/api/actions/{action.pk}/retry/", {"version": action.version, "accept_duplicate_risk": True})
    assert r.status_code == 409 and r.json()["gate"] == "owner_changed"
    assert "reassign the task back to builder" in r.json()["lifted_by"]


def test_reassigning_cancels_the_old_owners_queued_run_and_is_refused_while_a_run_executes(api, org, agent, other):
    task = e.start(org, [e.SAFE, e.SAFE])
    queued = e.first_run(task)
    r = post(api, f"/api/tasks/{task.pk}/owner/", {"agent": "reviewer"})
    assert r.status_code == 200
    queued.refresh_from_db()
    assert queued.status == "cancelled" and queued.error_code == "owner_changed"
    # Nothing had started: the task's first run is queued again, under its new owner.
    run = Run.objects.get(task=task, status="queued")
    assert run.agent.name == "reviewer" and run.continues_id is None and r.json()["current_run"] == run.pk
    e.claim(run)
    r = post(api, f"/api/tasks/{task.pk}/owner/", {"agent": "builder"})
    assert code(r) == (409, "not_eligible") and r.json()["reason"] == "run_live"
    assert Task.objects.get(pk=task.pk).agent.name == "reviewer"


@pytest.mark.parametrize("agent_name", ["nobody", "builder-of-globex"])
def test_an_agent_the_caller_cannot_see_is_not_found(api, org, agent, other_org, agent_name):
    make_agent(other_org, "builder-of-globex")
    task = e.start(org, [e.SAFE])
    r = post(api, f"/api/tasks/{task.pk}/owner/", {"agent": agent_name})
    assert code(r) == (404, "not_found")
    assert Task.objects.get(pk=task.pk).agent.name == "builder"


def test_task_controls_are_for_operators_and_another_organizations_task_is_not_found(
    api, viewer_api, org, agent, other_org, make_token_client
):
    task = e.start(org, [e.SAFE])
    outsider = make_member(other_org, "gina", "operator")
    outsider_api = make_token_client(user_token(outsider))
    before = Event.objects.count()
    for path, body in [
        ("owner", {"agent": "builder"}),
        ("continue", {}),
        ("close", {"resolution": "done", "reason": "x"}),
        ("reopen", {"reason": "x"}),
        ("dependencies", {"add": []}),
        ("budget", {"limit": 3, "reason": "x"}),
    ]:
        assert code(post(viewer_api, f"/api/tasks/{task.pk}/{path}/", body)) == (403, "forbidden"), path
        assert code(post(outsider_api, f"/api/tasks/{task.pk}/{path}/", body)) == (404, "not_found"), path
    assert code(post(api, f"/api/tasks/{task.pk}/budget/", {"limit": 3, "reason": "x"})) == (403, "forbidden")
    assert Event.objects.count() == before


def test_a_control_with_an_idempotency_key_takes_effect_once(api, org, agent, other):
    task = e.start(org, [e.SAFE])
    body = {"resolution": "cancelled", "reason": "duplicate of #1"}
    first = post(api, f"/api/tasks/{task.pk}/close/", body, key="close-1")
    again = post(api, f"/api/tasks/{task.pk}/close/", body, key="close-1")
    assert first.status_code == again.status_code == 200
    assert again["Idempotent-Replayed"] == "true" and first.json() == again.json()
    assert Event.objects.filter(kind="task_closed").count() == 1
    other_body = post(api, f"/api/tasks/{task.pk}/close/", {"resolution": "done", "reason": "x"}, key="close-1")
    assert code(other_body) == (409, "idempotency_conflict")


def _continuable(org, operator):
    make_agent(org, "careful", auto_resume=False)
    run = e.interrupted(org, [e.SAFE, e.SAFE], 1, agent="careful")
    supervise_once()
    action = RecoveryAction.objects.get(run=run)
    action_cancel(action_id=action.pk, user=operator, version=action.version)
    return Task.objects.get(pk=run.task_id)


# Each control: how to set up its task, its path and body, and the one event it appends.
CONTROLS = {
    "owner": (lambda org, op: e.start(org, [e.SAFE]), {"agent": "reviewer", "reason": "x"}, "task_reassigned"),
    "continue": (_continuable, {"note": "go on"}, "task_continued"),
    "reopen": (None, {"reason": "not finished after all"}, "task_reopened"),
    "budget": (lambda org, op: e.start(org, [e.SAFE]), {"limit": 9, "reason": "x"}, "task_budget_set"),
    "dependencies": (None, None, "task_dependencies_changed"),
}


@pytest.mark.parametrize("control", sorted(CONTROLS))
def test_every_control_replays_a_repeated_idempotency_key_and_takes_effect_once(
    api, admin_api, org, agent, other, operator, control
):
    setup, body, kind = CONTROLS[control]
    if control == "reopen":
        task = e.start(org, [e.SAFE])
        assert post(api, f"/api/tasks/{task.pk}/close/", {"resolution": "done", "reason": "x"}).status_code == 200
    elif control == "dependencies":
        task = e.start(org, [e.SAFE])
        body = {"add": [e.start(org, [e.SAFE], title="first").pk]}
    else:
        task = setup(org, operator)
    client = admin_api if control == "budget" else api
    path = f"/api/tasks/{task.pk}/{control}/"
    first = post(client, path, body, key=f"{control}-1")
    again = post(client, path, body, key=f"{control}-1")
    assert first.status_code == again.status_code and first.status_code in (200, 202), first.content
    assert again["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert Event.objects.filter(task_id=task.pk, kind=kind).count() == 1
    runs = Run.objects.filter(task_id=task.pk).count()
    conflict = post(client, path, {**body, "reason": "another body", "note": "another"}, key=f"{control}-1")
    assert code(conflict) == (409, "idempotency_conflict")
    assert Event.objects.filter(task_id=task.pk, kind=kind).count() == 1
    assert Run.objects.filter(task_id=task.pk).count() == runs


# --- continue now ----------------------------------------------------------------------------


def test_after_a_cancelled_action_continue_now_continues_a_safe_run(api, org, operator):
    make_agent(org, "careful", auto_resume=False)
    run = e.interrupted(org, [e.SAFE, e.SAFE], 1, agent="careful")
    supervise_once()
    action = RecoveryAction.objects.get(run=run)
    r = post(api, f"/api/tasks/{run.task_id}/continue/")
    assert code(r) == (409, "needs_decision") and r.json()["action"] == action.pk  # the live action decides
    action_cancel(action_id=action.pk, user=operator, version=action.version)
    r = post(api, f"/api/tasks/{run.task_id}/continue/", {"note": "checked, go on"})
    assert r.status_code == 202, r.content
    cont = Run.objects.get(pk=r.json()["run"])
    assert cont.continues_id == run.pk and cont.status == "queued"
    event = Event.objects.get(kind="task_continued")
    assert event.actor == "olive" and event.payload["note"] == "checked, go on"
    claimed = e.claim(cont)
    e.advance(claimed, 2)
    assert e.finish(claimed).status == "succeeded"


def test_continue_now_on_an_undecided_unknown_outcome_is_refused_with_the_action_that_decides(
    api, org, agent, operator
):
    action = e.parked(org, [e.SAFE, e.POST], 2)
    action_cancel(action_id=action.pk, user=operator, version=action.version)
    runs = Run.objects.count()
    r = post(api, f"/api/tasks/{action.task_id}/continue/")
    assert code(r) == (409, "needs_decision")
    fresh = RecoveryAction.objects.get(pk=r.json()["action"])
    assert (fresh.kind, fresh.status, fresh.seq, fresh.run_id) == ("unknown_outcome", "open", 2, action.run_id)
    assert r.json()["seq"] == 2 and Run.objects.count() == runs
    # Asking again names the same action; nothing more is opened.
    again = post(api, f"/api/tasks/{action.task_id}/continue/")
    assert again.json()["action"] == fresh.pk and RecoveryAction.objects.count() == 2


def test_continue_now_is_refused_by_a_closed_gate_and_while_a_run_is_live(api, org, agent, operator):
    make_agent(org, "careful", auto_resume=False)
    run = e.interrupted(org, [e.SAFE], 1, agent="careful")
    supervise_once()
    action = RecoveryAction.objects.get(run=run)
    action_cancel(action_id=action.pk, user=operator, version=action.version)
    assert post(api, f"/api/tasks/{run.task_id}/pause/").status_code == 200
    r = post(api, f"/api/tasks/{run.task_id}/continue/")
    assert code(r) == (409, "gate_closed") and r.json()["gate"] == "task_paused"
    post(api, f"/api/tasks/{run.task_id}/resume-task/")
    assert post(api, f"/api/tasks/{run.task_id}/continue/").status_code == 202
    r = post(api, f"/api/tasks/{run.task_id}/continue/")
    assert code(r) == (409, "not_eligible") and r.json()["reason"] == "run_live"


# --- exhaustion is a bound (issue 20, item 9) ----------------------------------------------------------


def exhausted_chain(org):
    """Step 2 (replay) of a task cut off in two runs of its chain: an exhausted action, waiting for an admin."""
    first = e.interrupted(org, [e.SAFE, e.SAFE, e.SAFE], 2)
    supervise_once()
    second = e.crash_after_dispatch(Run.objects.get(continues=first), 2)
    supervise_once()
    action = RecoveryAction.objects.get(run=second)
    assert (action.status, action.exhaustion) == ("exhausted", "interrupted_twice")
    return second, action


def test_an_exhausted_step_admits_another_attempt_only_by_the_admins_grant_the_card_names(
    api, admin_api, org, agent, operator
):
    second, action = exhausted_chain(org)
    task_id = action.task_id
    # While the exhausted action is live, Continue now is refused with the gate and who lifts it.
    r = post(api, f"/api/tasks/{task_id}/continue/")
    assert code(r) == (409, "gate_closed") and r.json()["gate"] == "attempts_exhausted"
    assert r.json()["action"] == action.pk and "an admin" in r.json()["lifted_by"]
    # The bypass: an operator cancels the action, then presses Continue now. Refused the same way; the bound is
    # asked about again on an action of its own, for the admin's grant.
    action_cancel(action_id=action.pk, user=operator, version=action.version)
    runs = Run.objects.count()
    r = post(api, f"/api/tasks/{task_id}/continue/")
    assert code(r) == (409, "gate_closed") and r.json()["gate"] == "attempts_exhausted", r.json()
    body = r.json()
    reopened = RecoveryAction.objects.get(pk=body["action"])
    assert (reopened.status, reopened.exhaustion, reopened.run_id) == ("exhausted", "interrupted_twice", second.pk)
    assert body["lifted_by"] == f"an admin, with Grant one more attempt on recovery action #{reopened.pk}"
    assert "Step 2 was interrupted twice in this chain" in body["detail"]
    assert Run.objects.count() == runs  # the step did not run a third time
    # An admin's Continue now is no grant either: the grant is on the card, with a reason.
    assert code(post(admin_api, f"/api/tasks/{task_id}/continue/")) == (409, "gate_closed")
    # The card's grant admits exactly one more attempt.
    r = post(admin_api, f"/api/actions/{reopened.pk}/retry/", {"version": reopened.version, "reason": "disk fixed"})
    assert r.status_code == 202, r.content
    third = Run.objects.get(continues=second)
    assert third.status == "queued" and Run.objects.count() == runs + 1


def test_bulk_continue_respects_the_bound_and_says_which_gate_and_who_lifts_it(org, agent, operator):
    from recovery.bulk.operations import bulk_advance, bulk_execute, bulk_preview
    from recovery.models import BulkItem

    _, action = exhausted_chain(org)
    action_cancel(action_id=action.pk, user=operator, version=action.version)
    op = bulk_preview(user=operator, action="continue", ids=[action.task_id])
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    bulk_advance()  # the supervisor works through started bulk operations
    item = BulkItem.objects.get(op=op)
    assert (item.result, item.reason) == ("skipped", "attempts_exhausted"), (item.result, item.reason, item.detail)
    assert "Grant one more attempt" in item.detail or "waits for an admin" in item.detail
    assert not Run.objects.filter(continues=action.run).exists()


def test_continue_now_is_bounded_per_chain_like_automatic_recovery(api, org, agent):
    """A step that fails the same way cannot be continued forever: a chain holds at most 32 runs."""
    task = e.start(org, [("file_read", {"path": "missing.txt"})])
    run = e.first_run(task)
    for _ in range(32):
        run = e.claim(run)
        e.plan_step(run, 1)
        e.dispatch_step(run, 1)
        e.complete_step(run, 1, ok=False, error="no such file")
        e.finish(run, status="failed")
        r = post(api, f"/api/tasks/{task.pk}/continue/")
        if r.status_code != 202:
            break
        run = Run.objects.get(pk=r.json()["run"])
    assert Run.objects.filter(task=task).count() == 32
    assert code(r) == (409, "gate_closed") and r.json()["gate"] == "chain_exhausted", r.json()
    assert "32 runs" in r.json()["detail"] and r.json()["lifted_by"] == "nobody: start over or close the task"


# --- close and reopen ---------------------------------------------------------------------------


def test_close_stops_the_live_run_retires_live_actions_and_marks_waiting_follow_ups_not_delivered(
    api, org, agent, operator
):
    action = e.parked(org, [e.SAFE, e.WRITE], 2)
    from recovery.followups import message_save

    task = Task.objects.get(pk=action.task_id)
    message = message_save(user=operator, task=task, body="please also update the index")
    r = post(api, f"/api/tasks/{task.pk}/close/", {"resolution": "cancelled", "reason": "superseded by #99"})
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["status"] == "cancelled" and body["state"] == "cancelled"
    assert body["closed_by"] == "olive" and body["close_reason"] == "superseded by #99"
    action.refresh_from_db()
    assert action.status == "retired" and "closed" in action.resolution_note
    message.refresh_from_db()
    assert message.status == "not_delivered" and message.waiting_reason == "Not delivered: the task was closed."
    detail = api.get(f"/api/tasks/{task.pk}/").json()
    assert detail["messages"][0]["status"] == "not_delivered"
    r = post(api, f"/api/tasks/{task.pk}/messages/", {"body": "hello?"})
    assert code(r) == (409, "task_closed")
    assert code(post(api, f"/api/tasks/{task.pk}/close/", {"resolution": "done", "reason": "x"})) == (
        409,
        "not_eligible",
    )


def test_closing_a_running_task_asks_its_run_to_stop_and_nothing_continues_it(api, org, agent):
    task = e.start(org, [e.SAFE, e.SAFE])
    run = e.claim(e.first_run(task))
    r = post(api, f"/api/tasks/{task.pk}/close/", {"resolution": "done", "reason": "enough"})
    assert r.status_code == 200
    run.refresh_from_db()
    assert run.status == "stopping" and run.stop_reason == "closed"
    e.lapse()
    supervise_once()
    run.refresh_from_db()
    assert run.status == "stopped" and not Run.objects.filter(continues=run).exists()
    assert Task.objects.get(pk=task.pk).status == "done"  # the run's end does not reopen it


def test_reopen_makes_the_task_eligible_without_reviving_retired_actions(api, org, agent, operator):
    action = e.parked(org, [e.SAFE, e.WRITE], 2)
    post(api, f"/api/tasks/{action.task_id}/close/", {"resolution": "done", "reason": "looked done"})
    assert code(post(api, f"/api/tasks/{action.task_id}/reopen/", {"reason": ""})) == (400, "invalid")
    r = post(api, f"/api/tasks/{action.task_id}/reopen/", {"reason": "it was not done"})
    assert r.status_code == 200 and r.json()["status"] == "todo" and r.json()["closed_by"] is None
    action.refresh_from_db()
    assert action.status == "retired"
    r = post(api, f"/api/actions/{action.pk}/retry/", {"version": action.version, "accept_duplicate_risk": True})
    assert code(r) == (409, "not_eligible")
    assert post(api, f"/api/tasks/{action.task_id}/messages/", {"body": "now go on"}).status_code == 201
    assert Event.objects.filter(kind="task_reopened", actor="olive").count() == 1


# --- budget -----------------------------------------------------------------------------------


def test_an_admin_sets_raises_and_removes_the_budget_with_a_reason_and_the_hold_lifts_at_once(
    admin_api, api, org, agent
):
    task = e.start(org, [e.SAFE, e.SAFE, e.SAFE])
    run = e.claim(e.first_run(task))
    e.do_step(run, 1)
    r = post(admin_api, f"/api/tasks/{task.pk}/budget/", {"limit": 1, "reason": "costs too much"})
    assert r.status_code == 200 and r.json()["budget_limit"] == 1
    run.refresh_from_db()
    assert run.status == "stopping" and run.stop_reason == "budget"
    e.finish(run, "stopped")
    supervise_once()
    assert not Run.objects.filter(continues=run).exists()  # held
    assert code(post(admin_api, f"/api/tasks/{task.pk}/budget/", {"limit": -1, "reason": "x"})) == (400, "invalid")
    assert code(post(admin_api, f"/api/tasks/{task.pk}/budget/", {"limit": 5})) == (400, "invalid")
    r = post(admin_api, f"/api/tasks/{task.pk}/budget/", {"limit": None, "reason": "approved by finance"})
    assert r.status_code == 200 and r.json()["budget_limit"] is None
    supervise_once()
    assert Run.objects.filter(continues=run).count() == 1  # continued once, through normal admission
    events = Event.objects.filter(kind="task_budget_set").order_by("id")
    assert [(ev.payload["from"], ev.payload["to"], ev.payload["reason"]) for ev in events] == [
        (None, 1, "costs too much"),
        (1, None, "approved by finance"),
    ]


# --- dependencies --------------------------------------------------------------------------------


def test_dependencies_hold_admission_refuse_cycles_and_hide_what_the_caller_cannot_see(
    api, org, agent, other_org, admin_user
):
    from tasks.services import task_create
    from tests.helpers import plan

    first = e.start(org, [e.SAFE], title="first")
    second = e.start(org, [e.SAFE], title="second")
    hidden = task_create(
        org=org, actor="t", title="private", agent="builder", input=plan(e.SAFE), private=True, creator=admin_user
    )
    make_agent(other_org, "builder")
    foreign = e.start(other_org, [e.SAFE], title="foreign")
    r = post(api, f"/api/tasks/{second.pk}/dependencies/", {"add": [first.pk]})
    assert r.status_code == 200 and r.json()["dependencies"] == [first.pk]
    assert r.json()["state"] == "blocked"
    for invisible in (hidden.pk, foreign.pk, 10**9):
        r = post(api, f"/api/tasks/{second.pk}/dependencies/", {"add": [invisible]})
        assert code(r) == (404, "not_found"), invisible
    assert code(post(api, f"/api/tasks/{first.pk}/dependencies/", {"add": [second.pk]})) == (409, "dependency_cycle")
    assert code(post(api, f"/api/tasks/{first.pk}/dependencies/", {"add": [first.pk]})) == (409, "dependency_cycle")
    # A held task's run is not claimed while its dependency is open.
    e.run_to_end(e.first_run(first))
    assert Task.objects.get(pk=first.pk).status == "done"
    claimed = e.claim(e.first_run(second))
    assert claimed.task_id == second.pk
    r = post(api, f"/api/tasks/{second.pk}/dependencies/", {"remove": [first.pk]})
    assert r.json()["dependencies"] == []
    ev = Event.objects.filter(kind="task_dependencies_changed").order_by("id")
    assert [(x.payload["added"], x.payload["removed"]) for x in ev] == [([first.pk], []), ([], [first.pk])]


def test_a_stopped_queued_run_is_a_verified_stop_and_continue_now_starts_it(api, org, agent, operator):
    task = e.start(org, [e.SAFE])
    run = e.first_run(task)
    run_request_stop(actor=operator, run=run)
    run.refresh_from_db()
    assert run.status == "stopped" and run.stop_receipt["by"] == "not_started"
    r = post(api, f"/api/tasks/{task.pk}/continue/")
    assert r.status_code == 202
    assert Message.objects.count() == 0


def test_continue_now_on_a_task_none_of_whose_runs_ever_started_queues_its_plan(api, org, agent):
    task = e.start(org, [e.SAFE])
    post(api, f"/api/tasks/{task.pk}/close/", {"resolution": "cancelled", "reason": "not now"})
    assert e.first_run(task).status == "cancelled"
    post(api, f"/api/tasks/{task.pk}/reopen/", {"reason": "now"})
    r = post(api, f"/api/tasks/{task.pk}/continue/")
    assert r.status_code == 202, r.content
    run = Run.objects.get(pk=r.json()["run"])
    assert run.continues_id is None and run.input == e.first_run(task).input
