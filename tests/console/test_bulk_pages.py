"""The bulk pages: the preview a person confirms, its progress and ledger, the history; roles and boundaries."""

import re

import pytest

from recovery.bulk.operations import bulk_advance, bulk_batch, bulk_execute, bulk_preview
from recovery.models import BulkOperation, RecoveryAction
from recovery.words.runs import duration
from tasks.accounts import member_add
from tasks.models import Task
from tests.factories import make_agent, make_member
from tests.helpers import outer_html, visible_text
from tests.recovery.bulk_scenarios import unknown_outcomes

pytestmark = pytest.mark.django_db

DECIDE = {"outcome": "performed", "note": "the invoice is in the ledger"}


def preview(operator, actions, **params):
    return bulk_preview(user=operator, action="decide", ids=[a.task_id for a in actions], params={**DECIDE, **params})


def test_the_preview_says_what_would_happen_and_only_its_author_may_execute_it(login, org, agent, operator):
    actions = unknown_outcomes(org, 3)
    from tasks.services import task_pause

    task_pause(actor=operator, task=actions[0].task)
    op = preview(operator, actions)
    page = login(operator).get(f"/bulk/{op.pk}/").text
    text = visible_text(page)
    assert "Decide the unknown outcome: it happened · 3 tasks" in text
    assert "Preview — nothing has been done yet." in text
    assert "2 of 3 would be acted on. The others would be skipped: 1 — the task is paused" in text
    assert "3 tasks chosen by hand." in text
    assert f'name="scope_hash" value="{op.scope_hash}"' in page
    assert "Execute on exactly these 3 tasks" in text and "Discard this preview" in text
    # The sample lists what the preview expects for each task.
    ledger = visible_text(outer_html(page, f"ledger-{op.pk}"))
    assert "Would be skipped: the task is paused." in ledger and ledger.count("Would be acted on.") == 2

    otto = make_member(org, "otto", "operator")
    other = visible_text(login(otto).get(f"/bulk/{op.pk}/").text)
    assert "Only olive, who previewed it, can execute it." in other and "Execute on exactly" not in other
    response = login(otto).post(f"/bulk/{op.pk}/execute/", {"scope_hash": op.scope_hash})
    assert response.status_code == 403 and BulkOperation.objects.get(pk=op.pk).status == "previewed"


def test_execute_then_progress_then_the_ledger(login, org, agent, operator):
    actions = unknown_outcomes(org, 4)
    op = preview(operator, actions)
    client = login(operator)
    assert client.post(f"/bulk/{op.pk}/execute/", {"scope_hash": op.scope_hash}).status_code == 302
    started = visible_text(client.get(f"/bulk/{op.pk}/").text)
    assert "Started by olive" in started and "nothing has been applied yet" in started
    bulk_batch(op.pk, size=3)
    page = client.get(f"/bulk/{op.pk}/").text
    assert '<progress id="bulk-progress" class="bulk-progress" max="4" value="3"' in page
    assert "Running — 3 of 4 reached." in visible_text(page) and "3 applied · 0 skipped · 0 failed" in visible_text(
        page
    )
    assert "Stop: skip every task not reached yet" in visible_text(page)
    bulk_advance(budget=5)
    page = client.get(f"/bulk/{op.pk}/").text
    text = visible_text(page)
    assert "Finished" in text and "all 4 reached" in text
    assert text.count("Decision recorded: it happened — run #") == 4
    assert "Stop:" not in text and "Retry the" not in text
    failed = client.get(f"/bulk/{op.pk}/?result=failed").text
    assert "No task here." in visible_text(outer_html(failed, f"ledger-{op.pk}"))


def test_a_wrong_hash_is_refused_with_scope_changed_and_nothing_starts(login, org, agent, operator):
    op = preview(operator, unknown_outcomes(org, 1))
    response = login(operator).post(f"/bulk/{op.pk}/execute/", {"scope_hash": "f" * 64})
    assert response.status_code == 409 and "The scope you confirmed is not the scope" in response.text
    assert BulkOperation.objects.get(pk=op.pk).status == "previewed"


def test_cancel_and_retry_the_failed_ones_from_the_page(login, org, agent, operator, admin_user):
    actions = unknown_outcomes(org, 3)
    op = preview(operator, actions)
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    bulk_batch(op.pk, size=1)
    member_add(org=org, username="olive", role="viewer")  # olive loses the role midway: the rest fail
    bulk_advance(budget=5)
    ada = login(admin_user)
    page = visible_text(ada.get(f"/bulk/{op.pk}/").text)
    assert "Finished with failures" in page and "1 applied · 0 skipped · 2 failed" in page
    assert "You no longer have the role for this." in page or "This needs the operator role" in page
    response = ada.post(f"/bulk/{op.pk}/retry-failed/", {})
    assert response.status_code == 302
    again = BulkOperation.objects.exclude(pk=op.pk).get()
    assert response["Location"] == f"/bulk/{again.pk}/" and again.retry_of_id == op.pk and again.count == 2
    assert "the failures of bulk #" in visible_text(ada.get(f"/bulk/{again.pk}/").text)
    assert ada.post(f"/bulk/{again.pk}/cancel/").status_code == 302
    discarded = visible_text(ada.get(f"/bulk/{again.pk}/").text)
    assert "Discarded by ada" in discarded and "nothing was done" in discarded


def test_the_history_lists_each_operation_with_its_counts(login, org, agent, operator, viewer):
    actions = unknown_outcomes(org, 2)
    op = preview(operator, actions)
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    bulk_advance(budget=5)
    pending = bulk_preview(user=operator, action="pause", ids=[actions[0].task_id])
    page = login(viewer).get("/bulk/").text
    row = visible_text(outer_html(page, f"bulk-row-{op.pk}"))
    assert "Decide the unknown outcome" in row and "olive" in row and "Finished" in row
    assert re.search(r"Tasks 2 Applied 2 Skipped 0 Failed 0", row)
    # How long it took, from its saved start and finish; nothing yet for one that has not run.
    op.refresh_from_db()
    assert f"Took {duration(op.started_at, op.finished_at)}" in row and re.search(r"Took \d+(\.\d)? m?s", row)
    pending_row = visible_text(outer_html(page, f"bulk-row-{pending.pk}"))
    assert "Preview" in pending_row and "Took —" in pending_row
    # A viewer reads everything and is offered nothing.
    detail = login(viewer).get(f"/bulk/{pending.pk}/").text
    assert '<form method="post" action="/bulk/' not in detail
    assert login(viewer).post(f"/bulk/{pending.pk}/cancel/").status_code == 403


def test_another_organization_sees_no_operation_and_a_private_task_stays_private(
    login, org, agent, operator, admin_user, other_org
):
    make_agent(other_org, "builder")
    gina = make_member(other_org, "gina", "admin")
    actions = unknown_outcomes(org, 2)
    Task.objects.filter(pk=actions[1].task_id).update(private=True, creator=admin_user)
    op = bulk_preview(user=admin_user, action="pause", ids=[a.task_id for a in actions])
    assert login(gina).get(f"/bulk/{op.pk}/").status_code == 404
    assert login(gina).post(f"/bulk/{op.pk}/cancel/").status_code == 404
    assert f"bulk-row-{op.pk}" not in login(gina).get("/bulk/").text
    # olive cannot see the private task: it is not listed, not counted.
    page = login(operator).get(f"/bulk/{op.pk}/").text
    assert f"#{actions[1].task_id}" not in visible_text(outer_html(page, f"ledger-{op.pk}"))
    assert page.count('id="bulk-item-') == 1
    assert RecoveryAction.objects.filter(status="open").count() == 2


# Measured: the detail page in 9 queries (session, user, memberships, the operation, its counts, one page
# of its ledger, the header's warnings, the inbox count, the event cursor); the history in 7. Plus 2.
DETAIL_QUERIES = 11
HISTORY_QUERIES = 9


def test_the_bulk_pages_do_not_grow_in_queries_with_items_or_operations(
    login, org, agent, operator, django_assert_max_num_queries
):
    def op_over(n: int) -> BulkOperation:
        Task.objects.bulk_create([Task(org=org, agent=agent, title=f"scope-{n} {i}") for i in range(n)])
        ids = list(Task.objects.filter(title__startswith=f"scope-{n} ").values_list("pk", flat=True))
        op = bulk_preview(user=operator, action="pause", ids=ids)
        bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
        bulk_advance(budget=30)
        return op

    client = login(operator)
    client.get("/bulk/")
    counts = {}
    for n in (3, 150):
        op = op_over(n)
        with django_assert_max_num_queries(DETAIL_QUERIES) as ctx:
            assert client.get(f"/bulk/{op.pk}/").status_code == 200
        counts[n] = len(ctx)
        with django_assert_max_num_queries(HISTORY_QUERIES) as ctx:
            assert client.get("/bulk/").status_code == 200
        counts[f"history {n}"] = len(ctx)
    assert counts[3] == counts[150] and counts["history 3"] == counts["history 150"], counts
    assert client.get(f"/bulk/{op.pk}/").text.count('id="bulk-item-') == 100  # one page of the ledger


def test_a_stop_midway_says_how_many_were_reached_and_that_the_rest_were_not_touched(login, org, agent, operator):
    actions = unknown_outcomes(org, 5)
    op = preview(operator, actions)
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    bulk_batch(op.pk, size=2)
    client = login(operator)
    assert client.post(f"/bulk/{op.pk}/cancel/").status_code == 302
    page = client.get(f"/bulk/{op.pk}/").text
    text = visible_text(page)
    assert (
        "Cancelled by olive" in text and "2 of 5 were reached before it stopped; the other 3 were not touched" in text
    )
    assert "2 applied · 0 skipped · 0 failed · 3 not reached" in text
    assert '<progress id="bulk-progress" class="bulk-progress" max="5" value="2"' in page
    assert text.count("Not reached: the operation was cancelled first, so nothing was done to it.") == 3
