"""Recovery situations built with the real services (no worker process): claim, checkpoint, lapse, supervise."""

from datetime import timedelta

from django.utils import timezone

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.models import Run, Task, Worker
from tasks.services import leases_expire, run_claim, step_complete, step_dispatch, step_plan, task_create
from tests.factories import worker_token
from tests.helpers import plan

WRITE_PLAN = plan(
    ("file_write", {"path": "a.txt", "content": "a"}),
    ("file_write", {"path": "report.md", "content": "# Report"}),
    ("file_read", {"path": "report.md"}),
)
SAFE_PLAN = plan(
    ("file_read", {"path": "a.txt"}),
    ("sleep", {"seconds": 0}),
)


def worker_of(org, name: str = "w1") -> Worker:
    worker = Worker.objects.filter(org=org, name=name).first()
    if worker is None:
        worker_token(org, name)
        worker = Worker.objects.get(org=org, name=name)
    return worker


def claim(task: Task, label: str = "w1-a") -> Run:
    """Claim the task's queued run (the oldest queued run of its organization must be this one)."""
    run = run_claim(worker=worker_of(task.org), label=label)
    assert run is not None and run.task_id == task.pk, f"claimed {run} of task #{run and run.task_id}, not #{task.pk}"
    return run


def checkpoint(run: Run, steps: int, *, dispatch_last: bool = True) -> None:
    """Complete the first steps of the run's plan; with dispatch_last, plan and dispatch one more and leave it."""
    worker = run.lease_worker
    planned = run.input["steps"]
    for seq in range(1, steps + 1):
        spec = planned[seq - 1]
        step_plan(worker=worker, run_id=run.pk, epoch=run.lease_epoch, seq=seq, tool=spec["tool"], args=spec["args"])
        step_dispatch(worker=worker, run_id=run.pk, epoch=run.lease_epoch, seq=seq)
        step_complete(
            worker=worker, run_id=run.pk, epoch=run.lease_epoch, seq=seq, ok=True, result={"ok": True, "seq": seq}
        )
    if dispatch_last:
        seq = steps + 1
        spec = planned[seq - 1]
        step_plan(worker=worker, run_id=run.pk, epoch=run.lease_epoch, seq=seq, tool=spec["tool"], args=spec["args"])
        step_dispatch(worker=worker, run_id=run.pk, epoch=run.lease_epoch, seq=seq)


def expire_leases_and_supervise() -> None:
    """Every lease lapses (as if an hour passed) and the supervisor makes one pass."""
    leases_expire(now=timezone.now() + timedelta(hours=1))
    supervise_once()


def unknown_outcome_action(org, *, title: str = "write the report", agent: str = "builder", **extra):
    """A run killed after dispatching `file_write report.md` (step 2): an open unknown-outcome action."""
    task = task_create(org=org, actor="t", title=title, agent=agent, input=WRITE_PLAN, **extra)
    run = claim(task)
    checkpoint(run, 1)
    expire_leases_and_supervise()
    action = RecoveryAction.objects.get(task=task)
    assert action.kind == "unknown_outcome" and action.status == "open" and action.seq == 2
    return action


def continuation_action(org, *, title: str = "read notes", agent: str = "careful", **extra):
    """A run of safe steps interrupted under an agent that does not resume by itself: an open continuation."""
    task = task_create(org=org, actor="t", title=title, agent=agent, input=SAFE_PLAN, **extra)
    run = claim(task)
    checkpoint(run, 0)
    expire_leases_and_supervise()
    action = RecoveryAction.objects.get(task=task)
    assert action.kind == "continuation" and action.status == "open" and action.cause == "auto_resume_off"
    return action


def running_task(org, *, title: str = "long job", agent: str = "builder", **extra):
    task = task_create(org=org, actor="t", title=title, agent=agent, input=SAFE_PLAN, **extra)
    return task, claim(task)
