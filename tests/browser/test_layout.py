"""The task page on a phone: nothing scrolls sideways."""

import pytest
from playwright.sync_api import expect

from tests.browser.pages import no_horizontal_overflow
from tests.console.scenarios import unknown_outcome_action

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_task_page_fits_a_phone_without_a_horizontal_scrollbar(daphne_server, page, sign_in, org, agent, operator):
    action = unknown_outcome_action(org, title="Write the weekly report with a rather long title that has to wrap")
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, "olive")
    assert no_horizontal_overflow(page), "the board scrolls sideways at 390 px"
    page.goto(f"{daphne_server.url}/tasks/{action.task_id}/")
    card = page.locator(f"#action-{action.pk}")
    expect(card).to_contain_text("report.md")
    expect(card.get_by_role("button", name="It did not happen — run it again")).to_be_visible()
    page.locator("details.steps").first.evaluate("d => d.open = true")
    widths = page.evaluate(
        "({doc: document.documentElement.scrollWidth, inner: window.innerWidth,"
        " main: document.querySelector('main').scrollWidth, mainClient: document.querySelector('main').clientWidth})"
    )
    assert no_horizontal_overflow(page), widths
    assert widths["main"] <= widths["mainClient"] + 1, widths


def in_first_screen(page, selector: str) -> bool:
    """The element is drawn and its top is inside the first screen, before any scrolling."""
    return page.evaluate(
        "s => { const e = document.querySelector(s); if (!e) return false; const r = e.getBoundingClientRect();"
        " return r.width > 0 && r.height > 0 && r.top >= 0 && r.top < window.innerHeight; }",
        selector,
    )


def test_at_390_px_the_header_names_who_is_signed_in_and_the_board_starts_in_the_first_screen(
    daphne_server, page, sign_in, org, agent, operator
):
    for n in range(3):
        unknown_outcome_action(org, title=f"Write report {n} with a title long enough to wrap on a phone")
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, "olive")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    user = page.locator("header.top .user")
    expect(user).to_be_visible()
    expect(user).to_contain_text("olive")
    assert in_first_screen(page, "header.top .user"), "who is signed in is off the first screen"
    # The bulk bar waits folded: the first task row is in the first screen, and the bar opens on demand.
    assert in_first_screen(page, "#board-rows tr.task-row"), "the first task is below the first screen"
    page.get_by_text("Act on many").click()
    expect(page.get_by_role("button", name="Preview")).to_be_visible()
    for path in ("/inbox/", "/workers/", "/no/such/page/"):
        page.goto(daphne_server.url + path)
        expect(page.locator("header.top .user")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, path


def test_at_390_px_held_copy_paths_wrap_inside_the_task_card(daphne_server, page, sign_in, org, agent, admin_user):
    from recovery.models import HeldCopy
    from tests.browser.a11y_pages import workspace_scenario

    _, _, held = workspace_scenario(org, admin_user)
    # A path with a segment longer than a phone is wide and no place to break (a var directory named by a hash).
    long = f"/srv/console_var_8f3a9c4b2e1d0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c/task-{held.task_id}.held/reconcile"
    HeldCopy.objects.filter(task_id=held.task_id).update(path=long)
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, "ada")
    for path in (f"/tasks/{held.task_id}/", f"/tasks/{held.task_id}/workspace/?held="):
        url = daphne_server.url + path
        if path.endswith("held="):
            url += str(HeldCopy.objects.get(task_id=held.task_id).pk)
        page.goto(url)
        expect(page.locator("code").filter(has_text=".held").first).to_be_visible()
        widths = page.evaluate("({doc: document.documentElement.scrollWidth, inner: window.innerWidth})")
        assert widths["doc"] <= 390, (path, widths)
