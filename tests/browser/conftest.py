"""Playwright on Debian's Chromium against the session's live daphne (`daphne_server`).

Playwright's sync API keeps an event loop running in the main thread; the ORM
calls these tests make between browser steps are synchronous on purpose.
"""

import os

import pytest
from django.conf import global_settings
from playwright.sync_api import Page, expect

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "pw-12345678"  # tests.factories.make_member's default


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    # pytest-playwright has no executable option; never `playwright install` here.
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1280, "height": 900}}


@pytest.fixture(autouse=True)
def live_server_password_hashers(settings):
    """Hash passwords as the live server checks them: it runs the real settings, without the tests' MD5 hasher.

    Autouse, so it applies before the user fixtures create their passwords.
    """
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS


@pytest.fixture
def sign_in(daphne_server):
    """Sign `page` in through the login form as `username`; it lands on the board."""

    def sign_in(page: Page, username: str) -> Page:
        page.goto(daphne_server.url + "/accounts/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(daphne_server.url + "/")
        expect(page.locator("header.top .user")).to_contain_text(username)
        return page

    return sign_in


@pytest.fixture(autouse=True)
def no_csp_violations(request):
    """Every browser test fails on any Content-Security-Policy violation the browser reports (an inline script,
    handler or style, an eval): the policy (config/settings.py SECURE_CSP) must hold on every page drawn."""
    if not {"page", "context"} & set(request.fixturenames):
        yield
        return
    context = request.getfixturevalue("context")
    seen: list[str] = []

    def watch(page):
        page.on("console", lambda m: seen.append(m.text) if "Content Security Policy" in m.text else None)

    for page in context.pages:
        watch(page)
    context.on("page", watch)
    yield seen
    assert not seen, "the browser reported Content-Security-Policy violations:\n" + "\n".join(seen)
