"""Triage at scale in the browser: select all matching → preview → execute → progress → ledger, live in a second tab.

The supervisor's executor is driven from the test (`bulk_batch`, `bulk_advance`: the very functions
`manage.py supervise` calls), so the progress bar can be read midway; its pushes come through the
live daphne's relay like any change.
"""

import re

import pytest
from playwright.sync_api import expect

from recovery.actions import action_cancel, action_decide
from recovery.bulk.operations import bulk_advance, bulk_batch
from recovery.models import BulkItem, BulkOperation, RecoveryAttempt
from tests.browser.pages import expect_live, no_horizontal_overflow
from tests.console.scenarios import running_task
from tests.processes import ROOT
from tests.recovery.bulk_scenarios import unknown_outcomes

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = ROOT / "var" / "screenshots"


def test_select_all_matching_preview_execute_progress_and_ledger_while_a_second_tab_watches(
    daphne_server, page, context, sign_in, org, agent, operator
):
    actions = unknown_outcomes(org, 6, title="Post the invoice")
    sign_in(page, "olive")
    watcher = context.new_page()
    watcher.goto(f"{daphne_server.url}/?state=needs_decision")
    expect_live(watcher)
    expect(watcher.locator("#board-rows tr.task-row")).to_have_count(6)

    page.goto(f"{daphne_server.url}/?state=needs_decision")
    form = page.locator("#bulk-form")
    form.get_by_label("Select all 6 matching this filter").check()
    expect(page.locator("#bulk-selected")).to_contain_text("All 6 matching tasks are chosen")
    form.get_by_label("Action").select_option("decide")
    expect(form.get_by_label("Note, the same for every task")).to_be_visible()
    form.get_by_label("It happened").check()
    form.get_by_label("Note, the same for every task").fill("the billing log shows every invoice")
    form.get_by_role("button", name="Preview").click()

    expect(page).to_have_url(re.compile(r"/bulk/\d+/$"))
    op = BulkOperation.objects.get()
    status = page.locator(f"#bulk-{op.pk}")
    expect(status).to_contain_text("Preview — nothing has been done yet.")
    expect(page.locator(".preview")).to_contain_text("6 of 6 would be acted on.")
    assert RecoveryAttempt.objects.count() == 0
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "bulk-preview.png"), full_page=True)

    status.get_by_role("button", name="Execute on exactly these 6 tasks").click()
    expect(status).to_contain_text("nothing has been applied yet")
    expect_live(page)
    bar = page.locator("#bulk-progress")
    expect(bar).to_have_attribute("value", "0")

    bulk_batch(op.pk, size=3)
    expect(bar).to_have_attribute("value", "3", timeout=10_000)
    expect(status).to_contain_text("Running — 3 of 6 reached.")
    ledger = page.locator(f"#ledger-{op.pk}")
    expect(ledger.locator("tr.result-applied")).to_have_count(3)
    done = [i.task_id for i in BulkItem.objects.filter(op=op, result="applied")]
    for task_id in done:  # the second tab sees those tasks change, live
        expect(watcher.locator(f"#task-{task_id} .badge")).to_have_text("Queued", timeout=10_000)
    page.screenshot(path=str(SCREENSHOTS / "bulk-progress.png"), full_page=True)

    bulk_advance(budget=10)
    expect(bar).to_have_attribute("value", "6", timeout=10_000)
    expect(status).to_contain_text("Finished")
    expect(ledger.locator("tr.result-applied")).to_have_count(6)
    expect(ledger).to_contain_text("Decision recorded: it happened — run #")
    for a in actions:
        expect(watcher.locator(f"#task-{a.task_id} .badge")).to_have_text("Queued", timeout=10_000)
    assert RecoveryAttempt.objects.count() == 6
    # A reload draws the same saved progress.
    page.reload()
    expect(page.locator("#bulk-progress")).to_have_attribute("value", "6")
    page.get_by_role("link", name="Bulk", exact=True).click()
    expect(page.locator(f"#bulk-row-{op.pk}")).to_contain_text("Finished")


def test_board_and_inbox_fit_1440_and_390_and_selection_works_on_a_phone(
    daphne_server, page, sign_in, org, agent, operator
):
    unknown_outcomes(org, 3, title="Post the quarterly invoice to the billing hook of a customer with a long name")
    running_task(org, title="Crawl the documentation site and summarise every changed page since the release")
    sign_in(page, "olive")
    for width, height in ((1440, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        for path in ("/", "/?state=needs_decision&sort=urgency", "/inbox/"):
            page.goto(daphne_server.url + path)
            expect_live(page)
            assert no_horizontal_overflow(page), (width, path)
            if path == "/":
                page.screenshot(path=str(SCREENSHOTS / f"board-{width}.png"), full_page=True)
    # At 390 px each row is a compact card: the owner, the attempts and the age are on screen.
    page.goto(daphne_server.url + "/?state=needs_decision")
    row = page.locator("#board-rows tr.task-row").first
    for cell in ("td.owner", "td.recovery-owner", "td.attempts", "td.age"):
        box = row.locator(cell).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 391, (cell, box)
    expect(row.locator("td.owner")).to_contain_text("Owner")
    row.get_by_role("checkbox").check()
    expect(page.locator("#bulk-selected")).to_contain_text("1 task chosen on this page.")
    # On a phone the bar waits folded above the board, its count in view; it opens for the action.
    expect(page.locator("#bulk-form").get_by_label("Action")).to_be_hidden()
    page.locator("#bulk-form").get_by_text("Act on many").click()
    page.locator("#bulk-form").get_by_label("Action").select_option("pause")
    page.locator("#bulk-form").get_by_role("button", name="Preview").click()
    expect(page.locator(".preview")).to_contain_text("1 of 1 would be acted on.")
    assert no_horizontal_overflow(page)


def test_a_saved_view_reopens_with_its_filter(daphne_server, page, sign_in, org, agent, operator):
    from tests.factories import make_agent

    make_agent(org, "reviewer")
    mine = unknown_outcomes(org, 2, title="Write the changelog")
    theirs = unknown_outcomes(org, 1, title="Review the changelog", agent="reviewer")
    sign_in(page, "olive")
    filters = page.locator("form.filters")
    filters.get_by_label("Agent").select_option("reviewer")
    filters.get_by_label("Order").select_option("urgency")
    filters.get_by_role("button", name="Apply filters").click()
    expect(page.locator("#board-rows tr.task-row")).to_have_count(1)
    page.get_by_text("Save this view").click()
    page.get_by_label("Name").fill("Reviewer's trouble")
    page.get_by_role("button", name="Save view").click()
    expect(page.get_by_role("link", name="Reviewer's trouble")).to_have_attribute("aria-current", "true")

    page.get_by_role("link", name="Everything").click()
    expect(page.locator("#board-rows tr.task-row")).to_have_count(3)
    page.get_by_role("link", name="Reviewer's trouble").click()
    expect(page.locator("#board-rows tr.task-row")).to_have_count(1)
    expect(page.locator(f"#task-{theirs[0].task_id}")).to_be_visible()
    expect(page.locator(f"#task-{mine[0].task_id}")).to_have_count(0)
    expect(page.locator("form.filters").get_by_label("Agent")).to_have_value("reviewer")
    expect(page.locator("form.filters").get_by_label("Order")).to_have_value("urgency")


def test_the_inbox_count_changes_live(daphne_server, page, context, sign_in, org, agent, operator):
    actions = unknown_outcomes(org, 3)
    sign_in(page, "olive")
    expect_live(page)
    count = page.locator("#inbox-count")
    expect(count).to_contain_text("3")
    inbox = context.new_page()
    inbox.goto(f"{daphne_server.url}/inbox/")
    expect_live(inbox)
    expect(inbox.locator("li.inbox-item")).to_have_count(3)

    action_decide(action_id=actions[0].pk, user=operator, version=1, outcome="performed", note="it is there")
    expect(count).to_contain_text("2", timeout=10_000)
    expect(inbox.locator("li.inbox-item")).to_have_count(2, timeout=10_000)
    expect(inbox.locator("#inbox-count")).to_contain_text("2")
    action_cancel(action_id=actions[1].pk, user=operator, version=1)
    expect(count).to_contain_text("1", timeout=10_000)
    expect(inbox.locator("li.inbox-item")).to_have_count(1, timeout=10_000)
    expect(inbox.locator(f"#inbox-action-{actions[2].pk}")).to_be_visible()
