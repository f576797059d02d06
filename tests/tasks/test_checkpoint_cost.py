"""What a checkpoint costs, and that its fast road (one statement per write on PostgreSQL) saves exactly
what the general path saves; one wake-up per transaction for the web processes' relays."""

import psycopg
import pytest
from django.db import connection, transaction

from tasks import services
from tasks.models import AgentProfile, Event, Run, Step, Task
from tests.processes import database_url
from tests.recovery import engine as e

pytestmark = pytest.mark.django_db

POSTGRES = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's one-statement writes")


def _claimed(org, steps):
    return e.claim(e.first_run(e.start(org, steps)))


def test_one_step_is_three_statements_on_postgresql_and_bounded_on_sqlite(org, agent, django_assert_max_num_queries):
    run = _claimed(org, [e.SAFE, e.SAFE])
    fence = {"worker": e.worker(org), "run_id": run.pk, "epoch": run.lease_epoch, "seq": 1}
    # SQLite: each write locks its step and run in one read, writes, appends its event (plus savepoints).
    with django_assert_max_num_queries(3 if connection.vendor == "postgresql" else 16):
        services.step_plan(**fence, tool="sleep", args={"seconds": 0})
        services.step_dispatch(**fence)
        _, stop = services.step_complete(**fence, ok=True, result={"ok": 1}, usage=2)
    assert stop is False
    step = Step.objects.get(run=run, seq=1)
    assert (step.phase, step.result, step.usage, step.dispatch_epoch) == ("completed", {"ok": 1}, 2, 1)
    assert Task.objects.get(pk=run.task_id).budget_used == 2
    assert list(Event.objects.filter(run=run).order_by("id").values_list("kind", flat=True)) == [
        "run_queued",
        "run_claimed",
        "step_planned",
        "step_dispatched",
        "step_completed",
    ]


@POSTGRES
def test_the_one_statement_writes_are_prepared_once_per_connection(org, agent):
    """Django opens connections that prepare nothing (prepare_threshold=None); the checkpoint statements ask to be
    prepared, and with the console's pool they are: parsed and planned once, not on every step."""
    from tasks import checkpoints

    assert "pool" in connection.settings_dict["OPTIONS"]
    run = _claimed(org, [e.SAFE, e.SAFE, e.SAFE])
    fence = {"worker": e.worker(org), "run_id": run.pk, "epoch": run.lease_epoch}
    for seq in (1, 2, 3):
        services.step_plan(**fence, seq=seq, tool="sleep", args={"seconds": 0})
        services.step_dispatch(**fence, seq=seq)
        services.step_complete(**fence, seq=seq, ok=True, result={"ok": seq})
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = {row[0] for row in cursor.fetchall()}
    for statement in (checkpoints.PLAN_SQL, checkpoints.DISPATCH_SQL, checkpoints.COMPLETE_SQL):
        assert sum(statement.split("%(")[0] in p for p in prepared) == 1
    # Django's own (client-side bound) queries are never prepared.
    assert all("tasks_step" in p or "tasks_run" in p for p in prepared)


def _written(step: Step) -> dict:
    return {
        f.attname: getattr(step, f.attname)
        for f in Step._meta.concrete_fields
        if f.attname not in ("id", "run_id", "planned_at", "dispatched_at", "completed_at")
    }


def _events(run: Run) -> list[tuple]:
    return [
        (ev.kind, ev.actor, ev.payload, ev.task_id, ev.org_id)
        for ev in Event.objects.filter(run=run).exclude(kind="run_claimed").order_by("id")
    ]


@POSTGRES
@pytest.mark.parametrize("ok", [True, False])
def test_the_one_statement_writes_save_what_the_general_path_saves(org, agent, ok):
    AgentProfile.objects.filter(agent=agent).update(tool_modes={"sleep": "notify"})
    w = e.worker(org)
    runs = [_claimed(org, [e.SAFE]), _claimed(org, [e.SAFE])]
    fast, general = runs
    outcome = {"ok": ok, "result": {"n": [1, "ü"]} if ok else None, "error": "" if ok else "boom", "usage": 3}
    returned = {}
    for run, plan, dispatch, complete in (
        (fast, services.step_plan, services.step_dispatch, services.step_complete),
        (general, services._step_plan, services._step_dispatch, services._step_complete),
    ):
        fence = {"worker": w, "run_id": run.pk, "epoch": run.lease_epoch, "seq": 1}
        planned = plan(**fence, tool="sleep", args={"seconds": 0})
        dispatched = dispatch(**fence)
        completed, stop = complete(**fence, **outcome)
        returned[run.pk] = [_written(s) for s in (planned, dispatched, completed)] + [stop]
    assert returned[fast.pk] == returned[general.pk]
    assert _written(Step.objects.get(run=fast)) == _written(Step.objects.get(run=general))
    assert Step.objects.get(run=fast).recovery_mode == "notify"  # the profile's override, resolved in SQL
    assert [ev[:3] for ev in _events(fast)] == [ev[:3] for ev in _events(general)]
    assert Task.objects.get(pk=fast.task_id).budget_used == Task.objects.get(pk=general.task_id).budget_used == 3


@POSTGRES
def test_a_stale_epoch_on_the_fast_road_is_refused_by_the_general_path_and_writes_nothing(org, agent):
    from tasks.errors import StaleLease

    run = _claimed(org, [e.SAFE])
    e.plan_step(run, 1)
    before = Event.objects.count()
    with pytest.raises(StaleLease):
        services.step_dispatch(worker=e.worker(org), run_id=run.pk, epoch=run.lease_epoch + 1, seq=1)
    assert Step.objects.get(run=run, seq=1).phase == "planned"
    assert Event.objects.count() == before


def _notifications(listener) -> int:
    return sum(1 for _ in listener.notifies(timeout=0.5))


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_each_transaction_wakes_the_relays_once_and_a_claim_leaves_it_to_the_runs_next_write(org, agent):
    task = e.start(org, [e.SAFE, e.SAFE])
    e.worker(org)
    with psycopg.connect(database_url(), autocommit=True) as listener:
        listener.execute("LISTEN console_events")
        run = e.claim(e.first_run(task))
        assert _notifications(listener) == 0
        e.plan_step(run, 1)
        assert _notifications(listener) == 1
        with transaction.atomic():  # three events, one commit
            e.dispatch_step(run, 1)
            e.complete_step(run, 1)
            e.plan_step(run, 2)
        assert _notifications(listener) == 1


@pytest.mark.parametrize("epoch", [True, "1", 1.0, None])
def test_an_epoch_that_is_not_an_integer_is_a_stale_lease_on_every_write(org, agent, epoch):
    from tasks.errors import StaleLease

    run = _claimed(org, [e.SAFE])
    e.plan_step(run, 1)
    w = e.worker(org)
    before = Event.objects.count()
    with pytest.raises(StaleLease):
        services.step_plan(worker=w, run_id=run.pk, epoch=epoch, seq=2, tool="sleep", args={})
    with pytest.raises(StaleLease):
        services.step_dispatch(worker=w, run_id=run.pk, epoch=epoch, seq=1)
    with pytest.raises(StaleLease):
        services.step_complete(worker=w, run_id=run.pk, epoch=epoch, seq=1, ok=True)
    assert Step.objects.get(run=run, seq=1).phase == "planned"
    assert Event.objects.count() == before
