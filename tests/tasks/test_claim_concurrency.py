"""Claims are exactly-once under concurrency, and on PostgreSQL nobody waits for anybody."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections, transaction

from tasks.models import Event, Run, Worker
from tasks.services import run_claim, task_create
from tests.factories import worker_token
from tests.helpers import plan


def _queue(org, n):
    for i in range(n):
        task_create(org=org, actor="test", title=f"t{i}", agent="builder", input=plan(("sleep", {"seconds": 0})))


@pytest.mark.django_db(transaction=True)
def test_16_threads_claim_200_runs_each_exactly_once(org, agent):
    _queue(org, 200)
    worker_token(org, "w1")
    worker = Worker.objects.get(name="w1")
    start = threading.Barrier(16)

    def claimer(i):
        start.wait()
        got = []
        try:
            while (run := run_claim(worker=worker, label=f"t{i}")) is not None:
                got.append(run.pk)
        finally:
            connections.close_all()
        return got

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(claimer, range(16)))

    claimed = [pk for got in results for pk in got]
    assert len(claimed) == 200
    assert sorted(claimed) == sorted(Run.objects.values_list("pk", flat=True))
    assert not Run.objects.exclude(status="running").exists()
    assert set(Run.objects.values_list("lease_epoch", flat=True)) == {1}
    assert Event.objects.filter(kind="run_claimed").count() == 200


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_claimer_skips_a_row_another_holds_instead_of_waiting(org, agent):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has a single writer at a time: there is no row lock to skip")
    _queue(org, 2)
    worker_token(org, "w1")
    worker = Worker.objects.get(name="w1")
    first, second = Run.objects.order_by("id").values_list("pk", flat=True)
    holding = threading.Event()
    release = threading.Event()

    def hold_first_row():
        try:
            with transaction.atomic():
                Run.objects.select_for_update().get(pk=first)
                holding.set()
                release.wait(10)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_first_row)
    holder.start()
    try:
        assert holding.wait(5)
        with connection.cursor() as cursor:
            # Were the claim to wait on the held row, this would fail it fast.
            cursor.execute("SET lock_timeout = '500ms'")
        run = run_claim(worker=worker, label="x")
        assert run is not None and run.pk == second
    finally:
        release.set()
        holder.join()
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")


@pytest.mark.django_db(transaction=True)
def test_a_claim_outside_any_transaction_is_one_statement_and_a_child_task_still_goes_through_the_machine(
    org, agent, django_assert_max_num_queries
):
    """On PostgreSQL a claim outside any transaction is its one statement alone (autocommit: no BEGIN, no
    COMMIT); a candidate it only locks (here a child task) is claimed again in a transaction, through move()."""
    from tests.recovery import engine as e

    parent = e.start(org, [e.SAFE], title="parent")
    e.run_to_end(e.first_run(parent))
    child = e.start(org, [e.SAFE], title="child", parent=parent.pk)
    worker = e.worker(org)
    run = run_claim(worker=worker, label="w1")
    assert run.task_id == child.pk and run.status == "running" and run.lease_epoch == 1
    assert Run.objects.get(pk=run.pk).status == "running"
    assert Event.objects.filter(kind="run_claimed", run_id=run.pk).count() == 1

    fresh = e.first_run(e.start(org, [e.SAFE], title="fresh"))
    with django_assert_max_num_queries(20) as queries:
        run = run_claim(worker=worker, label="w1")
    assert run.pk == fresh.pk and run.status == "running" and run.lease_epoch == 1
    if connection.vendor == "postgresql":
        # The claim is its statement alone; what follows is the chain's workspace baseline, after it committed.
        claim, *baseline = [q["sql"] for q in queries.captured_queries]
        assert "WITH candidate AS" in claim
        assert all(q in ("BEGIN", "COMMIT") or "tasks_workspacefile" in q for q in baseline), baseline
    saved = Run.objects.get(pk=run.pk)
    assert (saved.status, saved.lease_epoch, saved.lease_owner) == ("running", 1, "w1/w1")
    assert saved.task.status == "in_progress"
    assert Event.objects.filter(kind="run_claimed", run_id=run.pk).count() == 1
