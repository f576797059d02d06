"""Drive runs through the services exactly as a worker would, so recovery tests read like scenarios.

No worker process, no HTTP runner: `run_claim`, `step_plan`, `step_dispatch`,
`step_complete` and `run_finish` are the calls the runner API makes. A crash
is a worker that stops calling them; its lease then lapses (`lapse()` moves the
clock past the lease instead of sleeping).
"""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from recovery.models import RecoveryAction, RecoveryAttempt
from recovery.supervisor.loop import supervise_once
from tasks import services
from tasks.models import Event, Run, Step, Task, Worker
from tests.factories import worker_token
from tests.helpers import plan

# Tools by recovery mode (API.md defaults).
SAFE = ("sleep", {"seconds": 0})  # replay
WRITE = ("file_write", {"path": "report.md", "content": "# Report"})  # notify
POST = ("http_post", {"url": "https://example.invalid/hook", "json": {"n": 1}})  # notify
UNDECLARED = ("shred", {"path": "x"})  # no declared mode: forget


def worker(org, name: str = "w1") -> Worker:
    found = Worker.objects.filter(org=org, name=name).first()
    if found is None:
        worker_token(org, name)
        found = Worker.objects.get(org=org, name=name)
    return found


def start(org, steps, *, agent: str = "builder", title: str = "t", **extra) -> Task:
    """Create a task whose plan is `steps` ((tool, args) pairs); its first run is queued."""
    return services.task_create(org=org, actor="test", title=title, agent=agent, input=plan(*steps), **extra)


def first_run(task: Task) -> Run:
    return Run.objects.filter(task=task).order_by("id").first()


def latest_run(task: Task) -> Run:
    return Run.objects.filter(task=task).order_by("-id").first()


def claim(run: Run) -> Run:
    """Claim `run` as worker w1; it must be the run the claim hands out."""
    claimed = services.run_claim(worker=worker(run.org), label="w1-test")
    assert claimed is not None, f"run #{run.pk} was not admitted to a claim"
    assert claimed.pk == run.pk, f"the claim handed out run #{claimed.pk}, not #{run.pk}"
    return claimed


def _call(run: Run, seq: int) -> dict:
    return run.input["steps"][seq - 1]


def plan_step(run: Run, seq: int) -> Step:
    call = _call(run, seq)
    return services.step_plan(
        worker=run.lease_worker, run_id=run.pk, epoch=run.lease_epoch, seq=seq, tool=call["tool"], args=call["args"]
    )


def dispatch_step(run: Run, seq: int) -> Step:
    return services.step_dispatch(worker=run.lease_worker, run_id=run.pk, epoch=run.lease_epoch, seq=seq)


def complete_step(run: Run, seq: int, *, ok: bool = True, result=None, error: str = "", usage=None) -> bool:
    """Complete step `seq`; returns whether the run was asked to stop."""
    _, stop = services.step_complete(
        worker=run.lease_worker,
        run_id=run.pk,
        epoch=run.lease_epoch,
        seq=seq,
        ok=ok,
        result={"ok": seq} if result is None and ok else result,
        error=error,
        usage=usage,
    )
    return stop


def do_step(run: Run, seq: int) -> bool:
    plan_step(run, seq)
    dispatch_step(run, seq)
    return complete_step(run, seq)


def next_seq(run: Run) -> int:
    """The first step a worker still has to run: a continuation starts after its reused steps."""
    done = set(Step.objects.filter(run=run, parent_seq__isnull=True).values_list("seq", flat=True))
    seq = 1
    while seq in done:
        seq += 1
    return seq


def advance(run: Run, upto: int) -> None:
    """Run every step from the first unfinished one up to and including `upto`."""
    for seq in range(next_seq(run), upto + 1):
        do_step(run, seq)


def finish(run: Run, status: str = "succeeded") -> Run:
    return services.run_finish(worker=run.lease_worker, run_id=run.pk, epoch=run.lease_epoch, status=status)


def run_to_end(run: Run) -> Run:
    run = claim(run)
    advance(run, len(run.input["steps"]))
    return finish(run)


def lapse() -> list[Run]:
    """Move the clock past every live lease: running runs become interrupted, stopping ones stopped.

    It lapses *every* live lease, so crash runs one after the other before starting others.
    """
    later = timezone.now() + timedelta(seconds=settings.CONSOLE_LEASE_SECONDS + 1)
    return services.leases_expire(now=later)


def crash_after_dispatch(run: Run, seq: int) -> Run:
    """Claim `run`, run steps up to seq-1, record step seq's dispatch, then die: the lease lapses."""
    run = claim(run)
    advance(run, seq - 1)
    plan_step(run, seq)
    dispatch_step(run, seq)
    lapse()
    run.refresh_from_db()
    assert run.status == "interrupted", run.status
    return run


def crash_after_plan(run: Run, seq: int) -> Run:
    """Like crash_after_dispatch, but the worker died before step seq's dispatch was recorded."""
    run = claim(run)
    advance(run, seq - 1)
    plan_step(run, seq)
    lapse()
    run.refresh_from_db()
    assert run.status == "interrupted", run.status
    return run


def interrupted(org, steps, seq: int, **extra) -> Run:
    """A new task whose first run crashed right after step `seq` was dispatched."""
    return crash_after_dispatch(first_run(start(org, steps, **extra)), seq)


def parked(org, steps, seq: int, **extra) -> RecoveryAction:
    """A new task crashed at step `seq`, and the supervisor's pass over it: its one action."""
    run = interrupted(org, steps, seq, **extra)
    supervise_once()
    return RecoveryAction.objects.get(run=run)


def counts() -> dict:
    """Everything recovery may create; compare before/after to prove nothing happened."""
    return {
        "runs": Run.objects.count(),
        "actions": RecoveryAction.objects.count(),
        "attempts": RecoveryAttempt.objects.count(),
        "events": Event.objects.count(),
        "steps": Step.objects.count(),
    }


def state(action: RecoveryAction) -> dict:
    """The action's row and the counts, for 'nothing changed' assertions."""
    row = RecoveryAction.objects.filter(pk=action.pk).values().first()
    return {"action": row, **counts()}
