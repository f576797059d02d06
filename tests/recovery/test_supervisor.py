"""The supervisor pass: idempotent, exactly-once under concurrency, and continuing only through admission."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from django.db.models import F

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.models import Event, Run, Step, Task
from tests.factories import make_agent
from tests.recovery import engine as e

SAFE3 = [e.SAFE, e.SAFE, e.SAFE]


def continuations(run: Run) -> list[Run]:
    return list(Run.objects.filter(continues=run))


def assert_untouched(run: Run) -> None:
    """Nothing recovered `run`: no continuation, no action."""
    assert continuations(run) == []
    assert not RecoveryAction.objects.filter(run=run).exists()


# --- idempotence ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_second_pass_changes_nothing_more(org, agent):
    make_agent(org, "careful", auto_resume=False)
    safe = e.interrupted(org, SAFE3, 2)
    unknown = e.interrupted(org, [e.SAFE, e.WRITE], 2)
    manual = e.interrupted(org, SAFE3, 3, agent="careful")

    report = supervise_once()
    assert report.continued == [continuations(safe)[0].pk]
    assert sorted(report.opened) == sorted(RecoveryAction.objects.values_list("pk", flat=True))
    assert RecoveryAction.objects.get(run=unknown).kind == "unknown_outcome"
    assert RecoveryAction.objects.get(run=manual).cause == "auto_resume_off"
    after_one = e.counts()

    assert not supervise_once()
    assert not supervise_once()
    assert e.counts() == after_one


@pytest.mark.django_db
def test_an_automatic_continuation_reuses_completed_steps_and_reruns_the_safe_one(org, agent):
    run = e.interrupted(org, SAFE3, 2)
    supervise_once()
    (continuation,) = continuations(run)
    assert continuation.status == "queued" and continuation.attempt == 2
    steps = Step.objects.filter(run=continuation).order_by("seq")
    assert [(s.seq, s.reused_from_id) for s in steps] == [(1, Step.objects.get(run=run, seq=1).pk)]
    assert Event.objects.filter(kind="run_continued", run=continuation).count() == 1


# --- interrupted twice -------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_operation_interrupted_twice_in_one_chain_opens_an_exhausted_action(org, agent):
    first = e.interrupted(org, SAFE3, 2)
    supervise_once()
    (second,) = continuations(first)
    second = e.crash_after_dispatch(second, 2)  # the same operation dies again
    supervise_once()

    assert continuations(second) == []
    action = RecoveryAction.objects.get(run=second)
    assert (action.kind, action.status, action.cause) == ("continuation", "exhausted", "interrupted_twice")
    assert action.recovery_owner == "role:admin"
    reasons = action.evidence["reasons"]
    assert [(r["code"], r["seq"]) for r in reasons] == [("interrupted_twice", 2)]
    assert "sleep" in reasons[0]["detail"]
    supervise_once()
    assert Run.objects.filter(task_id=first.task_id).count() == 2


@pytest.mark.django_db
def test_a_different_operation_interrupted_in_the_continuation_is_resumed_again(org, agent):
    first = e.interrupted(org, SAFE3, 2)
    supervise_once()
    (second,) = continuations(first)
    second = e.crash_after_dispatch(second, 3)
    supervise_once()
    assert len(continuations(second)) == 1
    assert not RecoveryAction.objects.exists()


# --- pause, budget and a person's Stop -----------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("receipt", ["worker", "lease_lapse"])
def test_a_run_stopped_by_a_pause_is_continued_once_when_the_pause_lifts(org, agent, api, receipt):
    task = e.start(org, SAFE3)
    run = e.claim(e.first_run(task))
    e.do_step(run, 1)
    assert api.post(f"/api/tasks/{task.pk}/pause/").status_code == 200
    run.refresh_from_db()
    assert run.status == "stopping" and run.stop_reason == "paused"

    if receipt == "worker":  # the worker sees stop_requested and confirms with its epoch
        e.finish(run, "stopped")
    else:  # the worker is gone: the lapsed lease is the receipt
        e.lapse()
    run.refresh_from_db()
    assert run.status == "stopped" and run.stop_receipt["by"] == receipt

    supervise_once()
    supervise_once()
    assert_untouched(run)  # no continuation while the pause holds, and nobody is asked

    assert api.post(f"/api/tasks/{task.pk}/resume-task/").status_code == 200
    supervise_once()
    supervise_once()
    (continuation,) = continuations(run)
    assert continuation.status == "queued"
    assert not RecoveryAction.objects.filter(run=run).exists()
    assert Run.objects.filter(task=task).count() == 2
    assert e.claim(continuation).pk == continuation.pk


@pytest.mark.django_db
def test_deliberate_stops_are_not_interruptions_and_each_resume_continues_once(org, agent, api, operator):
    """Pause, Stop, pause again, each cutting the same step: every stop is verified, none is an interruption,
    nothing is exhausted, and each Resume continues the run once, as its card said (issue 20, item 2)."""
    from django.test import Client

    from recovery.followups import message_save
    from tests.helpers import visible_text

    page = Client()
    page.force_login(operator)
    task = e.start(org, SAFE3)

    def cut_by(run, how):
        run = e.claim(run)
        e.advance(run, 1)
        e.plan_step(run, 2)
        e.dispatch_step(run, 2)  # the same step, dispatched when each stop comes
        if how == "pause":
            assert api.post(f"/api/tasks/{task.pk}/pause/").status_code == 200
        else:
            assert api.post(f"/api/runs/{run.pk}/stop/").status_code == 200
        e.finish(run, "stopped")
        run.refresh_from_db()
        assert run.status == "stopped" and run.stop_receipt["by"] == "worker"
        return run

    first = cut_by(e.first_run(task), "pause")
    words = visible_text(page.get(f"/tasks/{task.pk}/").content.decode())
    assert "continues once when the pause lifts" in words
    assert api.post(f"/api/tasks/{task.pk}/resume-task/").status_code == 200
    # Resumed, before the supervisor's pass: the header says what is about to happen, not "Nothing is scheduled".
    words = visible_text(page.get(f"/tasks/{task.pk}/").content.decode())
    assert "Nothing is scheduled" not in words and f"Run #{first.pk} is taken up by the supervisor" in words
    supervise_once()
    (second,) = continuations(first)
    second = cut_by(second, "stop")  # a person's Stop: continues when someone writes a follow-up
    message_save(user=operator, task=Task.objects.get(pk=task.pk), body="go on")
    supervise_once()
    (third,) = continuations(second)
    third = cut_by(third, "pause")  # paused again, cutting step 2 a third time
    assert api.post(f"/api/tasks/{task.pk}/resume-task/").status_code == 200
    supervise_once()
    supervise_once()

    # Kept: the third run is continued once, and nobody is asked about anything.
    (fourth,) = continuations(third)
    assert fourth.status == "queued" and not RecoveryAction.objects.filter(task=task).exists()
    assert Run.objects.filter(task=task).count() == 4
    detail = api.get(f"/api/tasks/{task.pk}/").json()
    assert detail["state"] == "queued"
    diagnosis = api.get(f"/api/runs/{third.pk}/").json()["diagnosis"]
    assert diagnosis["disposition"] == "auto_resumable" and diagnosis["reasons"] == []
    words = visible_text(page.get(f"/tasks/{task.pk}/").content.decode())
    assert "interrupted twice" not in words and "Exhausted" not in words
    assert words.count("Stop verified: the worker finished with its lease.") == 3


@pytest.mark.django_db
def test_a_run_stopped_by_its_budget_is_continued_once_the_budget_is_raised(org, agent):
    task = e.start(org, SAFE3, budget_limit=1)
    run = e.claim(e.first_run(task))
    assert e.do_step(run, 1) is True  # the budget is used up: the reply asks the run to stop
    e.finish(run, "stopped")
    run.refresh_from_db()
    assert run.stop_reason == "budget"

    supervise_once()
    assert_untouched(run)
    Task.objects.filter(pk=task.pk).update(budget_limit=F("budget_limit") + 5)  # an admin raises it
    supervise_once()
    supervise_once()
    assert len(continuations(run)) == 1


@pytest.mark.django_db
def test_a_run_stopped_by_a_person_is_not_continued_automatically(org, agent, api):
    task = e.start(org, SAFE3)
    run = e.claim(e.first_run(task))
    e.do_step(run, 1)
    r = api.post(f"/api/runs/{run.pk}/stop/")
    assert r.status_code == 200 and r.json()["status"] == "stopping"
    e.finish(run, "stopped")
    run.refresh_from_db()
    assert run.status == "stopped" and run.stop_reason == "stop"

    before = e.counts()
    supervise_once()
    supervise_once()
    assert_untouched(run)
    assert e.counts() == before


@pytest.mark.django_db
def test_an_auto_resumable_run_of_a_paused_task_waits_for_the_resume(org, agent, api):
    run = e.interrupted(org, SAFE3, 2)
    assert api.post(f"/api/tasks/{run.task_id}/pause/").status_code == 200
    supervise_once()
    supervise_once()
    assert_untouched(run)
    assert api.post(f"/api/tasks/{run.task_id}/resume-task/").status_code == 200
    supervise_once()
    supervise_once()
    assert len(continuations(run)) == 1


@pytest.mark.django_db
def test_an_auto_resumable_run_under_a_paused_parent_waits_for_the_parent(org, agent, api):
    parent = e.start(org, [e.SAFE], title="parent")
    e.run_to_end(e.first_run(parent))
    run = e.interrupted(org, SAFE3, 2, parent=parent.pk)
    api.post(f"/api/tasks/{parent.pk}/pause/")
    supervise_once()
    assert_untouched(run)
    api.post(f"/api/tasks/{parent.pk}/resume-task/")
    supervise_once()
    assert len(continuations(run)) == 1


# --- concurrency -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_four_supervisors_at_once_recover_each_of_20_runs_exactly_once(org, agent):
    crashed = [e.interrupted(org, SAFE3 if i % 2 else [e.SAFE, e.WRITE], 2, title=f"t{i}") for i in range(20)]
    start = threading.Barrier(4)

    def supervisor(_):
        start.wait()
        try:
            return supervise_once()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(supervisor, range(4)))

    for run in crashed:
        recovered = len(continuations(run)) + RecoveryAction.objects.filter(run=run).count()
        assert recovered == 1, f"run #{run.pk} was recovered {recovered} times"
    assert Run.objects.count() == 30  # 20 crashed runs and 10 continuations of the safe ones
    assert RecoveryAction.objects.filter(kind="unknown_outcome", status="open").count() == 10
    assert Event.objects.filter(kind="run_continued").count() == 10
    assert Event.objects.filter(kind="action_opened").count() == 10
    assert sorted(pk for r in reports for pk in r.continued) == sorted(
        Run.objects.filter(continues__isnull=False).values_list("pk", flat=True)
    )
    before = e.counts()
    supervise_once()
    assert e.counts() == before


@pytest.mark.django_db(transaction=True)
def test_a_started_retry_is_settled_by_its_claim_and_four_supervisors_change_nothing_more(org, agent, operator):
    from recovery.actions import action_retry

    # Every crash lapses every live lease, so crash all first, then retry and start each continuation.
    actions = [e.parked(org, [e.SAFE, e.WRITE], 2, title=f"t{i}") for i in range(8)]
    for action in actions:
        attempt = action_retry(action_id=action.pk, user=operator, version=action.version, accept_duplicate_risk=True)
        e.claim(attempt.continuation_run)
        action.refresh_from_db()
        # The claim that started the continuation resolved the action in its own transaction.
        assert (action.status, action.resolution) == ("resolved", "continued")
    before = e.counts()
    start = threading.Barrier(4)

    def supervisor(_):
        start.wait()
        try:
            return supervise_once()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(supervisor, range(4)))

    assert e.counts() == before
    for action in actions:
        assert Event.objects.filter(kind="action_resolved", payload__action=action.pk).count() == 1


@pytest.mark.django_db(transaction=True)
def test_four_supervisors_at_once_admit_one_run_per_task_for_its_follow_ups(org, agent, operator):
    """Follow-ups on runs that succeeded, were stopped by a person, or were handed back by a run cut off before it
    read them: four supervisors at once admit exactly one run for each task, carrying every follow-up once."""
    from recovery.followups import message_save
    from tasks.models import Message
    from tasks.services import run_request_stop

    tasks = []
    for i in range(6):
        task = e.start(org, SAFE3, title=f"t{i}")
        run = e.claim(e.first_run(task))
        e.do_step(run, 1)
        if i % 2:
            message_save(user=operator, task=Task.objects.get(pk=task.pk), body=f"while it works {i}")
            e.advance(run, 3)
            e.finish(run)  # it succeeded without the follow-up: it is continued for it
        else:
            run_request_stop(actor=operator, run=run)
            e.finish(run, "stopped")
            message_save(user=operator, task=Task.objects.get(pk=task.pk), body=f"after the stop {i}")
        tasks.append(task)
    start = threading.Barrier(4)

    def supervisor(_):
        start.wait()
        try:
            return supervise_once()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(supervisor, range(4)))

    for task in tasks:
        assert Run.objects.filter(task=task).count() == 2, f"task #{task.pk} was admitted more than once"
        (message,) = Message.objects.filter(task=task)
        cont = Run.objects.get(task=task, continues__isnull=False)
        assert (message.status, message.run_id) == ("admitted", cont.pk)
    before = e.counts()
    supervise_once()
    assert e.counts() == before
