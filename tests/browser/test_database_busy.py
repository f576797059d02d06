"""A control clicked while every database connection is in use says so in the header, changes nothing, and
works once a connection is free. A real daphne with a pool of one, held behind a table lock (PostgreSQL)."""

import threading

import httpx
import pytest
from django.db import connection
from playwright.sync_api import Page, expect

from tasks.models import Task
from tasks.services import task_create
from tests.browser.conftest import PASSWORD
from tests.browser.pages import expect_live
from tests.console.scenarios import SAFE_PLAN
from tests.ops.db_admin import admin_connection, lock_waiters
from tests.processes import Server, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_pause_clicked_while_the_pool_is_taken_says_the_console_is_busy_and_pauses_nothing(
    page: Page, org, agent, operator
):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite runs without a connection pool (CONSOLE_DB_POOL is PostgreSQL's): no pool to wait out")
    task = task_create(org=org, actor="t", title="held", agent="builder", input=SAFE_PLAN)
    server = Server(CONSOLE_DB_POOL_MAX=1, CONSOLE_DB_POOL_TIMEOUT=1).start()
    locker = admin_connection()
    try:
        page.goto(server.url + "/accounts/login/")
        page.get_by_label("Username").fill(operator.username)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(server.url + "/")
        page.goto(f"{server.url}/tasks/{task.pk}/")
        expect_live(page)
        cookie = {"sessionid": next(c["value"] for c in page.context.cookies() if c["name"] == "sessionid")}

        # The pool's one connection is taken by a request whose session lookup waits on a lock.
        locker.execute("LOCK TABLE django_session IN ACCESS EXCLUSIVE MODE")
        holder = threading.Thread(target=lambda: httpx.get(server.url + "/", cookies=cookie, timeout=30), daemon=True)
        holder.start()
        wait_for(lambda: lock_waiters(connection.settings_dict["NAME"]) >= 1, timeout=15, what="the request to wait")

        page.get_by_role("button", name="Pause task").click()
        busy = page.locator('#ops-alerts [data-alert="database_busy"]')
        expect(busy).to_have_text(
            "Every database connection of this server is in use. Nothing was changed; try again in a few seconds."
        )
        expect(busy).to_have_attribute("role", "alert")
        expect(page.get_by_role("button", name="Pause task")).to_be_visible()  # the card is as it was
        assert Task.objects.get(pk=task.pk).paused is False

        # A connection is free again: the same click pauses the task, and the busy line goes.
        locker.rollback()
        holder.join(30)
        page.get_by_role("button", name="Pause task").click()
        expect(page.get_by_role("button", name="Resume task")).to_be_visible(timeout=15_000)
        expect(busy).to_have_count(0)
        assert Task.objects.get(pk=task.pk).paused is True
    finally:
        locker.rollback()
        locker.close()
        server.stop()
