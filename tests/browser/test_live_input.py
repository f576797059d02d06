"""A live page never throws away what an operator is typing because of changes its snapshot already shows."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.pages import expect_live
from tests.console.scenarios import unknown_outcome_action

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RELAY_POLL_SECONDS = 2.0  # the relay's longest poll interval (PostgreSQL); SQLite polls faster


def test_a_half_filled_decision_survives_events_older_than_the_page(daphne_server, page, sign_in, org, agent, operator):
    sign_in(page, "olive")
    page.goto(f"{daphne_server.url}/inbox/")  # no live page is open while the work breaks
    action = unknown_outcome_action(org, title="Write the weekly report")

    # Hold the page's websocket until the form is filled, so whatever the server sends on
    # subscribing arrives on a half-filled form, deterministically.
    held = []
    page.route_web_socket(re.compile(r"/ws/"), lambda ws: held.append(ws))
    page.goto(f"{daphne_server.url}/tasks/{action.task_id}/")
    card = page.locator(f"#action-{action.pk}")
    note = card.get_by_label("What did you find?")
    risk = card.get_by_label("I accept that running it again may do it twice")
    note.fill("report.md is not in the workspace")
    risk.check()
    assert len(held) == 1
    held[0].connect_to_server()
    expect_live(page)
    # Every event the relay may still hold is older than this page's snapshot: nothing on it is news.
    page.wait_for_timeout(RELAY_POLL_SECONDS * 1000 + 1000)
    expect(note).to_have_value("report.md is not in the workspace")
    expect(risk).to_be_checked()
