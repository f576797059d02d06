"""bulk_5k: one bulk operation over 5,000 tasks, and the same over 1,000, on the bench database.

What must not grow with the scope: the queries of one executed batch (each item goes
through the single-click service, in batches of CONSOLE_BULK_BATCH), and the peak
memory of the preview and of the execution (the scope is frozen and executed a chunk
at a time, never held whole; the execution's memory is traced over its first and last
TRACED batches, its speed taken from the untraced ones between). Each size gets its own organization of tasks whose runs
were cut off after dispatching a write: one open unknown-outcome action each,
bulk-created valid against every constraint. The operation cancels those actions
(every item applied), because the point is the executor's shape, not one service's cost.

`figures()` returns records shaped for the bench runner's registry:
{"name", "value", "unit", "baseline", "baseline_value", "ratio", "target_ratio", "better"};
`bulk()` registers them with the runner (`python -m bench bulk`).
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from datetime import UTC, datetime, timedelta

from bench.core import Context, figure, record

# The baseline holds two preview chunks (500 tasks each) and 20 batches: what is bounded by a chunk or a
# batch is then compared with itself, not with a half-filled one.
SIZES = (1_000, 5_000)
ACTION = "cancel"
TRACED = 5  # batches traced for memory at the start and at the end of an execution


def _seed(n: int):
    """An organization with `n` tasks, each with an interrupted run and an open unknown-outcome action."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from recovery.models import RecoveryAction
    from tasks.accounts import agent_add, member_add, org_create
    from tasks.models import Agent, Run, Task

    slug = f"bulk-{n}"
    org, _ = org_create(slug=slug, name=f"Bulk {n}")
    member_add(org=org, username=f"{slug}-operator", role="operator", password="bench-password-1234")
    agent_add(org=org, name="builder")
    agent = Agent.objects.get(org=org, name="builder")
    now = datetime.now(UTC)
    plan = {"steps": [{"tool": "file_write", "args": {"path": "report.md", "content": "# Report"}}]}
    with transaction.atomic():
        for first in range(0, n, 1000):
            tasks = Task.objects.bulk_create(
                [
                    Task(org=org, agent=agent, title=f"post invoice {i}", status="blocked")
                    for i in range(first, min(first + 1000, n))
                ]
            )
            runs = Run.objects.bulk_create(
                [
                    Run(
                        org=org,
                        task=t,
                        agent=agent,
                        status="interrupted",
                        input=plan,
                        lease_owner="bench/w",
                        lease_epoch=1,
                        started_at=now,
                        finished_at=now,
                        error_code="lease_lapsed",
                    )
                    for t in tasks
                ]
            )
            RecoveryAction.objects.bulk_create(
                [
                    RecoveryAction(
                        org=org,
                        task=t,
                        run=r,
                        kind="unknown_outcome",
                        cause="unknown_outcome",
                        evidence={"seq": 1, "tool": "file_write", "args": plan["steps"][0]["args"]},
                        seq=1,
                        original_owner=agent,
                        recovery_owner="role:operator",
                        due_at=now + timedelta(days=1),
                    )
                    for t, r in zip(tasks, runs, strict=True)
                ]
            )
    return org, get_user_model().objects.get(username=f"{slug}-operator")


class QueryCounter:
    """A database execute wrapper that counts statements and keeps nothing of them."""

    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def measure(n: int) -> dict:
    """Preview and execute one operation over `n` tasks; queries per batch, peak memory, seconds."""
    from django.db import connection, reset_queries

    from recovery.bulk.operations import batch_size, bulk_batch, bulk_execute, bulk_preview
    from recovery.models import BulkItem

    org, user = _seed(n)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    # Queries are counted, not captured: a captured query keeps its text (a chunk's insert is large), which
    # would make the measured memory grow with the number of chunks.
    counter = QueryCounter()
    with connection.execute_wrapper(counter):
        op = bulk_preview(user=user, action=ACTION, filter={"state": "needs_decision"}, org_id=org.pk)
    preview_s = time.perf_counter() - started
    preview_queries = counter.count
    preview_peak = tracemalloc.get_traced_memory()[1] - base
    reset_queries()
    tracemalloc.stop()
    bulk_execute(user=user, op_id=op.pk, scope_hash=op.scope_hash)
    # Tracing every allocation slows Python by about 2.5 times, which for 5,000 items would outrun the bench's
    # time bound: the first and the last TRACED batches are traced (the executor keeps nothing between
    # batches, so a peak that grew with the scope would show there), the ones between run untraced.
    per_batch, execute_peak, execute_s, done = [], 0, 0.0, 0
    batch = batch_size()
    while True:
        traced = len(per_batch) < TRACED or n - done <= TRACED * batch
        if traced:
            gc.collect()
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
        started = time.perf_counter()
        counter = QueryCounter()
        with connection.execute_wrapper(counter):
            settled = bulk_batch(op.pk)
        elapsed = time.perf_counter() - started
        if traced:
            execute_peak = max(execute_peak, tracemalloc.get_traced_memory()[1] - base)
            tracemalloc.stop()
        else:
            execute_s += elapsed  # seconds per item are taken from untraced batches only
        if not settled:
            break
        done += settled
        per_batch.append(counter.count)
    untraced = max(1, done - 2 * TRACED * batch)
    applied = BulkItem.objects.filter(op=op, result="applied").count()
    assert op.count == n and applied == n, f"{applied} of {n} applied"
    full = per_batch[:-1] or per_batch  # the last batch may be short
    return {
        "items": n,
        "batch": batch_size(),
        "batches": len(per_batch),
        "preview_queries": preview_queries,
        "preview_s": preview_s,
        "queries_per_batch": max(full),
        "execute_s": execute_s,
        "untraced_items": untraced,
        "preview_peak_bytes": preview_peak,
        "execute_peak_bytes": execute_peak,
    }


def _record(name, value, unit, base_n, base_value, target, better="lower") -> dict:
    return {
        "name": name,
        "value": round(value, 3),
        "unit": unit,
        "baseline": f"the same operation over {base_n:,} tasks",
        "baseline_value": round(base_value, 3),
        "ratio": round(value / base_value, 3) if base_value else None,
        "target_ratio": target,
        "better": better,
    }


def _records(small: dict, large: dict) -> list[dict]:
    n0, n1 = small["items"], large["items"]
    # Flat means within a margin for noise: what grew with the scope would be 5 times larger (n1 / n0).
    flat = 1.1
    return [
        _record(
            f"bulk_{n1}_queries_per_batch", large["queries_per_batch"], "queries", n0, small["queries_per_batch"], 1.0
        ),
        _record(
            f"bulk_{n1}_execute_peak_memory",
            large["execute_peak_bytes"] / 1024,
            "KiB",
            n0,
            small["execute_peak_bytes"] / 1024,
            flat,
        ),
        _record(
            f"bulk_{n1}_preview_peak_memory",
            large["preview_peak_bytes"] / 1024,
            "KiB",
            n0,
            small["preview_peak_bytes"] / 1024,
            flat,
        ),
        _record(
            f"bulk_{n1}_peak_memory_per_item",
            large["execute_peak_bytes"] / n1,
            "bytes/item",
            n0,
            small["execute_peak_bytes"] / n0,
            flat * n0 / n1,
        ),
        _record(
            f"bulk_{n1}_seconds_per_item",
            large["execute_s"] / large["untraced_items"],
            "s/item",
            n0,
            small["execute_s"] / small["untraced_items"],
            None,  # a report: the two sizes run one after the other, not interleaved, on a database that grows
        ),
    ]


def _measure_both(sizes) -> tuple[dict, dict]:
    from django.conf import settings

    settings.DEBUG = False  # CaptureQueriesContext counts regardless; DEBUG would keep every query's text
    return measure(min(sizes)), measure(max(sizes))


def figures(sizes=SIZES) -> list[dict]:
    """The records for the bench runner: the largest size compared with the smallest (target ratio 1.0 = flat)."""
    return _records(*_measure_both(sizes))


@figure(
    "bulk_5000_queries_per_batch",
    "bulk_5000_execute_peak_memory",
    "bulk_5000_preview_peak_memory",
    "bulk_5000_peak_memory_per_item",
    "bulk_5000_seconds_per_item",
    budget=180,
    order=95,
)
def bulk(ctx: Context):
    """One bulk operation over 5,000 tasks against the same over 1,000: queries per batch and memory stay flat."""
    return [record(r.pop("name"), **{k: v for k, v in r.items() if k != "ratio"}) for r in figures()]
