"""The exhaustion journey with real worker processes (issue: task controls).

A step is cut off twice by real killed workers, so its action is exhausted.
Then, for each of reassign, pause, an unresolved dependency, a budget hold,
Stop and close, the admin's retry is refused by its gate (or comes to nothing)
and changes nothing; lifting the gates admits exactly one continuation, under
the task's current owner, which a real worker runs to the end. The old notice
of a closed task never reopens it.
"""

import signal

import pytest

from recovery.models import RecoveryAction, RecoveryAttempt
from recovery.supervisor.loop import supervise_once
from tasks.models import Run, Step, Task
from tasks.services import task_create
from tests.factories import make_agent, user_token, worker_token
from tests.helpers import plan
from tests.processes import lapse_and_supervise, run_worker
from tests.recovery import engine as e

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def post(client, path, body=None):
    return client.post(path, body or {}, format="json")


def test_an_exhausted_action_is_refused_by_every_gate_and_continues_once_under_the_current_owner(
    daphne_server, org, agent, operator, admin_user, make_token_client
):
    make_agent(org, "reviewer")
    api = make_token_client(user_token(operator))
    admin = make_token_client(user_token(admin_user))
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="index the notes",
        agent="builder",
        input=plan(
            ("file_write", {"path": "a.txt", "content": "a"}),
            ("sleep", {"seconds": 0}),
            ("bash", {"command": "echo done >> log.txt"}),
        ),
    )
    blocker = e.start(org, [e.SAFE], title="blocker")
    Run.objects.filter(task=blocker).update(status="cancelled")  # a task that stays open, with nothing to run

    # Two real workers die at step 2: the second time, it is not retried automatically again.
    fault = "crash_after_dispatch:2@1,crash_after_dispatch:2@2"
    code, out = run_worker(daphne_server, token, fault=fault)
    assert code == -signal.SIGKILL, out
    first = Run.objects.get(task=task)
    lapse_and_supervise(first)
    second = Run.objects.get(continues=first)
    code, out = run_worker(daphne_server, token, fault=fault)
    assert code == -signal.SIGKILL, out
    lapse_and_supervise(second)
    action = RecoveryAction.objects.get(task=task)
    assert (action.status, action.exhaustion) == ("exhausted", "interrupted_twice")

    def grant():
        action.refresh_from_db()
        return post(admin, f"/api/actions/{action.pk}/retry/", {"version": action.version, "reason": "checked"})

    def refused_by(gate):
        before = e.state(action)
        r = grant()
        assert r.status_code == 409 and r.json()["gate"] == gate, r.content
        assert e.state(action) == before, f"a retry refused by {gate} changed something"

    # Reassign: the action was opened under builder.
    assert post(api, f"/api/tasks/{task.pk}/owner/", {"agent": "reviewer", "reason": "t"}).status_code == 200
    refused_by("owner_changed")
    assert post(api, f"/api/tasks/{task.pk}/owner/", {"agent": "builder", "reason": "back"}).status_code == 200
    # Pause.
    post(api, f"/api/tasks/{task.pk}/pause/")
    refused_by("task_paused")
    post(api, f"/api/tasks/{task.pk}/resume-task/")
    # An unresolved dependency.
    post(api, f"/api/tasks/{task.pk}/dependencies/", {"add": [blocker.pk]})
    refused_by("dependency_open")
    post(api, f"/api/tasks/{task.pk}/dependencies/", {"remove": [blocker.pk]})
    # A budget hold.
    used = Task.objects.get(pk=task.pk).budget_used
    post(admin, f"/api/tasks/{task.pk}/budget/", {"limit": used, "reason": "hold"})
    refused_by("budget_exhausted")
    post(admin, f"/api/tasks/{task.pk}/budget/", {"limit": None, "reason": "lift"})

    # Stop: the grant is admitted, then the queued continuation is stopped before any worker starts it.
    r = grant()
    assert r.status_code == 202, r.content
    queued = Run.objects.get(pk=r.json()["continuation_run"])
    assert post(api, f"/api/runs/{queued.pk}/stop/").json()["status"] == "stopped"
    action.refresh_from_db()
    assert action.status == "open"  # not admitted: it never started, and the card says why
    assert RecoveryAttempt.objects.get(action=action).outcome == "rejected"
    assert not Step.objects.filter(run=queued, reused_from__isnull=True).exists()  # nothing of it ran
    supervise_once()
    action.refresh_from_db()
    assert (action.status, action.exhaustion) == ("exhausted", "attempts_used")

    # Close: the old notice is retired and never reopens the task.
    r = post(api, f"/api/tasks/{task.pk}/close/", {"resolution": "cancelled", "reason": "not worth it"})
    assert r.status_code == 200
    action.refresh_from_db()
    assert action.status == "retired"
    runs = Run.objects.filter(task=task).count()
    r = grant()
    assert r.status_code == 409 and r.json()["code"] == "not_eligible"
    supervise_once()
    task.refresh_from_db()
    assert task.status == "cancelled" and Run.objects.filter(task=task).count() == runs

    # Reopen, give it to another agent, continue now: exactly one continuation, under the current owner.
    post(api, f"/api/tasks/{task.pk}/reopen/", {"reason": "worth it after all"})
    post(api, f"/api/tasks/{task.pk}/owner/", {"agent": "reviewer", "reason": "fresh eyes"})
    r = post(api, f"/api/tasks/{task.pk}/continue/", {"note": "go on"})
    assert r.status_code == 202, r.content
    assert post(api, f"/api/tasks/{task.pk}/continue/").status_code == 409  # one at a time
    cont = Run.objects.get(pk=r.json()["run"])
    assert cont.agent.name == "reviewer" and Run.objects.filter(task=task, status="queued").count() == 1
    code, out = run_worker(daphne_server, token, fault=fault)
    assert code == 0, out
    cont.refresh_from_db()
    task.refresh_from_db()
    assert cont.status == "succeeded" and task.status == "done"
    assert Step.objects.get(run=cont, seq=1).reused_from_id is not None, "the saved write was not reused"
    action.refresh_from_db()
    assert action.status == "retired"  # the old notice stayed retired all along
