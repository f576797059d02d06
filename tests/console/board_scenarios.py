"""Shared by test modules (from tests/console/test_pages.py; no test module imports another)."""

import re
from datetime import timedelta

from django.utils import timezone

from recovery.models import RecoveryAction
from tasks.models import Run, Step, Task
from tasks.services import run_finish, step_complete, step_dispatch, step_plan, task_create
from tests.console.scenarios import SAFE_PLAN, claim


def row_ids(content: str) -> list[int]:
    return [int(x) for x in re.findall(r'<tr id="task-(\d+)"', content)]


def bulk_tasks(org, agent, n: int, *, title: str = "bulk", **fields) -> list[int]:
    Task.objects.bulk_create(
        [Task(org=org, agent=agent, title=f"{title} {i:04d}", **fields) for i in range(n)], batch_size=500
    )
    return list(Task.objects.filter(org=org, title__startswith=f"{title} ").values_list("pk", flat=True))


def bulk_board(org, agent, n: int) -> None:
    """n tasks: a third done, a third waiting on a decision, a third paused with their run queued."""
    now = timezone.now()
    tasks = Task.objects.bulk_create(
        [
            Task(
                org=org,
                agent=agent,
                title=f"bulk {i:04d}",
                status=("done", "blocked", "todo")[i % 3],
                paused=i % 3 == 2,
            )
            for i in range(n)
        ],
        batch_size=500,
    )
    plan = write_plan(2)
    runs = Run.objects.bulk_create(
        [
            Run(
                org=org,
                task=task,
                agent=agent,
                input=plan,
                status=("succeeded", "interrupted", "queued")[i % 3],
                lease_owner="" if i % 3 == 2 else "w1/a",
                lease_epoch=0 if i % 3 == 2 else 1,
                started_at=None if i % 3 == 2 else now,
                finished_at=None if i % 3 == 2 else now,
            )
            for i, task in enumerate(tasks)
        ],
        batch_size=500,
    )
    Step.objects.bulk_create(
        [
            Step(
                run=run,
                seq=seq,
                tool="file_write",
                args=plan["steps"][seq - 1]["args"],
                recovery_mode="notify",
                phase="dispatched" if (i % 3 == 1 and seq == 2) else "completed",
                result=None if (i % 3 == 1 and seq == 2) else {"written": seq},
                planned_at=now,
                dispatched_at=now,
                completed_at=None if (i % 3 == 1 and seq == 2) else now,
            )
            for i, run in enumerate(runs)
            if i % 3 != 2
            for seq in (1, 2)
        ],
        batch_size=500,
    )
    RecoveryAction.objects.bulk_create(
        [
            RecoveryAction(
                org=org,
                task_id=run.task_id,
                run=run,
                kind="unknown_outcome",
                cause="unknown_outcome",
                evidence={"seq": 2, "tool": "file_write", "args": plan["steps"][1]["args"]},
                seq=2,
                original_owner=agent,
                recovery_owner="role:operator",
                due_at=now + timedelta(days=1),
            )
            for i, run in enumerate(runs)
            if i % 3 == 1
        ],
        batch_size=500,
    )


def failed_task(org, *, title: str, error: str):
    """A run whose second step failed with `error`, ended failed by its worker: nothing moves the task on."""
    from tests.console.scenarios import WRITE_PLAN, checkpoint, claim

    task = task_create(org=org, actor="t", title=title, agent="builder", input=WRITE_PLAN)
    run = claim(task)
    checkpoint(run, 1, dispatch_last=False)
    worker, epoch = run.lease_worker, run.lease_epoch
    step_plan(worker=worker, run_id=run.pk, epoch=epoch, seq=2, tool="file_write", args={"path": "q3-summary.md"})
    step_dispatch(worker=worker, run_id=run.pk, epoch=epoch, seq=2)
    step_complete(worker=worker, run_id=run.pk, epoch=epoch, seq=2, ok=False, error=error)
    run_finish(worker=worker, run_id=run.pk, epoch=epoch, status="failed", error_code="step_failed", detail=error)
    return task, run


def interrupted_twice(org, *, title: str):
    """The same step cut off in two runs of one chain: the supervisor exhausts the chain's recovery."""
    from tests.console.scenarios import checkpoint, expire_leases_and_supervise

    task = task_create(org=org, actor="t", title=title, agent="builder", input=SAFE_PLAN)
    for _ in range(2):
        checkpoint(claim(task), 0)
        expire_leases_and_supervise()
    action = RecoveryAction.objects.get(task=task, status="exhausted")
    assert action.exhaustion == "interrupted_twice"
    return task


def write_plan(steps: int) -> dict:
    return {"steps": [{"tool": "file_write", "args": {"path": f"f{seq}.txt", "content": "x"}} for seq in range(steps)]}
