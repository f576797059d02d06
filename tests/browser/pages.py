"""Helpers for console pages: the CSRF cookie, live pages, and watching a page until the server state shows."""

import re
import time

from playwright.sync_api import Locator, Page, expect


def csrf_token(page: Page) -> str:
    return next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")


def expect_live(page: Page) -> None:
    """The page's websocket is open and subscribed."""
    expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live", timeout=10_000)


def board_row_pushed(page: Page, task_id: int, text: str, timeout: float = 20_000) -> Locator:
    """Wait, on an open board, until the live push shows the task's row with `text`.

    Seeding while a board is open and waiting for its push proves the relay has
    sent everything up to the seed's last event: a page opened afterwards is not
    re-drawn by a late push of older events (which would clear a half-filled form).
    """
    row = page.locator(f"#task-{task_id}")
    expect(row).to_contain_text(text, timeout=timeout)
    return row


def reload_until(page: Page, locator: Locator, pattern: re.Pattern, *, timeout: float = 60, tick=None) -> str:
    """Reload until `locator` shows `pattern` (a live push may show it sooner); returns its text.

    `tick` runs before every look, e.g. a supervisor pass.
    """
    deadline = time.monotonic() + timeout
    while True:
        if tick is not None:
            tick()
        page.reload()
        try:
            expect(locator).to_contain_text(pattern, timeout=700)
            return locator.text_content() or ""
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def no_horizontal_overflow(page: Page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
