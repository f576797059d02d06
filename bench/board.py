"""board_100k_vs_1k and board_queries_100k_vs_1k: the board page `GET /` of an organization with
100,000 tasks beside the same page of one with 1,000 tasks (the same mix of states), interleaved, in the
same database: its time, and its number of queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bench.core import Context, figure, interleave, median, record, timed

BIG, SMALL = 100_000, 1_000

# (share of tasks, task status, paused, run status, action status or None)
MIX = [
    (50, "done", False, "succeeded", None),
    (12, "in_progress", False, "running", None),
    (10, "in_progress", False, "queued", None),
    (8, "blocked", False, "interrupted", "open"),  # needs_decision
    (3, "blocked", False, "interrupted", "exhausted"),  # exhausted
    (7, "blocked", False, "stopped", None),  # blocked
    (4, "in_progress", True, "queued", None),  # blocked (paused)
    (6, "cancelled", False, "cancelled", None),
]
SEARCH_WORD = "invoice"  # in 1 title of 100


def seed(org, agent, operator, n: int, batch: int = 5_000) -> None:
    from django.db import transaction

    shapes = [shape for share, *shape in MIX for _ in range(share)]
    now = datetime.now(UTC)
    for first in range(0, n, batch):
        with transaction.atomic():
            _batch(org, agent, operator, shapes, now, range(first, min(first + batch, n)))


def _batch(org, agent, operator, shapes, now, idx: range) -> None:
    from recovery.models import RecoveryAction
    from tasks.models import Run, Task

    tasks = Task.objects.bulk_create(
        [
            Task(
                org=org,
                title=f"{'export ' + SEARCH_WORD if i % 100 == 7 else 'task'} {i} for the bench",
                agent=agent,
                creator=operator,
                status=shapes[i % len(shapes)][0],
                paused=shapes[i % len(shapes)][1],
                private=i % 50 == 3,
            )
            for i in idx
        ]
    )
    runs = []
    for i, task in zip(idx, tasks, strict=True):
        run_status = shapes[i % len(shapes)][2]
        leased = run_status == "running"
        runs.append(
            Run(
                org=org,
                task=task,
                agent=agent,
                status=run_status,
                input={"steps": [{"tool": "sleep", "args": {"seconds": 0}}]},
                lease_owner="" if run_status == "queued" else "bench/w",
                lease_epoch=0 if run_status == "queued" else 1,
                lease_expires_at=now + timedelta(hours=1) if leased else None,
                started_at=None if run_status == "queued" else now,
                finished_at=None if run_status in ("queued", "running") else now,
                error_code="lease_lapsed" if run_status == "interrupted" else "",
            )
        )
    runs = Run.objects.bulk_create(runs)
    actions = []
    for i, task, run in zip(idx, tasks, runs, strict=True):
        action_status = shapes[i % len(shapes)][3]
        if action_status:
            actions.append(
                RecoveryAction(
                    org=org,
                    task=task,
                    run=run,
                    kind="unknown_outcome" if action_status == "open" else "continuation",
                    status=action_status,
                    cause="unknown_outcome" if action_status == "open" else "interrupted_twice",
                    evidence={"seq": 1, "tool": "file_write"},
                    seq=1,
                    original_owner=agent,
                    recovery_owner="role:operator" if action_status == "open" else "role:admin",
                    attempts=0 if action_status == "open" else 2,
                    max_attempts=2,
                    due_at=now + timedelta(days=1),
                )
            )
    RecoveryAction.objects.bulk_create(actions)


def _client(user):
    from django.conf import settings
    from django.test import Client

    if "testserver" not in settings.ALLOWED_HOSTS:
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    client = Client()
    client.force_login(user)
    return client


def _get(client, path: str = "/"):
    response = client.get(path)
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} answered {response.status_code}")
    return response


@figure("board_100k_vs_1k", "board_queries_100k_vs_1k", budget=240, order=90)
def board(ctx: Context):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from bench.fixtures import org_with_people, vacuum_analyze

    sides = {}
    for label, n in (("small", SMALL), ("big", BIG)):
        org, agent, operator, _ = org_with_people(f"bench-board-{label}")
        seed(org, agent, operator, n)
        sides[label] = _client(type(operator).objects.get(pk=operator.pk))
    vacuum_analyze()
    queries = {}
    for label, client in sides.items():
        _get(client)  # warm-up (sessions, template caches)
        with CaptureQueriesContext(connection) as captured:
            _get(client)
        queries[label] = len(captured.captured_queries)
    a, b = interleave(
        lambda: timed(lambda: _get(sides["big"])), lambda: timed(lambda: _get(sides["small"])), rounds=30, ctx=ctx
    )
    return [
        record(
            "board_100k_vs_1k",
            value=median(a) * 1000,
            unit="ms",
            baseline=f"the same page at {SMALL:,} tasks",
            baseline_value=median(b) * 1000,
            target_ratio=1.5,
            better="lower",
            note=f"GET / as an operator, median of {len(a)} interleaved pairs ({BIG:,} vs {SMALL:,} tasks)",
        ),
        record(
            "board_queries_100k_vs_1k",
            value=queries["big"],
            unit="queries",
            baseline=f"the same page at {SMALL:,} tasks",
            baseline_value=queries["small"],
            target_ratio=1.0,
            better="lower",
        ),
    ]
