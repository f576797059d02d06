"""A real `manage.py supervise` runs a bulk operation; killed midway (SIGKILL), nothing is half done or done twice."""

import signal
import sqlite3
import subprocess
import sys

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from recovery.bulk.operations import bulk_advance, bulk_execute, bulk_preview
from recovery.models import BulkItem, BulkOperation, RecoveryAction, RecoveryAttempt
from tasks.accounts import member_add
from tasks.models import Event, Run
from tests.processes import ROOT, child_env, wait_for
from tests.recovery.bulk_scenarios import unknown_outcomes

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def supervisor(**env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "supervise", "--interval", "5", "--label", "bulk-test"],
        cwd=ROOT,
        env=child_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_supervisor_killed_mid_operation_leaves_every_item_done_once_or_pending(org, agent, operator):
    actions = unknown_outcomes(org, 40)
    op = bulk_preview(
        user=operator, action="decide", filter={"state": "needs_decision"}, params={"outcome": "performed"}
    )
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    proc = supervisor(CONSOLE_BULK_BATCH=4)
    try:
        # It starts within a tick of its first pass, and works in batches.
        wait_for(lambda: BulkItem.objects.filter(op=op, result="applied").count() >= 6, timeout=60, what="progress")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    applied = BulkItem.objects.filter(op=op, result="applied").count()
    pending = BulkItem.objects.filter(op=op, result="").count()
    assert 6 <= applied < 40 and applied + pending == 40, (applied, pending)
    assert BulkOperation.objects.get(pk=op.pk).status == "running"
    # What committed is whole: every applied item has its attempt and its event; a pending one has neither.
    for item in BulkItem.objects.filter(op=op):
        attempts = RecoveryAttempt.objects.filter(action_id=item.action_id).count()
        events = Event.objects.filter(task_id=item.task_id, kind="bulk_item").count()
        assert (attempts, events) == ((1, 1) if item.result == "applied" else (0, 0)), item

    # Another executor (here in-process) finishes exactly the rest.
    assert bulk_advance(budget=60) == pending
    assert BulkOperation.objects.get(pk=op.pk).status == "finished"
    for a in actions:
        assert RecoveryAttempt.objects.filter(action=a).count() == 1
        assert Run.objects.filter(task_id=a.task_id).count() == 2
        assert Event.objects.filter(task_id=a.task_id, kind="bulk_item").count() == 1


def demote_mid_batch(op, operator, org):
    """Make the operator a viewer while the supervisor is between two items of one batch, after some were applied;
    returns when that committed.

    PostgreSQL: a transaction of the test locks the recovery action of a later item, so the executor waits inside
    that item (its role already read); the role changes (`member_add`) and commits with the lock's release.
    SQLite has one writer, and the executor takes the lock again microseconds after each item's commit, so a
    service call of the test (whose busy handler sleeps between tries) would land only after the batch: the
    test spins on the lock itself and changes the membership row in SQL while it holds it."""
    wait_for(lambda: BulkItem.objects.filter(op=op, result="applied").count() >= 2, timeout=60, what="progress")
    if connection.vendor == "sqlite":
        raw = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, timeout=0)
        try:
            while True:
                try:
                    raw.execute("BEGIN IMMEDIATE")
                    break
                except sqlite3.OperationalError:
                    continue
            raw.execute(
                "UPDATE tasks_membership SET role = 'viewer' WHERE user_id = ? AND org_id = ?", [operator.pk, org.pk]
            )
            raw.execute("COMMIT")
        finally:
            raw.close()
        return timezone.now()
    with transaction.atomic():
        applied = BulkItem.objects.filter(op=op, result="applied").count()
        later = BulkItem.objects.filter(op=op, result="", position__gt=applied + 5).order_by("position").first()
        RecoveryAction.objects.select_for_update().get(pk=later.action_id)
        wait_for(lambda: lock_waiters() >= 1, timeout=60, what="the executor to wait inside an item")
        member_add(org=org, username=operator.username, role="viewer")
    return timezone.now()


def lock_waiters() -> int:
    db = connection.settings_dict["NAME"]
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=db, autocommit=True) as admin:
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'"
        return admin.execute(query, [db]).fetchone()[0]


def test_a_role_lost_midway_through_a_batch_is_seen_by_the_next_item(org, agent, operator):
    """The executor reads the person's membership again for every item, inside the item's transaction: once the
    operator is made a viewer, no further item is applied for them, even within the same batch (memberships were
    read once per batch, so the rest of a batch still went through)."""
    unknown_outcomes(org, 40)
    op = bulk_preview(
        user=operator, action="decide", filter={"state": "needs_decision"}, params={"outcome": "performed"}
    )
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    proc = supervisor(CONSOLE_BULK_BATCH=1000)  # one batch for every item
    try:
        demoted_at = demote_mid_batch(op, operator, org)
        wait_for(lambda: BulkOperation.objects.get(pk=op.pk).status == "finished", timeout=120, what="the end of it")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    items = list(BulkItem.objects.filter(op=op).order_by("position"))
    later = [i for i in items if i.done_at > demoted_at]
    assert len(later) >= 10, "the batch ended before the role changed: nothing to judge"
    # At most the item waiting when the role changed goes through (its role was read); every later one is refused.
    assert sum(1 for i in later if i.result == "applied") <= 1, [(i.position, i.result) for i in later]
    assert all((i.result, i.reason) == ("failed", "forbidden") for i in later[1:]), [
        (i.result, i.reason) for i in later
    ]
