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
