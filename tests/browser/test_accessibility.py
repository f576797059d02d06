"""Every page passes axe-core with no serious or critical violation, as every role, at 1440 and 390 px wide.

axe-core comes from the npm registry as package-lock.json pins it (`make axe`,
which `make test` runs). The pages are listed in `tests/browser/a11y_pages.py`.
At 390 px every page also reflows: nothing scrolls sideways (WCAG 1.4.10).
"""

import os

import pytest
from playwright.sync_api import Page, expect

from tests.browser.a11y_pages import ROLES, USERNAMES, a11y_scenario, pages_for
from tests.browser.pages import no_horizontal_overflow
from tests.processes import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
# A11Y_IMPACTS=minor,moderate,serious,critical lists the milder findings too (they do not fail by default).
FAILING = tuple(os.environ.get("A11Y_IMPACTS", "serious,critical").split(","))
WIDTHS = {1440: 900, 390: 844}


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.exists():
        pytest.fail(f"axe-core is not installed ({AXE}): run `make axe` (npm ci from package-lock.json)")
    return AXE.read_text()


def axe_violations(page: Page, axe_source: str) -> list[dict]:
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        # Evaluated by the test driver, not added as an inline <script>: the page's CSP refuses those.
        page.evaluate(axe_source)
    result = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
    return result["violations"]


def settle(page: Page) -> None:
    """Draw the page as a person would read it: live state shown, every folded section open."""
    if page.locator("#live-indicator").count():
        expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live", timeout=10_000)
    page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")


def describe(findings: list[tuple[str, str, dict]], role: str, width: int) -> str:
    lines = [f"{len(findings)} accessibility violation(s) ({'/'.join(FAILING)}) as {role} at {width} px:"]
    for name, url, v in findings:
        lines.append(f"- [{v['impact']}] {v['id']} on {name} ({url}): {v['help']}")
        for node in v["nodes"][:6]:
            summary = " ".join((node.get("failureSummary") or "").split())
            lines.append(f"    at {' '.join(map(str, node['target']))}: {summary[:300]}")
        if len(v["nodes"]) > 6:
            lines.append(f"    … and {len(v['nodes']) - 6} more element(s)")
        lines.append(f"    {v['helpUrl']}")
    return "\n".join(lines)


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
