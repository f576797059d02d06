"""The live badge and the live page in a real browser (issue 20, items 5 and 6): the badge says what the socket
does — live, reconnecting with the next try's time, offline — after every close code and the browser's own
online/offline events; relative times keep moving; typed text survives a push that replaces its form."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tasks.models import Run
from tests.live.browser_pages import WAIT, open_live, signed_in
from tests.recovery import engine as e

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WS = re.compile(r"/ws/")


def routed(page):
    """Every socket the page opens goes through Playwright to the server; the test may close one from the
    server's side with any code (as a restarting proxy or server does)."""
    sockets = []

    def handler(ws):
        ws.connect_to_server()
        sockets.append(ws)

    page.route_web_socket(WS, handler)
    return sockets


def test_a_socket_closed_with_1001_is_retried_and_the_badge_says_when(chromium, daphne_server, org, agent, operator):
    task = e.start(org, [e.SAFE])
    context = signed_in(chromium, daphne_server, operator)
    try:
        page = context.new_page()
        sockets = routed(page)
        page.goto(f"/tasks/{task.pk}/")
        indicator = page.locator("#live-indicator")
        expect(indicator).to_have_text("Live", timeout=WAIT)
        assert len(sockets) == 1
        typed = page.locator(f"#composer-{task.pk} textarea[name=body]")
        typed.fill("half a thought")

        sockets[0].close(code=1001, reason="going away")
        # Reconnecting, and when: the next try's moment is on the badge.
        expect(indicator).to_have_text(re.compile(r"^Reconnecting — next try at \d\d:\d\d:\d\d$"), timeout=WAIT)
        moment = indicator.locator("time").get_attribute("datetime")
        assert moment and moment.endswith("Z")
        # The try happens, and the badge says so only once the new socket is open.
        expect(indicator).to_have_text("Live", timeout=WAIT)
        assert len(sockets) == 2
        # The reconnect redrew every part of the page, the composer included; what was typed is still there.
        expect(page.locator("#live-notice")).to_contain_text("Live updates reconnected", timeout=WAIT)
        expect(typed).to_have_value("half a thought")
        expect(typed).to_be_focused()

        # A change made after the reconnect reaches the page: the new socket is subscribed.
        run = e.claim(e.first_run(task))
        expect(page.locator(f"#run-{run.pk}")).to_have_attribute("data-status", "running", timeout=WAIT)
    finally:
        context.close()


def test_the_badge_follows_offline_and_online_and_reconnects_at_once_when_the_network_returns(
    chromium, daphne_server, org, agent, operator
):
    task = e.start(org, [e.SAFE])
    context = signed_in(chromium, daphne_server, operator)
    try:
        page = context.new_page()
        sockets = routed(page)
        page.goto(f"/tasks/{task.pk}/")
        indicator = page.locator("#live-indicator")
        expect(indicator).to_have_text("Live", timeout=WAIT)

        context.set_offline(True)
        expect(indicator).to_have_text("Offline — live updates resume when the network returns", timeout=WAIT)
        # The network returns with the socket still open: the badge says Live again at once (not "retrying").
        context.set_offline(False)
        expect(indicator).to_have_text("Live", timeout=2_000)

        # Offline, and the socket drops: no try is wasted while the browser has no network...
        context.set_offline(True)
        expect(indicator).to_have_text(re.compile("^Offline"), timeout=WAIT)
        sockets[-1].close(code=1006)
        page.wait_for_timeout(1_500)
        expect(indicator).to_have_text(re.compile("^Offline"))
        assert len(sockets) == 1
        # ...and the moment it returns, the page reconnects and catches up on what it missed.
        run = e.claim(e.first_run(task))
        context.set_offline(False)
        expect(indicator).to_have_text("Live", timeout=WAIT)
        assert len(sockets) == 2
        expect(page.locator(f"#run-{run.pk}")).to_have_attribute("data-status", "running", timeout=WAIT)
    finally:
        context.close()


def test_a_header_time_moves_on_beside_a_card_that_ticks(chromium, daphne_server, org, agent, operator):
    task = e.start(org, [e.SAFE])
    run = e.claim(e.first_run(task))
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now() - timedelta(seconds=20))
    context = signed_in(chromium, daphne_server, operator)
    try:
        page = open_live(context, f"/tasks/{task.pk}/")
        since = page.locator(f"#task-{task.pk} time[data-relative]").first
        first = since.text_content()
        assert re.fullmatch(r"\d+\sseconds ago", first), first
        # Within a few seconds, not 30: the header's "20 seconds ago" does not stand still.
        expect(since).not_to_have_text(first, timeout=4_000)
        expect(since).to_have_text(re.compile(r"^\d+\sseconds ago$"))
        assert page.errors == []
    finally:
        context.close()


def test_what_is_typed_in_a_follow_up_survives_the_push_that_closes_the_task(
    chromium, daphne_server, org, agent, operator
):
    task = e.start(org, [e.SAFE])
    run = e.claim(e.first_run(task))
    context = signed_in(chromium, daphne_server, operator)
    try:
        page = open_live(context, f"/tasks/{task.pk}/")
        composer = page.locator(f"#composer-{task.pk}")
        composer.locator("textarea[name=body]").fill("please also write the summary")
        page.locator(f"#task-{task.pk}").click()  # the person looks elsewhere; the text is only typed, not sent

        e.advance(run, 1)
        e.finish(run)  # the task is done: its composer is pushed again, closed
        expect(composer).to_contain_text("follow-ups are refused until an operator reopens it", timeout=WAIT)
        expect(composer.get_by_role("button", name="Send follow-up")).to_have_count(0)
        kept = composer.locator("form[data-kept] textarea")
        expect(kept).to_be_visible()
        expect(kept).to_have_value("please also write the summary")
        expect(composer).to_contain_text("Not sent — what you wrote is kept here so you can copy it")
        assert page.errors == []
    finally:
        context.close()
