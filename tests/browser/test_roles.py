"""Roles in the browser: a viewer reads the same cards with nothing to press; an operator's double click acts once."""

import time

import pytest
from playwright.sync_api import expect

from recovery.models import RecoveryAction, RecoveryAttempt
from tasks.models import Run
from tests.browser.pages import board_row_pushed, csrf_token, expect_live
from tests.console.scenarios import continuation_action, unknown_outcome_action
from tests.factories import make_agent

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def state(action) -> tuple:
    return (
        RecoveryAction.objects.filter(pk=action.pk).values_list("status", "version", "attempts").get(),
        RecoveryAttempt.objects.count(),
        Run.objects.count(),
    )


def test_a_viewer_sees_the_cards_without_controls_and_a_forged_post_is_refused(
    daphne_server, page, sign_in, org, agent, viewer, operator
):
    action = unknown_outcome_action(org, title="Write the weekly report")
    sign_in(page, "victor")
    page.goto(f"{daphne_server.url}/tasks/{action.task_id}/")
    card = page.locator(f"#action-{action.pk}")
    expect(card).to_contain_text("Unknown outcome")
    expect(card.locator("code.tool")).to_have_text("file_write")
    expect(card).to_contain_text("report.md")
    expect(card).to_contain_text("needs the operator role")
    expect(card.locator("form")).to_have_count(0)
    expect(card.locator("button")).to_have_count(0)
    expect(page.locator(f"#task-{action.task_id} form")).to_have_count(0)

    before = state(action)
    url = f"{daphne_server.url}/actions/{action.pk}/decision/"
    form = {"version": str(action.version), "outcome": "not_performed", "accept_duplicate_risk": "1", "note": "forged"}
    token = csrf_token(page)
    # As htmx would send it from a tampered page: the card comes back with the reason.
    response = page.request.post(url, form=form, headers={"X-CSRFToken": token, "HX-Request": "true"})
    assert response.status == 403
    assert f'id="action-{action.pk}"' in response.text() and "operator role" in response.text()
    assert state(action) == before
    # As a plain form post: refused just the same, not redirected as if it had worked.
    response = page.request.post(url, form={**form, "csrfmiddlewaretoken": token}, max_redirects=0)
    assert response.status == 403, f"{response.status} {response.headers.get('location')}"
    assert state(action) == before


@pytest.mark.parametrize("kind", ["retry", "decision"])
def test_an_operators_double_click_makes_exactly_one_attempt(kind, daphne_server, page, sign_in, org, agent, operator):
    sign_in(page, "olive")
    expect_live(page)
    if kind == "retry":
        make_agent(org, "careful", auto_resume=False)
        action = continuation_action(org, title="Read the notes")
    else:
        action = unknown_outcome_action(org, title="Write the weekly report")
    board_row_pushed(page, action.task_id, "Needs decision").get_by_role("link").click()
    posts, answers = [], []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" and "/actions/" in r.url else None)
    page.on("response", lambda r: answers.append(r.status) if r.request.method == "POST" else None)
    card = page.locator(f"#action-{action.pk}")
    expect_live(page)
    if kind == "retry":
        button = card.get_by_role("button", name="Retry", exact=True)
    else:
        card.get_by_label("I accept that running it again may do it twice").check()
        button = card.get_by_role("button", name="It did not happen — run it again")
    button.dblclick()
    words = "Retry requested" if kind == "retry" else "Decision recorded"
    expect(card).to_contain_text(words, timeout=10_000)
    expect(card).to_have_attribute("data-status", "retrying")
    # Whatever a second click sent has been answered before counting.
    deadline = time.monotonic() + 10
    while len(answers) < len(posts) and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert 1 <= len(posts) == len(answers) <= 2 and answers[0] == 200, (posts, answers)
    assert RecoveryAttempt.objects.filter(action=action).count() == 1, (posts, answers)
    assert Run.objects.filter(task_id=action.task_id).count() == 2
    page.reload()
    expect(card).to_contain_text(words)
    if kind == "retry":
        expect(card).to_contain_text("1 of 2 attempts used")
