"""The queue: a continuation keeps its chain's place, the claim reads only queued runs, and what it costs."""

import pytest
from django.db import connection, transaction
from django.utils import timezone

from recovery.supervisor.loop import supervise_once
from tasks import services
from tasks.models import Event, Run, Task, WorkerInstance
from tasks.transitions import claim_sql
from tasks.worker_instances import forget_polls
from tests.recovery import engine as e

pytestmark = pytest.mark.django_db


def test_a_crashed_runs_continuation_is_claimed_before_work_queued_after_its_chain_began(org, agent):
    crashed = e.interrupted(org, [e.SAFE, e.SAFE], 1)  # the oldest chain: its worker died at step 1
    newer = [e.first_run(e.start(org, [e.SAFE], title=f"newer {i}")) for i in range(3)]
    supervise_once()  # replay-safe: continued automatically, queued after the newer runs
    continuation = Run.objects.get(continues=crashed)
    assert continuation.status == "queued" and continuation.pk > max(r.pk for r in newer)
    assert continuation.queued_since == crashed.queued_since

    first = services.run_claim(worker=e.worker(org), label="w1")
    assert first.pk == continuation.pk, "recovery waits behind work that was queued after its chain began"
    claimed = [services.run_claim(worker=e.worker(org), label="w1").pk for _ in newer]
    assert claimed == [r.pk for r in newer]  # the rest in the order they were queued


def test_a_fresh_start_joins_the_queue_at_the_end(org, agent):
    task = e.start(org, [e.SAFE])
    e.run_to_end(e.first_run(task))
    later = e.first_run(e.start(org, [e.SAFE], title="later"))
    with transaction.atomic():
        fresh = services.run_enqueue(task=Task.objects.get(pk=task.pk), actor="test", input=later.input)
    assert fresh.queued_since > later.queued_since
    assert services.run_claim(worker=e.worker(org), label="w1").pk == later.pk


def test_the_claim_skips_a_child_task_whose_ancestor_is_paused_and_takes_the_next(org, agent, operator):
    parent = e.start(org, [e.SAFE], title="parent")
    e.run_to_end(e.first_run(parent))
    child = e.start(org, [e.SAFE], title="child", parent=parent.pk)
    other = e.start(org, [e.SAFE], title="other")
    services.task_pause(actor=operator, task=Task.objects.get(pk=parent.pk))
    got = services.run_claim(worker=e.worker(org), label="w1")
    assert got.task_id == other.pk
    assert services.run_claim(worker=e.worker(org), label="w1") is None
    assert e.first_run(child).status == "queued"
    services.task_resume(actor=operator, task=Task.objects.get(pk=parent.pk))
    assert services.run_claim(worker=e.worker(org), label="w1").task_id == child.pk


def test_a_claim_is_one_transaction_with_its_event_its_task_and_the_instance_poll(
    org, agent, django_assert_max_num_queries
):
    task = e.start(org, [e.SAFE])
    worker = e.worker(org)
    # The claim's transaction (PostgreSQL: the claim statement in a savepoint here; SQLite: the run, the task, the
    # follow-ups it hands over, the event, the instance poll), then the chain's workspace baseline, recorded after
    # it commits so no workspace is read with the run locked (the task, the manifest, one savepoint).
    with django_assert_max_num_queries(8 if connection.vendor == "postgresql" else 13):
        run = services.run_claim(worker=worker, label="w1")
    assert run.status == "running" and run.lease_epoch == 1 and run.lease_owner == "w1/w1"
    assert run.task.workspace == task.workspace and run.agent.name == "builder"
    saved = Run.objects.get(pk=run.pk)
    assert (saved.status, saved.lease_epoch, saved.lease_expires_at) == ("running", 1, run.lease_expires_at)
    assert Task.objects.get(pk=task.pk).status == "in_progress"
    event = Event.objects.get(kind="run_claimed")
    assert event.payload == {"epoch": 1, "owner": "w1/w1", "attempt": 1, "continues": None, "messages_delivered": []}
    assert event.actor == "worker:w1"
    instance = WorkerInstance.objects.get(worker=worker, instance="w1")
    assert instance.last_claim_at is not None
    # A poll within the second is not recorded again (at most one upsert a second per instance)…
    assert services.run_claim(worker=worker, label="w1") is None
    assert WorkerInstance.objects.get(pk=instance.pk).last_seen_at == instance.last_seen_at
    # …a poll after it that finds nothing is seen too, and keeps the time of the last claim.
    forget_polls()  # the second has passed
    assert services.run_claim(worker=worker, label="w1") is None
    polled = WorkerInstance.objects.get(pk=instance.pk)
    assert polled.last_seen_at > instance.last_seen_at and polled.last_claim_at == instance.last_claim_at


def test_an_instance_poll_is_recorded_at_most_once_a_second_and_a_claim_is_not_held_back(org, agent, monkeypatch):
    from tasks import worker_instances

    clock = [1000.0]
    monkeypatch.setattr(worker_instances.time, "monotonic", lambda: clock[0])
    worker = e.worker(org)
    assert services.run_claim(worker=worker, label="w1") is None
    first = WorkerInstance.objects.get(worker=worker, instance="w1")
    assert first.last_claim_at is None
    clock[0] += 0.5
    assert services.run_claim(worker=worker, label="w1") is None  # within the second: not written again
    assert WorkerInstance.objects.get(pk=first.pk).last_seen_at == first.last_seen_at
    e.start(org, [e.SAFE])
    run = services.run_claim(worker=worker, label="w1")  # a claim within the second is recorded all the same
    claimed = WorkerInstance.objects.get(pk=first.pk)
    assert run is not None and claimed.last_claim_at is not None and claimed.last_seen_at > first.last_seen_at
    clock[0] += 1.0
    assert services.run_claim(worker=worker, label="w1") is None  # a second after the last record: recorded
    polled = WorkerInstance.objects.get(pk=first.pk)
    assert polled.last_seen_at > claimed.last_seen_at and polled.last_claim_at == claimed.last_claim_at


def test_a_claim_that_fails_writes_nothing(org, agent, monkeypatch):
    e.start(org, [e.SAFE])
    worker = e.worker(org)

    def broken(run):
        raise RuntimeError("a listener failed")

    monkeypatch.setattr(services.lifecycle, "run_started", broken)
    with pytest.raises(RuntimeError):
        services.run_claim(worker=worker, label="w1")
    assert Run.objects.get().status == "queued"
    assert not Event.objects.filter(kind="run_claimed").exists()
    assert not WorkerInstance.objects.exists()


@pytest.mark.postgres
def test_the_claim_reads_the_partial_index_of_queued_runs_not_every_run(org, agent):
    if connection.vendor != "postgresql":
        pytest.skip("the plan of PostgreSQL's claim statement")
    now = timezone.now()
    tasks = Task.objects.bulk_create([Task(org=org, title=f"t{i}", agent=agent) for i in range(3000)])
    Run.objects.bulk_create(
        [
            Run(org=org, task=t, agent=agent, status="succeeded" if i < 2900 else "queued", queued_since=now)
            for i, t in enumerate(tasks)
        ]
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        worker = e.worker(org)
        params = {
            "org": org.pk,
            "worker": worker.pk,
            "owner": "w/x",
            "label": "x",
            "actor": "worker:w",
            "now": now,
            "expires": now,
            "skipped": [],
            "agents": None,
            "kinds": None,
            "held": "",
            "seen": True,
            "seen_claim": True,
        }
        cursor.execute("EXPLAIN " + claim_sql(), params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        # A worker that claims only some agents' runs, or only agent runs, reads an index of live runs too.
        cursor.execute("EXPLAIN " + claim_sql(), {**params, "agents": ["builder"], "kinds": ["agent"]})
        narrowed = "\n".join(row[0] for row in cursor.fetchall())
    assert "run_queue" in plan, plan
    assert "Seq Scan on tasks_run" not in narrowed and "Index" in narrowed, narrowed
