"""Two executors on one operation at once (two supervisors, or a supervisor and a `--once`): each item once."""

import pytest

from recovery.bulk.operations import bulk_advance, bulk_execute, bulk_preview
from recovery.models import BulkItem, RecoveryAttempt
from tasks.models import Event, Run
from tests.recovery.bulk_scenarios import unknown_outcomes
from tests.recovery.races import race

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_two_executors_apply_every_item_exactly_once(org, agent, operator):
    actions = unknown_outcomes(org, 12)
    op = bulk_preview(
        user=operator, action="decide", filter={"state": "needs_decision"}, params={"outcome": "performed"}
    )
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)

    settled = race([lambda: bulk_advance(budget=30, batch=3), lambda: bulk_advance(budget=30, batch=3)])

    assert sum(settled) == 12
    assert set(BulkItem.objects.filter(op=op).values_list("result", flat=True)) == {"applied"}
    for a in actions:
        assert RecoveryAttempt.objects.filter(action=a).count() == 1
        assert Run.objects.filter(task_id=a.task_id).count() == 2
        assert Event.objects.filter(task_id=a.task_id, kind="bulk_item").count() == 1
    assert Event.objects.filter(kind="bulk_finished", payload__bulk=op.pk).count() == 1
