"""Recovery end to end: real worker processes killed by WORKER_FAULT, a real server, the real supervisor."""

import signal
from pathlib import Path

import pytest

from recovery.models import RecoveryAction, RecoveryAttempt
from recovery.supervisor.loop import supervise_once
from tasks.models import Run, Step
from tasks.services import task_create
from tests.factories import worker_token
from tests.helpers import plan
from tests.processes import lapse_and_supervise, run_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_killed_run_of_safe_steps_resumes_by_itself_without_redoing_completed_work(daphne_server, org, agent):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="safe",
        agent="builder",
        input=plan(
            ("bash", {"command": "echo line >> count.txt"}),
            ("file_read", {"path": "count.txt"}),
            ("sleep", {"seconds": 1}),
            ("file_read", {"path": "count.txt"}),
        ),
    )
    code, out = run_worker(daphne_server, token, fault="crash_after_dispatch:3@1")
    assert code == -signal.SIGKILL, out
    first = Run.objects.get(task=task)
    report = lapse_and_supervise(first)
    first.refresh_from_db()
    assert first.status == "interrupted"
    second = Run.objects.get(continues=first)
    assert report.continued == [second.pk]
    assert second.status == "queued" and second.attempt == 2
    assert not RecoveryAction.objects.filter(task=task).exists()  # nobody had to be asked

    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    second.refresh_from_db()
    assert second.status == "succeeded"
    steps = {s.seq: s for s in Step.objects.filter(run=second)}
    assert steps[1].reused_from_id is not None and steps[2].reused_from_id is not None
    assert steps[3].reused_from_id is None and steps[4].reused_from_id is None
    # The bash step appended its line once: the continuation reused its saved result.
    assert (Path(task.workspace) / "count.txt").read_text() == "line\n"
    assert steps[4].result["content"] == "line\n"
    task.refresh_from_db()
    assert task.status == "done"


def test_an_unknown_file_write_waits_for_a_decision_and_then_continues_exactly_once(daphne_server, org, agent, api):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="write",
        agent="builder",
        input=plan(
            ("file_write", {"path": "out.txt", "content": "hello"}),
            ("file_write", {"path": "report.md", "content": "# Report"}),
            ("file_read", {"path": "report.md"}),
        ),
    )
    code, out = run_worker(daphne_server, token, fault="crash_after_dispatch:2@1")
    assert code == -signal.SIGKILL, out
    first = Run.objects.get(task=task)
    lapse_and_supervise(first)
    supervise_once()  # a second pass changes nothing more

    action = RecoveryAction.objects.get(task=task)
    assert action.kind == "unknown_outcome" and action.status == "open" and action.seq == 2
    body = api.get(f"/api/actions/{action.pk}/").json()
    assert body["evidence"]["tool"] == "file_write"
    assert body["evidence"]["args"]["path"] == "report.md"
    dispatched = Step.objects.get(run=first, seq=2).dispatched_at
    assert body["evidence"]["dispatched_at"] == dispatched.isoformat()
    assert Run.objects.filter(task=task).count() == 1  # nothing replays before a decision

    refused = api.post(
        f"/api/actions/{action.pk}/decision/",
        {"version": body["version"], "outcome": "not_performed", "note": "not on disk"},
        format="json",
    )
    assert refused.status_code == 409 and refused.json()["code"] == "not_eligible"
    assert Run.objects.filter(task=task).count() == 1 and RecoveryAttempt.objects.count() == 0

    accepted = api.post(
        f"/api/actions/{action.pk}/decision/",
        {"version": body["version"], "outcome": "not_performed", "note": "not on disk", "accept_duplicate_risk": True},
        format="json",
    )
    assert accepted.status_code == 200, accepted.content
    assert accepted.json()["status"] == "retrying"
    history = accepted.json()["attempt_history"]
    assert len(history) == 1 and history[0]["continuation_run"]
    continuation = Run.objects.get(pk=history[0]["continuation_run"])

    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    supervise_once()
    continuation.refresh_from_db()
    assert continuation.status == "succeeded"
    assert Run.objects.filter(task=task).count() == 2
    action.refresh_from_db()
    assert action.status == "resolved" and action.resolution == "continued"
    assert (Path(task.workspace) / "report.md").read_text() == "# Report"
    detail = api.get(f"/api/tasks/{task.pk}/").json()
    assert detail["state"] == "done"
    # The attempt records the continuation's real outcome, settled by the finish itself.
    assert detail["actions"][0]["attempt_history"][0]["outcome"] == "succeeded"
