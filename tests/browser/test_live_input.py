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


def test_a_follow_up_being_typed_survives_a_run_working_through_several_steps(
    daphne_server, page, sign_in, org, agent, operator
):
    from tests.recovery import engine as e

    task = e.start(org, [e.SAFE] * 5, title="Summarise the notes")
    run = e.claim(e.first_run(task))
    sign_in(page, "olive")
    page.goto(f"{daphne_server.url}/tasks/{task.pk}/")
    expect_live(page)
    box = page.get_by_label("Write a follow-up for the agent")
    box.click()
    box.type("Also add a short list of the open ques")
    run_card = page.locator(f"#run-{run.pk}")
    for seq in range(1, 4):  # the run works: every step is a pushed change to this page
        e.do_step(run, seq)
        expect(run_card.locator("li.step")).to_have_count(seq, timeout=10_000)
        expect(box).to_have_value(re.compile("open ques"))
    box.type("tions at the end.")
    expect(box).to_have_value("Also add a short list of the open questions at the end.")
    expect(box).to_be_focused()
    page.get_by_role("button", name="Send follow-up").click()
    expect(page.locator(f"#messages-{task.pk}")).to_contain_text("open questions at the end", timeout=10_000)
    expect(box).to_have_value("")


def test_a_decision_refused_for_the_missing_consent_keeps_its_note(daphne_server, page, sign_in, org, agent, operator):
    action = unknown_outcome_action(org, title="Write the weekly report")
    sign_in(page, "olive")
    page.goto(f"{daphne_server.url}/tasks/{action.task_id}/")
    expect_live(page)
    card = page.locator(f"#action-{action.pk}")
    card.get_by_label("What did you find?").fill("the file is not in the workspace")
    card.get_by_role("button", name="It did not happen — run it again").click()
    expect(card.locator(".refusal")).to_contain_text("accept the duplicate risk")
    expect(card.get_by_label("What did you find?")).to_have_value("the file is not in the workspace")
    # The consent box sits with the one button it governs.
    fieldset = card.locator("fieldset.rerun")
    expect(fieldset.get_by_label("I accept that running it again may do it twice")).to_have_count(1)
    expect(fieldset.get_by_role("button")).to_have_count(1)
    fieldset.get_by_label("I accept that running it again may do it twice").check()
    fieldset.get_by_role("button", name="It did not happen — run it again").click()
    expect(card).to_contain_text("Decision recorded: it did not happen", timeout=10_000)
    expect(card).to_contain_text("the file is not in the workspace")
