"""Shared by test modules (from tests/live/test_browser_live.py; no test module imports another)."""

from django.test import Client
from playwright.sync_api import expect

from tests.processes import Server

WAIT = 10_000  # ms


def signed_in(browser, server: Server, user):
    client = Client()
    client.force_login(user)
    context = browser.new_context(base_url=server.url)
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": server.url}])
    return context


def open_live(context, path: str):
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    page.goto(path)
    expect(page.locator("#live-indicator")).to_have_text("Live", timeout=WAIT)
    return page
