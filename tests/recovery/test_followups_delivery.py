"""Follow-ups never wait on nothing, and are read only once a run acknowledged them (issues 20 and 21).

Through the real services and the runner API (no worker process here; tests/recovery/test_followups.py runs
the reference worker): a follow-up is handed over by the claim of the task's next run, `read` only after that
run's acknowledgement, carried again when a run ends before reading it, and its wait always names the fact
that ends it, read from the facts now.
"""

import pytest
from django.test import Client

from recovery.followups import message_save
from recovery.supervisor.loop import supervise_once
from tasks.models import Event, Message, Run, Task
from tests.helpers import visible_text
from tests.recovery import engine as e

pytestmark = pytest.mark.django_db

SAFE2 = [e.SAFE, e.SAFE]


def write(operator, task, body="use the new endpoint") -> Message:
    return message_save(user=operator, task=Task.objects.get(pk=task.pk), body=body)


def claimed(runner, run: Run) -> dict:
    """Claim `run` over the runner API (the worker `w1`, as the engine's)."""
    r = runner.post("/api/runner/claim/", {"worker": "w1-test"}, format="json")
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["run"] == run.pk, (body["run"], run.pk)
    return body


def ack(runner, claim: dict, ids, *, epoch=None, key=None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return runner.post(
        f"/api/runner/runs/{claim['run']}/messages/ack/",
        {"epoch": claim["lease_epoch"] if epoch is None else epoch, "ids": ids},
        format="json",
        **headers,
    )


def stopped_by_a_person(org, api):
    """A task whose first run a person stopped after step 1: it continues when someone writes a follow-up."""
    task = e.start(org, SAFE2)
    run = e.claim(e.first_run(task))
    e.do_step(run, 1)
    assert api.post(f"/api/runs/{run.pk}/stop/").status_code == 200
    e.finish(run, "stopped")
    return task, run


def page_words(user, task) -> str:
    client = Client()
    client.force_login(user)
    return visible_text(client.get(f"/tasks/{task.pk}/").content.decode())


def messages(api, task) -> list[dict]:
    return api.get(f"/api/tasks/{task.pk}/").json()["messages"]


# --- the acknowledgement -------------------------------------------------------------------------------


def test_a_follow_up_is_read_only_once_its_run_acknowledged_it(org, agent, operator, api, runner):
    task, first = stopped_by_a_person(org, api)
    message = write(operator, task)
    supervise_once()
    second = Run.objects.get(continues=first)
    claim = claimed(runner, second)
    # The claim hands it over in the contract's shape, and nothing yet calls it read.
    assert claim["messages"] == [
        {"id": message.pk, "author": "olive", "created_at": claim["messages"][0]["created_at"], "body": message.body}
    ]
    (seen,) = messages(api, task)
    assert (seen["status"], seen["run"], seen["read_at"]) == ("delivered", second.pk, None)
    assert "Read by the agent" not in page_words(operator, task)

    r = ack(runner, claim, [message.pk], key="ack-1")
    assert r.status_code == 200 and r.json() == {"acknowledged": [message.pk]}
    (seen,) = messages(api, task)
    assert seen["status"] == "read" and seen["run"] == second.pk and seen["read_at"]
    assert f"Read by the agent in run #{second.pk}" in page_words(operator, task)
    # Idempotent: the same key replays, another key acknowledges nothing more; one `messages_read` event.
    assert ack(runner, claim, [message.pk], key="ack-1").json() == {"acknowledged": [message.pk]}
    assert ack(runner, claim, [message.pk], key="ack-2").json() == {"acknowledged": [message.pk]}
    assert Event.objects.filter(kind="messages_read").count() == 1
    assert ack(runner, claim, [message.pk], key="ack-1", epoch=claim["lease_epoch"]).status_code == 200
    # Same key, other body: refused like every runner write.
    assert ack(runner, claim, [], key="ack-1").json()["code"] == "idempotency_conflict"


def test_the_acknowledgement_is_fenced_by_the_lease_and_names_only_the_runs_own_follow_ups(
    org, agent, operator, api, runner
):
    task, first = stopped_by_a_person(org, api)
    mine = write(operator, task)
    other = e.start(org, SAFE2, title="other")
    theirs = Message.objects.create(org=org, task=other, author=operator, body="not yours")
    supervise_once()
    claim = claimed(runner, Run.objects.get(continues=first))
    # A stale epoch changes nothing (409 stale_lease).
    r = ack(runner, claim, [mine.pk], epoch=claim["lease_epoch"] + 1)
    assert (r.status_code, r.json()["code"]) == (409, "stale_lease")
    assert Message.objects.get(pk=mine.pk).status == "delivered"
    # Another task's follow-up, or an unknown id, is not acknowledged by this run.
    r = ack(runner, claim, [theirs.pk, 999_999, mine.pk])
    assert r.json() == {"acknowledged": [mine.pk]}
    assert Message.objects.get(pk=theirs.pk).status == "waiting"
    assert ack(runner, claim, ["x"]).status_code == 400


# --- carried again, exactly once ---------------------------------------------------------------------------


def test_a_follow_up_handed_to_a_run_that_died_before_reading_it_is_carried_again_exactly_once(
    org, agent, operator, api, runner
):
    task, first = stopped_by_a_person(org, api)
    message = write(operator, task)
    supervise_once()
    second = Run.objects.get(continues=first)
    claim = claimed(runner, second)  # handed over; the worker dies before acknowledging it
    e.lapse()
    second.refresh_from_db()
    assert second.status == "interrupted"
    message.refresh_from_db()
    assert (message.status, message.run_id) == ("waiting", None)
    # The dead run can no longer acknowledge it.
    assert ack(runner, claim, [message.pk]).json()["code"] == "stale_lease"
    # The automatic continuation carries it; two more wakes admit nothing more.
    supervise_once()
    supervise_once()
    supervise_once()
    third = Run.objects.get(continues=second)
    assert Run.objects.filter(task=task).count() == 3
    message.refresh_from_db()
    assert (message.status, message.run_id) == ("admitted", third.pk)
    claim = claimed(runner, third)
    assert [m["id"] for m in claim["messages"]] == [message.pk]
    assert ack(runner, claim, [message.pk]).json() == {"acknowledged": [message.pk]}
    message.refresh_from_db()
    assert (message.status, message.run_id, message.handovers) == ("read", third.pk, 2)
    assert Event.objects.filter(kind="messages_read").count() == 1


def test_a_run_that_succeeds_without_acknowledging_gives_its_follow_up_to_one_more_run_then_keeps_it(
    org, agent, operator, api, runner
):
    """A worker that does not acknowledge follow-ups: carried once more, never in a loop."""
    task, first = stopped_by_a_person(org, api)
    message = write(operator, task)
    supervise_once()
    second = e.claim(Run.objects.get(continues=first))
    e.advance(second, 2)
    e.finish(second)
    message.refresh_from_db()
    assert message.status == "waiting"
    assert Task.objects.get(pk=task.pk).status == "in_progress"  # not done while a follow-up waits
    supervise_once()
    third = e.claim(Run.objects.get(continues=second))  # every step reused; the follow-up handed over again
    e.finish(third)
    supervise_once()
    supervise_once()
    message.refresh_from_db()
    assert (message.status, message.run_id, message.handovers) == ("delivered", third.pk, 2)
    assert Run.objects.filter(task=task).count() == 3
    assert Task.objects.get(pk=task.pk).status == "done"
    words = page_words(operator, task)
    assert f"Handed to run #{third.pk} when it started; its worker has not acknowledged reading it." in words


# --- never waiting on nothing ------------------------------------------------------------------------------


def test_a_follow_up_written_while_a_run_works_is_delivered_by_the_next_run_when_that_run_succeeds(
    org, agent, operator, api, runner
):
    task = e.start(org, SAFE2)
    run = e.claim(e.first_run(task))
    message = write(operator, task)
    (seen,) = messages(api, task)
    assert seen["waiting_reason"] == (
        f"Waiting for run #{run.pk} to finish or be stopped; the task's next run then carries it."
    )
    e.advance(run, 2)
    e.finish(run)
    # The run succeeded without it: the task is not done, nothing says "Nothing is scheduled", and the wait names
    # what ends it.
    detail = api.get(f"/api/tasks/{task.pk}/").json()
    assert detail["status"] != "done" and detail["state"] == "idle"
    (seen,) = detail["messages"]
    assert seen["status"] == "waiting" and "done" not in seen["waiting_reason"]
    assert seen["waiting_reason"] == (
        f"Waiting for the supervisor's next pass: it admits a continuation of run #{run.pk} that carries it, "
        "through every gate."
    )
    board = Client()
    board.force_login(operator)
    row = visible_text(board.get("/?state=all").content.decode())
    assert "Nothing is scheduled" not in row and "1 follow-up waits to be delivered" in row
    assert "1 follow-up waits to be delivered" in page_words(operator, task)
    # Continue now does not say "there is nothing to continue": it continues the run for the follow-up.
    r = api.post(f"/api/tasks/{task.pk}/continue/", {}, format="json")
    assert r.status_code == 202, r.content
    cont = Run.objects.get(pk=r.json()["run"])
    assert cont.continues_id == run.pk
    supervise_once()
    supervise_once()
    assert Run.objects.filter(task=task).count() == 2
    claim = claimed(runner, cont)
    assert [m["id"] for m in claim["messages"]] == [message.pk]
    ack(runner, claim, [message.pk])
    e.finish(Run.objects.get(pk=claim["run"]))  # every step was reused: it succeeds
    assert Task.objects.get(pk=task.pk).status == "done"
    assert Message.objects.get(pk=message.pk).status == "read"


def test_a_follow_up_written_while_the_first_run_is_queued_is_carried_by_that_run(org, agent, operator, api, runner):
    task = e.start(org, SAFE2)
    message = write(operator, task)
    (seen,) = messages(api, task)
    run = e.first_run(task)
    assert (
        seen["waiting_reason"]
        == f"Waiting for run #{run.pk} to start; it carries this follow-up when a worker starts it."
    )
    claim = claimed(runner, run)
    assert [m["id"] for m in claim["messages"]] == [message.pk]
    assert ack(runner, claim, [message.pk]).json() == {"acknowledged": [message.pk]}


def test_a_waiting_reason_is_read_from_the_facts_now_never_a_stale_saved_string(org, agent, operator, api):
    task, first = stopped_by_a_person(org, api)
    assert api.post(f"/api/tasks/{task.pk}/pause/").status_code == 200
    write(operator, task)
    supervise_once()
    (seen,) = messages(api, task)
    assert "paused" in seen["waiting_reason"] and "Lifted by an operator, with Resume task." in seen["waiting_reason"]
    assert api.post(f"/api/tasks/{task.pk}/resume-task/").status_code == 200
    # Before the supervisor's next pass: no "task is paused" beside "Paused: no".
    (seen,) = messages(api, task)
    assert "paused" not in seen["waiting_reason"]
    words = page_words(operator, task)
    assert "Paused no" in words and "is paused" not in words
    assert f"continuation of run #{first.pk} that carries it" in words


def test_on_a_closed_task_a_follow_up_is_not_delivered_at_once_and_reopening_offers_to_deliver_it(
    org, agent, operator, api, runner
):
    task = e.start(org, SAFE2)
    run = e.claim(e.first_run(task))
    early = write(operator, task, "first thought")
    late = write(operator, task, "second thought")
    r = api.post(f"/api/tasks/{task.pk}/close/", {"resolution": "cancelled", "reason": "wrong task"}, format="json")
    assert r.status_code == 200
    assert [m["status"] for m in messages(api, task)] == ["not_delivered", "not_delivered"]
    e.finish(run, "stopped")  # the worker confirms the stop closing asked for
    assert api.post(f"/api/tasks/{task.pk}/reopen/", {"reason": "it was right"}, format="json").status_code == 200
    words = page_words(operator, task)
    assert "Deliver follow-ups (2)" in words and "an operator may deliver it with Deliver follow-ups" in words
    supervise_once()
    assert Run.objects.filter(task=task).count() == 1  # nothing goes by itself: a person offers them again
    r = api.post(f"/api/tasks/{task.pk}/messages/deliver/", {}, format="json")
    assert r.status_code == 202 and r.json()["messages"] == [early.pk, late.pk]
    supervise_once()
    supervise_once()
    cont = Run.objects.get(continues=run)
    claim = claimed(runner, cont)
    assert [m["body"] for m in claim["messages"]] == ["first thought", "second thought"]
    # Deliver again: nothing more to deliver, nothing happens.
    assert api.post(f"/api/tasks/{task.pk}/messages/deliver/", {}, format="json").json()["messages"] == []


def test_a_follow_up_handed_to_a_run_that_a_closing_stops_is_not_delivered(org, agent, operator, api, runner):
    task, first = stopped_by_a_person(org, api)
    message = write(operator, task)
    supervise_once()
    claim = claimed(runner, Run.objects.get(continues=first))  # handed over, not yet read
    api.post(f"/api/tasks/{task.pk}/close/", {"resolution": "done", "reason": "enough"}, format="json")
    held = Run.objects.get(pk=claim["run"])
    e.finish(held, "stopped")
    message.refresh_from_db()
    assert message.status == "not_delivered"
    assert "closed before run" in messages(api, task)[0]["waiting_reason"]
