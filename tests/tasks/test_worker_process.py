"""Real worker processes against a real daphne server: success, Stop, and a SIGKILL mid-step."""

import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from tasks.models import Event, Run, Step
from tasks.services import leases_expire, run_request_stop, task_create
from tests.factories import worker_token
from tests.helpers import plan
from tests.processes import manage, start_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_worker_runs_real_tools_in_the_workspace_and_succeeds(daphne_server, org, agent):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="notes",
        agent="builder",
        input=plan(
            ("file_write", {"path": "notes.md", "content": "one\n"}),
            ("bash", {"command": "echo two >> notes.md"}),
            ("file_read", {"path": "notes.md"}),
        ),
    )
    proc = start_worker(daphne_server, token)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    run = Run.objects.get(task=task)
    assert run.status == "succeeded"
    steps = list(Step.objects.filter(run=run).order_by("seq"))
    assert [s.phase for s in steps] == ["completed"] * 3
    assert steps[2].result["content"] == "one\ntwo\n"
    assert (Path(task.workspace) / "notes.md").read_text() == "one\ntwo\n"
    task.refresh_from_db()
    assert task.status == "done" and task.budget_used == 3


def test_stop_reaches_the_worker_at_the_next_boundary(daphne_server, org, agent):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="long",
        agent="builder",
        input=plan(
            ("sleep", {"seconds": 30}),
            ("file_write", {"path": "never.txt", "content": "x"}),
        ),
    )
    proc = start_worker(daphne_server, token)
    run = Run.objects.get(task=task)
    wait_for(lambda: Step.objects.filter(run=run, seq=1, phase="dispatched").exists(), what="step 1 dispatched")
    run_request_stop(actor="olive", run=run)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    run.refresh_from_db()
    assert run.status == "stopped"
    assert run.stop_receipt["by"] == "worker" and run.stop_receipt["epoch"] == run.lease_epoch
    assert not Step.objects.filter(run=run, seq=2).exists()
    assert not (Path(task.workspace) / "never.txt").exists()


def test_a_worker_killed_after_dispatch_leaves_the_step_dispatched_and_the_supervisor_interrupts_the_run(
    daphne_server, org, agent
):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="crash",
        agent="builder",
        input=plan(
            ("file_write", {"path": "a.txt", "content": "a"}),
            ("file_write", {"path": "b.txt", "content": "b"}),
            ("file_read", {"path": "a.txt"}),
        ),
    )
    proc = start_worker(daphne_server, token, fault="crash_after_dispatch:2")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, out

    run = Run.objects.get(task=task)
    steps = {s.seq: s for s in Step.objects.filter(run=run)}
    assert steps[1].phase == "completed"
    assert steps[2].phase == "dispatched" and steps[2].result is None and steps[2].dispatched_at
    assert 3 not in steps
    # Step 2's tool never ran: the dispatch was recorded, then the process died.
    assert not (Path(task.workspace) / "b.txt").exists()
    assert run.status == "running"  # its lease has not lapsed yet

    # The supervisor leaves a live lease alone, then settles it once it lapsed.
    assert leases_expire(now=run.lease_expires_at - timedelta(milliseconds=1)) == []
    run.refresh_from_db()
    assert run.status == "running"
    time.sleep(max(0.0, (run.lease_expires_at - timezone.now()).total_seconds()) + 0.2)
    manage("supervise", "--once")
    run.refresh_from_db()
    assert run.status == "interrupted" and run.error_code == "lease_lapsed"
    assert Event.objects.filter(run=run, kind="run_interrupted").count() == 1
    assert set(Step.objects.filter(run=run).values_list("seq", "phase")) == {(1, "completed"), (2, "dispatched")}


def test_task_create_makes_a_child_task_that_a_worker_then_runs(daphne_server, org, agent):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="parent",
        agent="builder",
        input=plan(
            ("task_create", {"title": "child", "input": plan(("file_write", {"path": "c.txt", "content": "c"}))})
        ),
    )
    proc = start_worker(daphne_server, token)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    step = Step.objects.get(run__task=task, seq=1)
    child = task.children.get()
    assert step.phase == "completed" and step.result == {"task": child.pk} and step.recovery_mode == "notify"
    assert child.title == "child" and child.agent_id == task.agent_id and child.runs.get().status == "queued"
    proc = start_worker(daphne_server, token)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert (Path(child.workspace) / "c.txt").read_text() == "c"


def test_bash_output_with_a_nul_and_invalid_utf8_round_trips_through_a_real_worker(daphne_server, org, agent):
    """The issue's case: `printf 'a\\000b'` in bash. Checkpointed, carried into a continuation byte for byte."""
    from tasks import payloads
    from tasks.api import claim_data
    from tests.processes import lapse_and_supervise

    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="odd output",
        agent="builder",
        input=plan(
            ("bash", {"command": "printf 'a\\000b\\377'; printf 'err\\000' >&2; echo x >> ran.log"}),
            ("sleep", {"seconds": 0}),
        ),
    )
    proc = start_worker(daphne_server, token, fault="crash_after_dispatch:2")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, out
    first = Run.objects.get(task=task)
    saved = payloads.decode(Step.objects.get(run=first, seq=1).result)
    assert saved == {"exit_code": 0, "stdout": b"a\x00b\xff", "stderr": "err\x00"}

    lapse_and_supervise(first)
    first.refresh_from_db()
    assert first.status == "interrupted"
    second = Run.objects.get(continues=first)
    reused = {r["seq"]: r for r in claim_data(second)["reused"]}
    assert payloads.decode(reused[1]["result"]) == saved  # what the worker is handed back: the same bytes

    proc = start_worker(daphne_server, token)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    second.refresh_from_db()
    assert second.status == "succeeded", out
    assert (Path(task.workspace) / "ran.log").read_text() == "x\n"  # reused, not run again
    assert payloads.decode(Step.objects.get(run=second, seq=1).result) == saved
