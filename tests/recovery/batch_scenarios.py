"""Shared by test modules (from test_batch_continuations.py): no test module imports another."""

from tasks import services
from tasks.batches import item_args, parse_batch
from tasks.models import Run, Step
from tests.recovery import engine

WRITE = (
    "foreach",
    {"items": ["a", "b", "c"], "do": {"tool": "file_write", "args": {"path": "{{item}}", "content": "x"}}},
)


def do_item(run: Run, position: int, *, phase: str = "completed") -> None:
    """The worker's calls for item `position` of the batch at step 1, stopping at `phase`."""
    batch = parse_batch(run.input["steps"][0]["args"])
    seq, kw = 100_000 + position, {"worker": run.lease_worker, "run_id": run.pk, "epoch": run.lease_epoch}
    services.step_plan(**kw, seq=seq, tool=batch.tool, args=item_args(batch, position), parent_seq=1)
    if phase == "planned":
        return
    services.step_dispatch(**kw, seq=seq)
    if phase in ("completed", "failed"):
        services.step_complete(**kw, seq=seq, ok=phase == "completed", result={"item": position}, error="boom")


def cut_batch(run: Run, done: int, *, failed: tuple = ()) -> Run:
    """Claim `run`; items 1..done finish (those in `failed` fail), item done+1 is dispatched; the worker dies."""
    run = engine.claim(run)
    engine.plan_step(run, 1)
    engine.dispatch_step(run, 1)
    for position in range(1, done + 1):
        if Step.objects.filter(run=run, seq=100_000 + position).exists():
            continue  # carried into this continuation
        do_item(run, position, phase="failed" if position in failed else "completed")
    do_item(run, done + 1, phase="dispatched")
    engine.lapse()
    run.refresh_from_db()
    return run
