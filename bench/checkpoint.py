"""checkpoint_vs_bare_commits: one step checkpointed through the services (plan, dispatch, complete:
three transactions, as the protocol requires) beside three bare single-row commits on the same database."""

from __future__ import annotations

from bench.core import Context, figure, interleave, median, record, timed

STEPS = 400


def _bare_commit(cursor_sql: str) -> None:
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(cursor_sql)


@figure("checkpoint_vs_bare_commits", budget=45, order=10)
def checkpoint(ctx: Context):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from bench.fixtures import org_with_people
    from tasks import services

    org, agent, _, worker = org_with_people("bench-checkpoint")
    plan = {"steps": [{"tool": "sleep", "args": {"seconds": 0}} for _ in range(STEPS)]}
    task = services.task_create(org=org, actor="bench", title="checkpoints", agent=agent.name, input=plan)
    run = services.run_claim(worker=worker, label="bench")
    assert run is not None and run.task_id == task.pk
    epoch = run.lease_epoch
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE bench_bare (id integer PRIMARY KEY, n integer NOT NULL)")
        cursor.execute("INSERT INTO bench_bare (id, n) VALUES (1, 0)")
    bump = "UPDATE bench_bare SET n = n + 1 WHERE id = 1"
    seq = iter(range(1, STEPS + 1))

    def one_step(n: int) -> None:
        services.step_plan(worker=worker, run_id=run.pk, epoch=epoch, seq=n, tool="sleep", args={"seconds": 0})
        services.step_dispatch(worker=worker, run_id=run.pk, epoch=epoch, seq=n)
        services.step_complete(worker=worker, run_id=run.pk, epoch=epoch, seq=n, ok=True, result={"slept": 0})

    def ours() -> float:
        n = next(seq)
        return timed(lambda: one_step(n))

    def bare() -> float:
        return timed(lambda: [_bare_commit(bump) for _ in range(3)])

    try:
        for _ in range(10):  # warm up both paths (connections, statement caches)
            ours()
            bare()
        with CaptureQueriesContext(connection) as captured:
            ours()
        statements = len(captured.captured_queries)
        a, b = interleave(ours, bare, rounds=STEPS - 12, ctx=ctx, reserve=2)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE bench_bare")
    return [
        record(
            "checkpoint_vs_bare_commits",
            value=median(a) * 1000,
            unit="ms",
            baseline="three bare single-row commits",
            baseline_value=median(b) * 1000,
            target_ratio=1.5,
            better="lower",
            note=f"median of {len(a)} interleaved pairs; one checkpointed step sends {statements} SQL statements "
            "(BEGIN and COMMIT included); the baseline sends BEGIN, UPDATE, COMMIT three times",
        )
    ]
