"""Every page passes axe-core with no serious or critical violation, as every role, at 1440 and 390 px wide.

axe-core comes from the npm registry as package-lock.json pins it (`make axe`,
which `make test` runs). The pages are listed in `tests/browser/a11y_pages.py`.
At 390 px every page also reflows: nothing scrolls sideways (WCAG 1.4.10).
"""

import pytest
from playwright.sync_api import expect

from tests.browser.a11y_pages import ROLES, USERNAMES, a11y_scenario, pages_for
from tests.browser.axe import AXE, FAILING, WIDTHS, axe_violations, describe, settle
from tests.browser.pages import no_horizontal_overflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A11Y_IMPACTS=minor,moderate,serious,critical lists the milder findings too (they do not fail by default).


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.exists():
        pytest.fail(f"axe-core is not installed ({AXE}): run `make axe` (npm ci from package-lock.json)")
    return AXE.read_text()


@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("role", ROLES)
def test_every_page_passes_axe(
    role, width, axe_source, daphne_server, page, sign_in, org, agent, viewer, operator, admin_user
):
    scenario = a11y_scenario(org, admin_user)
    page.set_viewport_size({"width": width, "height": WIDTHS[width]})
    if role != "anonymous":
        sign_in(page, USERNAMES[role])
    findings, overflowing = [], []
    for visit in pages_for(role):
        url = visit.url(scenario)
        response = page.goto(daphne_server.url + url)
        assert response is not None and response.status == visit.status, f"{visit.name}: {url} → {response.status}"
        if visit.prepare:
            visit.prepare(page)
        settle(page)
        for violation in axe_violations(page, axe_source):
            if violation["impact"] in FAILING:
                findings.append((visit.name, url, violation))
        if width < 600 and not no_horizontal_overflow(page):
            wide = page.evaluate(
                "[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > "
                "window.innerWidth + 1).slice(0, 5).map(e => e.tagName.toLowerCase() + (e.className ? "
                "'.' + String(e.className).trim().split(/\\s+/).join('.') : ''))"
            )
            overflowing.append(f"- {visit.name} ({url}) scrolls sideways; widest: {', '.join(wide)}")
    assert not findings, describe(findings, role, width)
    assert not overflowing, f"pages wider than {width} px as {role}:\n" + "\n".join(overflowing)


@pytest.mark.parametrize("width", list(WIDTHS))
def test_the_busy_page_passes_axe(width, axe_source, daphne_server, page):
    """The 503 `database_busy` page is drawn without the database, so no visit above can reach it: it is served
    here at a path of the live server, with the server's own stylesheet (tests/ops/test_database_busy.py shows
    a real pool answering it)."""
    from django.template.loader import render_to_string

    from tasks.errors import DATABASE_BUSY

    html = render_to_string("busy.html", {"detail": DATABASE_BUSY})
    url = daphne_server.url + "/busy-preview/"
    page.route(url, lambda route: route.fulfill(status=503, body=html, content_type="text/html; charset=utf-8"))
    page.set_viewport_size({"width": width, "height": WIDTHS[width]})
    page.goto(url)
    expect(page.locator("h1")).to_have_text("The console is busy")
    assert page.evaluate("[...document.styleSheets].some(s => s.cssRules.length > 0)")  # the console's styles
    findings = [("busy", url, v) for v in axe_violations(page, axe_source) if v["impact"] in FAILING]
    assert not findings, describe(findings, "anonymous", width)
    assert width >= 600 or no_horizontal_overflow(page)
