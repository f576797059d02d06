import os
from contextlib import ExitStack

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def chromium(request):
    """Debian's Chromium through Playwright's sync API, for one module of browser tests.

    Only one sync Playwright may run in a thread: when the pytest-playwright
    plugin is active (it is installed, and tests/browser use it), share its
    session `playwright`; otherwise start one for this module.

    The sync API runs an event loop in the main thread, which makes Django refuse
    ORM calls there: allow them from here on (browser-marked tests run after
    every async test). When this module owns Playwright it restores the setting
    after stopping it; a shared Playwright keeps its loop for the whole session.
    """
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (or `make browser`)")
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with ExitStack() as stack:
        try:
            playwright = request.getfixturevalue("playwright")
            owned = False
        except pytest.FixtureLookupError:
            from playwright.sync_api import sync_playwright

            playwright = stack.enter_context(sync_playwright())
            owned = True
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
    if owned:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous
