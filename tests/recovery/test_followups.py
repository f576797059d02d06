"""Follow-ups after a Stop: they wait while the old run is not verifiably stopped, then go exactly once."""

import pytest

from recovery.supervisor.loop import supervise_once
from tasks.models import Event, Message, Run, Step
from tasks.services import run_request_stop, task_create, task_pause, task_resume
from tests.factories import worker_token
from tests.helpers import plan
from tests.processes import start_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_follow_up_after_stop_waits_then_is_delivered_exactly_once(daphne_server, org, agent, api):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="long",
        agent="builder",
        input=plan(
            ("file_write", {"path": "a.txt", "content": "a"}),
            ("sleep", {"seconds": 4}),
            ("file_read", {"path": "a.txt"}),
        ),
    )
    first = Run.objects.get(task=task)
    worker = start_worker(daphne_server, token)
    wait_for(lambda: Step.objects.filter(run=first, seq=2, phase="dispatched").exists(), what="sleep dispatched")

    run_request_stop(actor="olive", run=first)
    body = api.post(f"/api/tasks/{task.pk}/messages/", {"body": "use the new endpoint"}, format="json")
    assert body.status_code == 201, body.content
    message = body.json()
    assert message["status"] == "waiting" and message["waiting_reason"]
    out, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, out
    first.refresh_from_db()
    assert first.status == "stopped" and first.stop_receipt["by"] == "worker"

    # Two more follow-ups while paused: they wait for the pause, in order.
    task_pause(actor="olive", task=task)
    api.post(f"/api/tasks/{task.pk}/messages/", {"body": "second"}, format="json")
    supervise_once()
    assert not Run.objects.filter(continues=first).exists()
    waiting = api.get(f"/api/tasks/{task.pk}/").json()["messages"]
    assert [m["status"] for m in waiting] == ["waiting", "waiting"]
    assert "paused" in waiting[0]["waiting_reason"]

    task_resume(actor="olive", task=task)
    supervise_once()
    supervise_once()  # a repeated wake admits nothing more
    second = Run.objects.get(continues=first)
    assert Run.objects.filter(task=task).count() == 2
    messages = list(Message.objects.filter(task=task).order_by("id"))
    assert [m.status for m in messages] == ["admitted", "admitted"] and {m.run_id for m in messages} == {second.pk}

    worker = start_worker(daphne_server, token)
    out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    second.refresh_from_db()
    assert second.status == "succeeded"
    detail = api.get(f"/api/tasks/{task.pk}/").json()
    # The reference worker acknowledged both at its claim: read by the agent of the second run, once.
    assert [(m["body"], m["status"], m["run"]) for m in detail["messages"]] == [
        ("use the new endpoint", "read", second.pk),
        ("second", "read", second.pk),
    ]
    assert all(m["read_at"] for m in detail["messages"])
    assert Event.objects.filter(task=task, kind="messages_read").count() == 1
    # Step 1's file_write was reused, not written twice; the cut-off sleep ran again.
    steps = {s.seq: s for s in Step.objects.filter(run=second)}
    assert steps[1].reused_from_id is not None and steps[2].reused_from_id is None


def test_a_follow_up_whose_worker_died_before_acknowledging_it_is_read_once_by_the_next_run(
    daphne_server, org, agent, api
):
    """Issue 21, item 8: handed to a run whose worker is killed before it acknowledges it, the follow-up is not
    lost to the dead run: the automatic continuation carries it again, and its worker reads it, once."""
    import time

    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="resume",
        agent="builder",
        input=plan(("sleep", {"seconds": 0}), ("sleep", {"seconds": 0})),
    )
    first = Run.objects.get(task=task)
    run_request_stop(actor="olive", run=first)  # stopped before any worker started it: a verified stop
    assert api.post(f"/api/tasks/{task.pk}/messages/", {"body": "mind the cache"}, format="json").status_code == 201
    supervise_once()
    second = Run.objects.get(continues=first)
    # Attempt 2's worker is killed right after its claim, before it acknowledges the follow-up.
    worker = start_worker(daphne_server, token, fault="crash_before_ack:1@2")
    worker.communicate(timeout=30)
    assert worker.returncode != 0
    message = Message.objects.get(task=task)
    assert (message.status, message.run_id) == ("delivered", second.pk)
    wait_for(lambda: Run.objects.filter(pk=second.pk, lease_expires_at__lt=_now()).exists(), what="lease lapse")
    time.sleep(0.2)
    supervise_once()
    supervise_once()
    third = Run.objects.get(continues=second)
    worker = start_worker(daphne_server, token)
    out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    message.refresh_from_db()
    assert (message.status, message.run_id, message.handovers) == ("read", third.pk, 2)
    (seen,) = api.get(f"/api/tasks/{task.pk}/").json()["messages"]
    assert seen["status"] == "read" and seen["run"] == third.pk
    assert Event.objects.filter(task=task, kind="messages_read").count() == 1
    assert Run.objects.get(pk=third.pk).status == "succeeded"


def _now():
    from django.utils import timezone

    return timezone.now()


def test_a_viewer_cannot_write_a_follow_up(org, agent, api, viewer, make_token_client):
    from tests.factories import user_token

    task = task_create(org=org, actor="t", title="x", agent="builder", input=plan(("sleep", {"seconds": 0})))
    response = make_token_client(user_token(viewer)).post(
        f"/api/tasks/{task.pk}/messages/", {"body": "hi"}, format="json"
    )
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert not Message.objects.exists()
    empty = api.post(f"/api/tasks/{task.pk}/messages/", {"body": "  "}, format="json")
    assert empty.status_code == 400 and empty.json()["code"] == "invalid"
