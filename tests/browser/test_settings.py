"""Tool settings in the browser: the replay guard rail, the history, per-agent forms, the styled refusal, a phone."""

import pytest
from playwright.sync_api import expect

from recovery.modes import REPLAY_RISK
from tasks.models import AgentProfile, Event
from tasks.modes import KNOWN_TOOLS
from tests.browser.pages import no_horizontal_overflow
from tests.factories import make_agent
from tests.processes import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = ROOT / "var" / "screenshots"


def test_an_admin_confirms_http_post_to_replay_with_a_reason_and_another_agents_edit_survives(
    daphne_server, page, sign_in, org, agent, admin_user
):
    make_agent(org, "careful")
    sign_in(page, "ada")
    page.get_by_role("link", name="Settings").click()
    expect(page).to_have_url(daphne_server.url + "/settings/tools/")

    # An unsaved edit in careful's form…
    careful = page.locator("details.profile[data-agent='careful']")
    careful.locator("summary").first.click()
    careful.locator("details.defaults > summary").click()
    careful_read = careful.get_by_label("Recovery mode of file_read for careful")
    careful_read.select_option("notify")
    expect(careful.locator("tr[data-tool='file_read'] .unsaved")).to_be_visible()

    # …while builder's http_post moves to replay: the page asks first, and says what it means.
    builder = page.locator("details.profile[data-agent='builder']")
    builder.locator("summary").first.click()
    builder.locator("details.defaults > summary").click()
    builder.get_by_label("Recovery mode of http_post for builder").select_option("replay")
    builder.get_by_role("button", name="Save builder").click()
    confirm = builder.locator(".confirm")
    expect(confirm).to_contain_text(f"With replay, {REPLAY_RISK}.")
    assert AgentProfile.objects.get(agent=agent).tool_modes == {}
    assert not Event.objects.filter(kind="profile_updated").exists()
    expect(builder.get_by_label("Recovery mode of http_post for builder")).to_have_value("replay")

    # The browser itself asks for the consent and the reason before sending.
    builder.get_by_role("button", name="Confirm and save builder").click()
    expect(builder.locator(".notice")).to_have_count(0)
    assert AgentProfile.objects.get(agent=agent).tool_modes == {}
    builder.get_by_label("I accept that a cut-off http_post call may run twice").check()
    builder.get_by_label("Reason (required)").fill("the billing hook dedupes on its request id")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SHOTS / "settings-confirm.png", full_page=True)
    builder.get_by_role("button", name="Confirm and save builder").click()

    expect(builder.locator(".notice")).to_have_text("Saved builder: http_post: notify → replay.")
    entry = builder.locator(".history-item").first
    expect(entry).to_contain_text("http_post: notify → replay")
    expect(entry).to_contain_text("by ada")
    expect(entry).to_contain_text("“the billing hook dedupes on its request id”")
    overrides = builder.locator("table.modes").first
    expect(overrides.locator("tr[data-tool='http_post']")).to_contain_text("override")
    expect(overrides.get_by_role("button", name="Reset to notify")).to_be_visible()
    assert AgentProfile.objects.get(agent=agent).tool_modes == {"http_post": "replay"}
    event = Event.objects.get(kind="profile_updated")
    assert event.payload["reason"] == "the billing hook dedupes on its request id"

    # careful's form was not redrawn: its unsaved choice is still there, and still unsaved.
    expect(careful_read).to_have_value("notify")
    expect(careful.locator("tr[data-tool='file_read'] .unsaved")).to_be_visible()
    assert AgentProfile.objects.get(agent__name="careful").tool_modes == {}
    page.screenshot(path=SHOTS / "settings-saved.png", full_page=True)

    # Reset, with another change of builder's form waiting on its confirmation: only http_post is reset,
    # and the waiting choice stays on screen, unsaved.
    builder.locator("details.defaults > summary").click()
    builder.get_by_label("Recovery mode of bash for builder").select_option("replay")
    builder.get_by_role("button", name="Save builder").click()
    expect(builder.locator(".confirm")).to_contain_text("bash → replay")
    builder.get_by_role("button", name="Reset to notify").click()
    expect(builder.locator(".notice")).to_have_text("Saved builder: http_post: replay → notify.")
    expect(builder.get_by_label("Recovery mode of bash for builder")).to_have_value("replay")
    expect(builder.locator("tr[data-tool='bash'] .unsaved")).to_be_visible()
    assert AgentProfile.objects.get(agent=agent).tool_modes == {}
    expect(careful_read).to_have_value("notify")

    # A reload draws the saved history.
    page.reload()
    builder.locator("summary").first.click()
    expect(builder.locator(".history-item").nth(1)).to_contain_text("the billing hook dedupes")


def test_an_operator_sees_the_styled_refusal_with_the_reason_and_a_way_back(
    daphne_server, page, sign_in, org, agent, operator, admin_user
):
    sign_in(page, "olive")
    expect(page.get_by_role("link", name="Settings")).to_have_count(0)
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 844})
        response = page.goto(daphne_server.url + "/settings/tools/")
        assert response.status == 403
        refusal = page.locator(".refused-page")
        expect(refusal.get_by_role("heading", name="Not allowed")).to_be_visible()
        expect(refusal).to_contain_text("Tool settings need the admin role; you are operator in Acme.")
        expect(refusal).to_contain_text("Who can help: ada")
        expect(page.locator("header.top")).to_contain_text("olive")  # the console's own page and navigation
        assert no_horizontal_overflow(page), width
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SHOTS / "refused-390.png", full_page=True)
    refusal.get_by_role("link", name="Go to the board").click()
    expect(page).to_have_url(daphne_server.url + "/")


def test_the_settings_page_fits_a_phone_and_no_select_is_clipped(daphne_server, page, sign_in, org, agent, admin_user):
    make_agent(org, "a-subagent-with-a-rather-long-name-for-a-phone")
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, "ada")
    page.goto(daphne_server.url + "/settings/tools/")
    page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
    selects = page.locator("select")
    assert selects.count() == 2 * (len(KNOWN_TOOLS) + 1)  # each agent's tools, and who settles unknown outcomes
    boxes = page.evaluate(
        "[...document.querySelectorAll('select')].map(s => { const r = s.getBoundingClientRect();"
        " return {left: r.left, right: r.right, scroll: s.scrollWidth, client: s.clientWidth}; })"
    )
    inner = page.evaluate("window.innerWidth")
    for box in boxes:
        assert box["left"] >= 0 and box["right"] <= inner, box
        assert box["scroll"] <= box["client"] + 1, box
    assert no_horizontal_overflow(page)
    page.screenshot(path=SHOTS / "settings-390.png", full_page=True)
