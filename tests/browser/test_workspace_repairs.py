"""An admin repairs a workspace in the browser: the card's confirmations, its actual results, the held copy."""

import pytest
from playwright.sync_api import expect

from recovery.supervisor.loop import supervise_once
from tests.browser.pages import expect_live
from tests.recovery import engine as e
from tests.recovery.workdisk import crash_at, edit_by_hand, validation_action

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_admin_reconciles_then_reissues_and_every_result_is_shown(
    daphne_server, page, sign_in, org, agent, admin_user, operator
):
    task = e.start(
        org,
        [
            ("file_write", {"path": "draft.md", "content": "first draft\n"}),
            ("sleep", {"seconds": 0}),
            ("file_write", {"path": "draft.md", "content": "final\n"}),
        ],
        title="Draft the changelog",
    )
    crash_at(e.first_run(task), 2)
    edit_by_hand(task, "draft.md", "first draft\nby hand\n")
    edit_by_hand(task, "date.txt", "2025-06-02\n")
    supervise_once()
    action = validation_action(task)

    sign_in(page, "ada")
    page.goto(f"{daphne_server.url}/tasks/{task.pk}/")
    expect_live(page)
    card = page.locator(f"#action-{action.pk}")
    expect(card).to_contain_text("Workspace changed — 2 files differ")
    expect(page.locator(f"#workspace-{task.pk}")).to_contain_text("Workspace hold")
    card.get_by_text("diff of draft.md").click()
    expect(card.locator("details.fold", has_text="diff of draft.md").locator("pre.diff")).to_contain_text("+by hand")

    card.get_by_text("Reconcile…").click()
    expect(card.locator(f"#confirm-reconcile-{action.pk} .restate")).to_contain_text("it holds draft.md")
    card.get_by_role("button", name="Confirm reconcile").click()
    card = page.locator(f"#action-{action.pk}")
    expect(card).to_contain_text("Reconcile by ada")
    expect(card).to_contain_text("1 adopted into the manifest, 1 held (draft.md")
    expect(card.locator(".repair-result")).to_contain_text("held: step 3 of the remaining plan also changes it")

    card.get_by_text("Isolated reissue…").click()
    card.get_by_role("button", name="Confirm isolated reissue").click()
    card = page.locator(f"#action-{action.pk}")
    expect(card.locator(".badge").first).to_have_text("Repaired")
    expect(card).to_contain_text("Isolated reissue by ada")
    panel = page.locator(f"#workspace-{task.pk}")
    expect(panel).not_to_contain_text("Workspace hold", timeout=10_000)  # pushed
    panel.get_by_role("link", name="The workspace before an isolated reissue, kept as it was").click()
    expect(page.locator("table.files")).to_contain_text("draft.md")
    expect(page.locator("table.files")).to_contain_text("date.txt")

    # An operator reads the same card, with no repair control.
    page.context.clear_cookies()
    sign_in(page, "olive")
    page.goto(f"{daphne_server.url}/agents/builder/runs/{action.run_id}/")
    expect(page.locator("body")).to_contain_text("Workspace validation failed")
    expect(page.get_by_role("button", name="Confirm reconcile")).to_have_count(0)
