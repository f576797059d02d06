"""A real worker process asked to stop (SIGTERM) drains within CONSOLE_WORKER_DRAIN_SECONDS."""

import signal
import subprocess
import time

import pytest

from recovery.models import RecoveryAction
from tasks.models import Event, Run, Step
from tasks.services import task_create
from tests import processes
from tests.factories import worker_token
from tests.helpers import plan
from tests.processes import manage, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DRAIN = 3.0


def start_worker(server, token: str) -> subprocess.Popen:
    return processes.start_worker(server, token, label="drain", CONSOLE_WORKER_DRAIN_SECONDS=DRAIN)


def dispatched(run: Run, seq: int = 1) -> bool:
    return Step.objects.filter(run=run, seq=seq, phase="dispatched").exists()


def terminate(proc: subprocess.Popen) -> tuple[float, str]:
    """SIGTERM; the seconds until the process exited, and its output."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=DRAIN + 10)
    return time.monotonic() - sent, out


def test_a_600_s_sleep_is_abandoned_within_the_drain_time_and_recovered_by_its_mode(daphne_server, org, agent):
    task = task_create(org=org, actor="t", title="wait", agent="builder", input=plan(("sleep", {"seconds": 600})))
    proc = start_worker(daphne_server, worker_token(org))
    run = Run.objects.get(task=task)
    wait_for(lambda: dispatched(run), what="the sleep dispatched")

    elapsed, out = terminate(proc)

    assert proc.returncode == 0, out
    assert elapsed < DRAIN, f"took {elapsed:.1f} s:\n{out}"
    assert "abandoned by the worker's shutdown" in out and "drain time (3 s) is up" not in out
    # No outcome recorded: the step stays dispatched, the run keeps its lease until it lapses.
    step = Step.objects.get(run=run, seq=1)
    assert step.phase == "dispatched" and step.result is None and step.completed_at is None
    assert not Event.objects.filter(run=run, kind__in=("step_completed", "step_failed", "run_finished")).exists()
    run.refresh_from_db()
    assert run.status == "running"

    # Once the lease lapsed the supervisor interrupts it and, sleep being replay, continues it.
    wait_for(lambda: Run.objects.filter(pk=run.pk, lease_expires_at__lt=time_now()).exists(), what="lapse")
    manage("supervise", "--once")
    run.refresh_from_db()
    assert run.status == "interrupted"
    cont = Run.objects.get(continues=run)
    assert cont.status == "queued"
    continued = Event.objects.get(run=cont, kind="run_continued")
    assert continued.payload["rerun"] == [1] and continued.payload["reused"] == []


def test_a_step_that_finishes_within_the_drain_time_is_recorded_and_nothing_new_starts(daphne_server, org, agent):
    task = task_create(
        org=org,
        actor="t",
        title="short",
        agent="builder",
        input=plan(("sleep", {"seconds": 1}), ("file_write", {"path": "never.txt", "content": "x"})),
    )
    proc = start_worker(daphne_server, worker_token(org))
    run = Run.objects.get(task=task)
    wait_for(lambda: dispatched(run), what="the sleep dispatched")

    elapsed, out = terminate(proc)

    assert proc.returncode == 0, out
    assert elapsed < DRAIN, out
    assert Step.objects.get(run=run, seq=1).phase == "completed"
    assert not Step.objects.filter(run=run, seq=2).exists()


def test_a_long_bash_command_is_killed_within_the_drain_time_and_records_no_outcome(daphne_server, org, agent):
    task = task_create(
        org=org,
        actor="t",
        title="bash",
        agent="builder",
        input=plan(("bash", {"command": "sleep 613", "timeout": 600})),
    )
    proc = start_worker(daphne_server, worker_token(org))
    run = Run.objects.get(task=task)
    wait_for(lambda: dispatched(run), what="the bash dispatched")
    wait_for(lambda: subprocess.run(["pgrep", "-f", "sleep 613"], capture_output=True).returncode == 0, what="bash")

    elapsed, out = terminate(proc)

    assert proc.returncode == 0, out
    assert elapsed < DRAIN, out
    step = Step.objects.get(run=run, seq=1)
    assert step.phase == "dispatched" and step.result is None
    # The command's process group was killed with it.
    wait_for(lambda: subprocess.run(["pgrep", "-f", "sleep 613"], capture_output=True).returncode == 1, timeout=5)

    # Once the lease lapsed, recovery treats the step by its mode: bash is notify, so nothing runs it again by
    # itself; a person decides whether the command's effects happened.
    wait_for(lambda: Run.objects.filter(pk=run.pk, lease_expires_at__lt=time_now()).exists(), what="lapse")
    manage("supervise", "--once")
    run.refresh_from_db()
    assert run.status == "interrupted" and not Run.objects.filter(continues=run).exists()
    action = RecoveryAction.objects.get(run=run)
    assert (action.kind, action.status, action.seq) == ("unknown_outcome", "open", 1)


def test_a_second_signal_exits_at_once(daphne_server, org, agent):
    task = task_create(org=org, actor="t", title="wait", agent="builder", input=plan(("sleep", {"seconds": 600})))
    proc = start_worker(daphne_server, worker_token(org))
    run = Run.objects.get(task=task)
    wait_for(lambda: dispatched(run), what="the sleep dispatched")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert time.monotonic() - sent < 1.5, out
    assert Step.objects.get(run=run, seq=1).phase == "dispatched"


def time_now():
    from django.utils import timezone

    return timezone.now()
