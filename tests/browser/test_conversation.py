"""The conversation page of an agent run in the browser: axe finds nothing serious, as viewer and operator, at
1440 and 390 px, nothing scrolls sideways, and the task page's unknown-outcome card quotes the model's reason.

The chain is built through the runner and operator APIs (tests/console/conversation_scenario.py). The
screenshot in the README (docs/screenshots/conversation.png) is taken here.
"""

import pytest
from playwright.sync_api import expect

from tests.browser.axe import AXE, FAILING, WIDTHS, axe_violations, describe, settle
from tests.browser.pages import no_horizontal_overflow
from tests.console.conversation_scenario import FOLLOW_UP, REASON, parked, three_runs
from tests.factories import make_agent
from tests.processes import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = ROOT / "docs" / "screenshots"


@pytest.fixture
def scenario(org, api, runner, settings):
    settings.CONSOLE_LEASE_SECONDS = 3  # the runs' leases lapse for real (tests/console/conversation_scenario.py)
    make_agent(org, "coder")
    task, _, action = parked(api, runner)  # an open unknown outcome: its card quotes the model's reason
    chain = three_runs(api, runner)
    return task["id"], action.pk, chain


@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_the_conversation_page_passes_axe_and_fits(
    role, width, scenario, daphne_server, page, sign_in, viewer, operator
):
    parked_task, action, chain = scenario
    assert AXE.exists(), "axe-core is not installed: run `make axe`"
    axe = AXE.read_text()
    page.set_viewport_size({"width": width, "height": WIDTHS[width]})
    sign_in(page, {"viewer": "victor", "operator": "olive"}[role])
    findings, wide = [], []
    pages = [
        (f"/agents/coder/runs/{chain.second}/", f"#conversation-{chain.second}", FOLLOW_UP),
        (f"/agents/coder/runs/{chain.third}/", f"#conversation-{chain.third}", "What the agent returned"),
        (f"/tasks/{chain.task}/", f"#chain-{chain.task}", "Recovery across the 3 runs of this chain"),
        (f"/tasks/{parked_task}/", f"#action-{action}", REASON),
    ]
    for url, where, words in pages:
        page.goto(daphne_server.url + url)
        expect(page.locator(where)).to_contain_text(words)
        if role == "operator" and width == 1440 and url.endswith(f"/{chain.second}/"):
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.locator("main").screenshot(path=str(SCREENSHOTS / "conversation.png"))
        settle(page)
        findings += [(url, url, v) for v in axe_violations(page, axe) if v["impact"] in FAILING]
        if width < 600 and not no_horizontal_overflow(page):
            wide.append(url)
    assert not findings, describe(findings, role, width)
    assert not wide, f"scrolls sideways at {width} px: {wide}"
