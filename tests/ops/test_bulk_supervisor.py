"""A real `manage.py supervise` runs a bulk operation; killed midway (SIGKILL), nothing is half done or done twice."""

import signal
import subprocess
import sys

import pytest

from recovery.bulk import bulk_advance, bulk_execute, bulk_preview
from recovery.models import BulkItem, BulkOperation, RecoveryAttempt
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
