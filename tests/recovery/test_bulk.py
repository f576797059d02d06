"""Bulk triage through the real services: a frozen scope, executed exactly, item by item."""

import pytest
from django.db import transaction

from recovery.actions.commands import action_decide
from recovery.bulk.operations import (
    bulk_advance,
    bulk_batch,
    bulk_cancel,
    bulk_execute,
    bulk_preview,
    bulk_retry_failed,
)
from recovery.models import BulkItem, BulkOperation, RecoveryAction, RecoveryAttempt
from tasks.accounts import member_add
from tasks.errors import Forbidden, Invalid, NotEligible, NotFound, ScopeChanged
from tasks.models import Event, Run, Task
from tasks.services import task_pause
from tests.factories import make_member
from tests.recovery.bulk_scenarios import unknown_outcomes

pytestmark = pytest.mark.django_db

DECIDE = {"outcome": "performed", "note": "checked the billing log: it went through"}


def results(op) -> dict[int, tuple[str, str]]:
    return {i.task_id: (i.result, i.reason) for i in BulkItem.objects.filter(op=op)}


def test_a_preview_freezes_the_scope_and_changes_nothing(org, agent, operator):
    actions = unknown_outcomes(org, 4)
    task_pause(actor=operator, task=actions[3].task)
    before = Event.objects.order_by("-id").values_list("id", flat=True).first()
    op = bulk_preview(user=operator, action="decide", filter={"state": "needs_decision"}, params=DECIDE)
    assert op.status == "previewed" and op.count == 4 and len(op.scope_hash) == 64
    # The paused one would be refused by its gate, and the preview says so before anything happens.
    assert op.refusals == {"task_paused": 1}
    items = list(BulkItem.objects.filter(op=op).order_by("position"))
    assert [i.task_id for i in items] == sorted(a.task_id for a in actions)
    assert all(i.action_id and i.version == 1 and i.result == "" for i in items)
    assert [e.kind for e in Event.objects.filter(pk__gt=before)] == ["bulk_previewed"]
    assert all(a.status == "open" and a.version == 1 for a in RecoveryAction.objects.filter(task__org=org))


def test_executing_decides_every_item_through_the_service_with_its_event(org, agent, operator):
    actions = unknown_outcomes(org, 3)
    op = bulk_preview(user=operator, action="decide", ids=[a.task_id for a in actions], params=DECIDE)
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    assert bulk_advance(budget=10) == 3
    op.refresh_from_db()
    assert op.status == "finished" and op.finished_at is not None
    for a in RecoveryAction.objects.filter(pk__in=[a.pk for a in actions]):
        assert a.status == "retrying" and a.decision == "performed" and a.decided_by == "olive"
        attempt = RecoveryAttempt.objects.get(action=a)
        assert attempt.decision == "performed" and attempt.note == DECIDE["note"]
        item = BulkItem.objects.get(op=op, task_id=a.task_id)
        assert (item.result, item.run_id) == ("applied", attempt.continuation_run_id)
        kinds = list(
            Event.objects.filter(task_id=a.task_id, actor="olive").order_by("id").values_list("kind", flat=True)
        )
        # The service's own events (the decision, its run), then the item's: all by the person who confirmed.
        assert {"action_decided", "run_queued"} <= set(kinds) and kinds[-1] == "bulk_item"
        assert kinds.count("bulk_item") == 1
    op_events = list(
        Event.objects.filter(task__isnull=True, kind__startswith="bulk_").order_by("id").values_list("kind", flat=True)
    )
    assert op_events == ["bulk_previewed", "bulk_started", "bulk_finished"]


def test_the_race_changed_items_are_skipped_new_ones_untouched_the_rest_applied_exactly_once(org, agent, operator):
    actions = unknown_outcomes(org, 6)
    op = bulk_preview(user=operator, action="decide", filter={"state": "needs_decision"}, params=DECIDE)
    assert op.count == 6 and op.refusals == {}
    decided, paused = actions[1], actions[4]
    # Between preview and execute: new ones match the filter, one is decided by hand, one is paused.
    newcomers = unknown_outcomes(org, 2, title="arrived later")
    action_decide(action_id=decided.pk, user=operator, version=1, outcome="not_performed", accept_duplicate_risk=True)
    task_pause(actor=operator, task=paused.task)
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    bulk_advance(budget=10)
    bulk_advance(budget=10)  # a second executor pass does nothing more

    got = results(op)
    assert got[decided.task_id] == ("skipped", "changed_since_preview")
    assert got[paused.task_id] == ("skipped", "changed_since_preview")
    assert "it was paused" in BulkItem.objects.get(op=op, task_id=paused.task_id).detail
    assert "Needs decision, now Queued" in BulkItem.objects.get(op=op, task_id=decided.task_id).detail
    rest = [a for a in actions if a not in (decided, paused)]
    assert all(got[a.task_id] == ("applied", "") for a in rest)
    # Applied exactly once: one attempt and one continuation each.
    for a in rest:
        assert RecoveryAttempt.objects.filter(action=a).count() == 1
        assert Run.objects.filter(task_id=a.task_id).count() == 2
    # The hand decision stands as it was made; the paused one and the newcomers were not touched.
    assert RecoveryAttempt.objects.get(action=decided).decision == "not_performed"
    assert RecoveryAction.objects.get(pk=paused.pk).status == "open"
    assert set(got) == {a.task_id for a in actions}
    for a in newcomers:
        a.refresh_from_db()
        assert a.status == "open" and a.version == 1 and not BulkItem.objects.filter(task_id=a.task_id).exists()


def test_cancel_midway_skips_what_was_not_reached(org, agent, operator):
    actions = unknown_outcomes(org, 5)
    op = bulk_preview(user=operator, action="decide", filter={"state": "needs_decision"}, params=DECIDE)
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    assert bulk_batch(op.pk, size=2) == 2
    bulk_cancel(user=operator, op_id=op.pk)
    assert bulk_advance(budget=5) == 0
    op.refresh_from_db()
    assert op.status == "cancelled" and op.cancelled_by == "olive"
    got = results(op)
    assert sorted(r for r, _ in got.values()) == ["applied", "applied", "skipped", "skipped", "skipped"]
    untouched = [a for a in actions if got[a.task_id][0] == "skipped"]
    assert all(got[a.task_id][1] == "cancelled" for a in untouched)
    assert all(RecoveryAction.objects.get(pk=a.pk).version == 1 for a in untouched)


def test_execute_needs_the_previews_hash_its_author_and_a_live_preview(org, agent, operator, settings):
    actions = unknown_outcomes(org, 1)
    other = make_member(org, "otto", "operator")
    op = bulk_preview(user=operator, action="decide", ids=[actions[0].task_id], params=DECIDE)
    with pytest.raises(ScopeChanged):
        bulk_execute(user=operator, op_id=op.pk, scope_hash="0" * 64)
    with pytest.raises(Forbidden):
        bulk_execute(user=other, op_id=op.pk, scope_hash=op.scope_hash)
    BulkOperation.objects.filter(pk=op.pk).update(expires_at=op.created_at)
    with pytest.raises(NotEligible) as refused:
        bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    assert refused.value.extra["reason"] == "preview_expired"
    assert BulkOperation.objects.get(pk=op.pk).status == "previewed"


def test_roles_and_boundaries_of_a_preview(org, agent, operator, viewer, other_org):
    from tests.factories import make_agent

    make_agent(other_org, "builder")
    mine = unknown_outcomes(org, 1)[0]
    theirs = unknown_outcomes(other_org, 1)[0]
    with pytest.raises(Forbidden):
        bulk_preview(user=viewer, action="pause", ids=[mine.task_id])
    with pytest.raises(NotFound):
        bulk_preview(user=operator, action="pause", ids=[mine.task_id, theirs.task_id])
    with pytest.raises(Invalid):
        bulk_preview(user=operator, action="pause", filter={"state": "done"})  # nothing matches
    with pytest.raises(Invalid):
        bulk_preview(user=operator, action="decide", ids=[mine.task_id], params={"outcome": "maybe"})
    assert not BulkOperation.objects.exists() and not BulkItem.objects.exists()


def test_a_role_lost_midway_fails_the_rest_and_retry_the_failed_ones_makes_a_new_scope(org, agent, operator):
    actions = unknown_outcomes(org, 4)
    op = bulk_preview(user=operator, action="decide", filter={"state": "needs_decision"}, params=DECIDE)
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    bulk_batch(op.pk, size=1)
    member_add(org=org, username="olive", role="viewer")
    bulk_advance(budget=10)
    op.refresh_from_db()
    got = results(op)
    assert op.status == "finished"
    assert sorted(got.values()) == [("applied", "")] + [("failed", "forbidden")] * 3
    failed_tasks = sorted(t for t, (r, _) in got.items() if r == "failed")
    ada = make_member(org, "ada", "admin")
    again = bulk_retry_failed(user=ada, op_id=op.pk)
    assert again.retry_of_id == op.pk and again.count == 3 and again.actor_name == "ada"
    assert sorted(BulkItem.objects.filter(op=again).values_list("task_id", flat=True)) == failed_tasks
    bulk_execute(user=ada, op_id=again.pk, scope_hash=again.scope_hash)
    bulk_advance(budget=10)
    assert set(results(again).values()) == {("applied", "")}
    assert all(a.status == "retrying" for a in RecoveryAction.objects.filter(pk__in=[a.pk for a in actions]))


def test_pause_and_resume_in_bulk(org, agent, operator):
    actions = unknown_outcomes(org, 3)
    task_pause(actor=operator, task=actions[0].task)
    op = bulk_preview(user=operator, action="pause", ids=[a.task_id for a in actions])
    assert op.refusals == {"already_paused": 1}
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    bulk_advance(budget=5)
    assert sorted(r for r, _ in results(op).values()) == ["applied", "applied", "skipped"]
    assert Task.objects.filter(pk__in=[a.task_id for a in actions], paused=True).count() == 3
    op = bulk_preview(user=operator, action="resume", ids=[a.task_id for a in actions])
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    bulk_advance(budget=5)
    assert not Task.objects.filter(pk__in=[a.task_id for a in actions], paused=True).exists()


def test_everything_of_a_refused_preview_is_rolled_back(org, agent, operator, settings):
    settings.CONSOLE_BULK_MAX_ITEMS = 2
    actions = unknown_outcomes(org, 3)
    with pytest.raises(Invalid):
        with transaction.atomic():
            bulk_preview(user=operator, action="pause", filter={"state": "needs_decision"})
    assert not BulkOperation.objects.exists() and not BulkItem.objects.exists()
    assert len(actions) == 3


# Measured: a batch of 4 decisions in 188 queries on SQLite and on PostgreSQL: about 45 each (the item's lock
# and facts; the decision's service with its diagnosis, its gates — the recovery breaker's among them —,
# continuation and workspace check; its events; the result), plus the batch's own reads and its progress
# event. The same whatever the size of the scope.
BATCH_QUERIES = 192


def test_a_batch_does_not_grow_in_queries_with_the_scope(org, agent, operator, django_assert_max_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    tasks = [a.task_id for a in unknown_outcomes(org, 48)]
    counts = {}
    for scope in (tasks[:8], tasks[8:]):  # 8 tasks, then 40
        op = bulk_preview(user=operator, action="decide", ids=scope, params=DECIDE)
        bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
        with django_assert_max_num_queries(BATCH_QUERIES), CaptureQueriesContext(connection) as ctx:
            assert bulk_batch(op.pk, size=4) == 4
        counts[len(scope)] = len(ctx.captured_queries)
    assert counts[8] == counts[40], counts


def _run_through(user, action, ids, params=None):
    op = bulk_preview(user=user, action=action, ids=ids, params=params)
    bulk_execute(user=user, op_id=op.pk, scope_hash=op.scope_hash)
    bulk_advance(budget=20)
    op.refresh_from_db()
    assert op.status == "finished"
    return op


def test_retry_an_unknown_outcome_in_bulk_needs_the_duplicate_risk_consent_and_then_queues_each_once(
    org, agent, operator
):
    actions = unknown_outcomes(org, 3)
    ids = [a.task_id for a in actions]
    refused = _run_through(operator, "retry", ids)
    assert refused.refusals == {"duplicate_risk_not_accepted": 3}
    assert set(results(refused).values()) == {("skipped", "duplicate_risk_not_accepted")}
    assert not RecoveryAttempt.objects.exists() and all(Run.objects.filter(task_id=t).count() == 1 for t in ids)

    op = _run_through(operator, "retry", ids, {"accept_duplicate_risk": True})
    for a in actions:
        item = BulkItem.objects.get(op=op, task_id=a.task_id)
        attempt = RecoveryAttempt.objects.get(action=a)
        assert item.result == "applied" and item.run_id == attempt.continuation_run_id
        assert attempt.requested_by == "olive" and attempt.accepted_duplicate_risk
        assert Run.objects.get(pk=item.run_id).status == "queued"


def test_decide_not_performed_in_bulk_reruns_the_step_only_with_consent(org, agent, operator):
    actions = unknown_outcomes(org, 2)
    ids = [a.task_id for a in actions]
    params = {"outcome": "not_performed", "note": "no invoice in the billing log"}
    refused = _run_through(operator, "decide", ids, params)
    assert set(results(refused).values()) == {("skipped", "duplicate_risk_not_accepted")}
    assert all(RecoveryAction.objects.get(pk=a.pk).status == "open" for a in actions)

    op = _run_through(operator, "decide", ids, {**params, "accept_duplicate_risk": True})
    assert set(r for r, _ in results(op).values()) == {"applied"}
    for a in actions:
        attempt = RecoveryAttempt.objects.get(action=a)
        assert attempt.decision == "not_performed" and attempt.note == params["note"]


def test_cancel_in_bulk_then_continue_in_bulk_continues_each_safe_run_once_and_asks_for_the_undecided_one(
    org, agent, operator
):
    from recovery.supervisor.loop import supervise_once
    from tests.factories import make_agent
    from tests.recovery import engine as e

    make_agent(org, "careful", auto_resume=False)
    safe = [e.interrupted(org, [e.SAFE, e.SAFE], 1, agent="careful", title=f"safe {i}") for i in range(2)]
    supervise_once()
    undecided = e.parked(org, [e.SAFE, e.POST], 2)
    actions = [RecoveryAction.objects.get(run=r) for r in safe] + [undecided]
    ids = [a.task_id for a in actions]
    # Continue is refused while the actions decide what happens next.
    blocked = bulk_preview(user=operator, action="continue", ids=ids)
    assert blocked.refusals == {"needs_decision": 3}

    cancelled = _run_through(operator, "cancel", ids)
    assert set(results(cancelled).values()) == {("applied", "")}
    assert all(RecoveryAction.objects.get(pk=a.pk).status == "cancelled" for a in actions)
    runs_before = {t: Run.objects.filter(task_id=t).count() for t in ids}
    assert runs_before == {t: 1 for t in ids}  # a cancel queues nothing

    note = "checked the logs; carry on"
    continued = _run_through(operator, "continue", ids, {"note": note})
    for run in safe:
        item = BulkItem.objects.get(op=continued, task_id=run.task_id)
        assert (item.result, item.reason, item.detail) == ("applied", "", "")
        cont = Run.objects.get(pk=item.run_id)
        assert cont.continues_id == run.pk and cont.status == "queued"
        event = Event.objects.get(task_id=run.task_id, kind="task_continued")
        assert event.actor == "olive" and event.payload["note"] == note
    # The undecided step is not run again by a bulk continue: the item names the decision it now waits on.
    item = BulkItem.objects.get(op=continued, task_id=undecided.task_id)
    fresh = RecoveryAction.objects.get(task_id=undecided.task_id, status="open")
    assert (item.result, item.reason) == ("skipped", "needs_decision") and f"#{fresh.pk}" in item.detail
    assert fresh.kind == "unknown_outcome" and Run.objects.filter(task_id=undecided.task_id).count() == 1
    # A second continue is refused before anything happens: live runs, and the open decision.
    again = bulk_preview(user=operator, action="continue", ids=ids)
    assert again.refusals == {"run_live": 2, "needs_decision": 1}
