"""Security headers in a real browser: the Content-Security-Policy is enforced (no eval, no inline script), and
pages draw and live-update under it without a single violation (conftest.no_csp_violations fails any test that
sees one; the accessibility run visits every page as every role under it)."""

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_policy_is_enforced_and_the_board_works_under_it(
    page, sign_in, daphne_server, agent, operator, no_csp_violations
):
    response = page.goto(daphne_server.url + "/accounts/login/")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert response.headers["referrer-policy"] == "same-origin"
    assert "camera=()" in response.headers["permissions-policy"]
    sign_in(page, "olive")
    expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")  # the websocket under connect-src
    # What the policy refuses, the browser refuses: an injected inline script does not run.
    page.evaluate(
        "() => { const s = document.createElement('script'); s.textContent = 'window.__ran = 1';"
        " document.head.appendChild(s); }"
    )
    assert page.evaluate("() => window.__ran === undefined")
    expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")
    # The refusal above was reported as a violation; it is the test's own, so it is cleared.
    assert any("inline script" in m for m in no_csp_violations), no_csp_violations
    no_csp_violations.clear()
