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
