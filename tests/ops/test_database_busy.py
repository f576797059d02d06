"""A burst that wants more connections than the pool has: requests queue for one, and one that waits it out
is answered 503 `database_busy` (never a 500), having written nothing. A real daphne with a pool of one."""

import re
import sqlite3
import threading

import httpx
import psycopg
import pytest
from django.db import connection
from django.test import Client

from tasks.models import Task
from tasks.services import task_create
from tests.console.scenarios import SAFE_PLAN
from tests.factories import user_token
from tests.ops.db_admin import admin_connection, lock_waiters
from tests.processes import Server, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite runs without a connection pool (CONSOLE_DB_POOL is PostgreSQL's): no pool to wait out")


@pytest.mark.postgres
def test_a_request_that_waits_out_the_pool_is_503_database_busy_and_the_queue_drains(
    postgres_only, org, agent, operator
):
    page = Client()
    page.force_login(operator)
    cookie = {"sessionid": page.cookies["sessionid"].value}
    token = {"Authorization": f"Token {user_token(operator)}"}
    server = Server(CONSOLE_DB_POOL_MAX=1, CONSOLE_DB_POOL_TIMEOUT=1).start()
    locker = admin_connection()
    held: dict = {}
    try:
        # The pool's one connection is taken by a page whose session lookup waits on a lock.
        locker.execute("LOCK TABLE django_session IN ACCESS EXCLUSIVE MODE")
        first = threading.Thread(
            target=lambda: held.update(r=httpx.get(server.url + "/", cookies=cookie, timeout=30)), daemon=True
        )
        first.start()
        wait_for(lambda: lock_waiters(connection.settings_dict["NAME"]) >= 1, timeout=15, what="the page to wait")

        # The API and the pages queue for a connection, then say the console is busy: 503, with Retry-After.
        body = {"title": "not now", "agent": agent.name, "input": {"steps": [{"tool": "sleep", "args": {}}]}}
        refused = httpx.post(server.url + "/api/tasks/", json=body, headers=token, timeout=30)
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
        assert refused.json()["code"] == "database_busy"
        assert "Nothing was changed" in refused.json()["detail"]
        busy_page = httpx.get(server.url + "/inbox/", cookies=cookie, timeout=30)
        assert busy_page.status_code == 503 and "The console is busy" in busy_page.text
        assert "Traceback" not in busy_page.text and "Server Error" not in busy_page.text
        assert 'href="/inbox/">Try again' in busy_page.text  # a page load is repeated by its link
        # A card's control (htmx) gets the sentence alone, which live.js shows in the header.
        card = httpx.get(server.url + "/inbox/", cookies=cookie, headers={"HX-Request": "true"}, timeout=30)
        assert card.status_code == 503 and card.headers["Content-Type"].startswith("text/plain")
        assert card.text.startswith("Every database connection of this server is in use. Nothing was changed")

        # The lock goes: the waiting page is served, and the same request now succeeds.
        locker.rollback()
        first.join(30)
        assert held["r"].status_code in (200, 302)
        created = httpx.post(server.url + "/api/tasks/", json=body, headers=token, timeout=30)
        assert created.status_code == 201
        assert Task.objects.filter(title="not now").count() == 1  # the refused one wrote nothing
    finally:
        locker.rollback()
        locker.close()
        server.stop()


def terminate_lock_waiters(db: str) -> int:
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
            [db],
        ).fetchall()
        return len(rows)


def csrf_of(server, cookie: dict, path: str) -> tuple[str, dict]:
    page = httpx.get(server.url + path, cookies=cookie, timeout=30)
    token = re.search(r'"X-CSRFToken": "([^"]+)"', page.text).group(1)
    return token, {**cookie, "csrftoken": page.cookies.get("csrftoken") or ""}


@pytest.mark.django_db(transaction=True)
def test_a_request_the_database_fails_midway_is_503_with_its_cause_never_500(org, agent, operator):
    """A page or an API call whose database connection drops under it (a restart, a failover: PostgreSQL), or
    that waits out SQLite's write lock, is answered 503 saying so, with Retry-After — pages with the busy page,
    never Django's 500. Nothing is claimed unchanged: a change in flight may have been committed."""
    task = task_create(org=org, actor="t", title="held", agent="builder", input=SAFE_PLAN)
    page = Client()
    page.force_login(operator)
    cookie = {"sessionid": page.cookies["sessionid"].value}
    token = {"Authorization": f"Token {user_token(operator)}"}
    db = connection.settings_dict["NAME"]
    if connection.vendor == "postgresql":
        server = Server().start()
        locker = admin_connection()
        try:
            answers: dict = {}
            # A page whose session lookup waits on a lock, and an API call whose task list does; then their
            # connections are killed under them.
            locker.execute("LOCK TABLE django_session, tasks_task IN ACCESS EXCLUSIVE MODE")
            calls = {
                "page": lambda: httpx.get(server.url + "/inbox/", cookies=cookie, timeout=30),
                "api": lambda: httpx.get(server.url + "/api/tasks/", headers=token, timeout=30),
                # Refused by a middleware before any view, whose refusal page looks the person up (handler500).
                "middleware": lambda: httpx.get(server.url + "/inbox/?q=%00", cookies=cookie, timeout=30),
            }
            threads = [
                threading.Thread(target=lambda n=n, c=c: answers.update({n: c()}), daemon=True)
                for n, c in calls.items()
            ]
            for t in threads:
                t.start()
            wait_for(lambda: lock_waiters(db) >= 3, timeout=15, what="the requests to wait")
            assert terminate_lock_waiters(db) == 3
            for t in threads:
                t.join(30)
            locker.rollback()
            lost = answers["page"]
            assert lost.status_code == 503 and lost.headers["Retry-After"] == "5"
            assert (
                "The console lost its database connection" in lost.text
                and "may or may not have been saved" in lost.text
            )
            assert 'href="/inbox/">Try again' in lost.text and "Server Error" not in lost.text
            refused = answers["middleware"]
            assert refused.status_code == 503 and "The console lost its database connection" in refused.text
            assert answers["api"].status_code == 503 and answers["api"].headers["Retry-After"] == "5"
            assert answers["api"].json()["code"] == "database_unavailable"
            # The pool let the dead connections go: the next requests are served.
            assert httpx.get(server.url + "/inbox/", cookies=cookie, timeout=30).status_code == 200
            assert httpx.get(server.url + "/api/tasks/", headers=token, timeout=30).status_code == 200
        finally:
            locker.rollback()
            locker.close()
            server.stop()
        return

    server = Server(CONSOLE_SQLITE_TIMEOUT="0.5").start()
    try:
        csrf, cookies = csrf_of(server, cookie, f"/tasks/{task.pk}/")
        locker = sqlite3.connect(db, isolation_level=None, timeout=30)
        locker.execute("BEGIN IMMEDIATE")  # another process's writer holds SQLite's one write lock
        try:
            form = httpx.post(
                f"{server.url}/tasks/{task.pk}/pause/", cookies=cookies, headers={"X-CSRFToken": csrf}, timeout=30
            )
            api = httpx.post(f"{server.url}/api/tasks/{task.pk}/pause/", headers=token, timeout=30)
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        assert form.status_code == 503 and form.headers["Retry-After"] == "5"
        assert "The console is busy" in form.text and "Another process kept the database busy" in form.text
        assert 'href="/">Go to the board' in form.text  # a form post is not repeated by a link
        assert api.status_code == 503 and api.json()["code"] == "database_busy"
        assert Task.objects.get(pk=task.pk).paused is False
        # The lock is free: the same form pauses the task.
        again = httpx.post(
            f"{server.url}/tasks/{task.pk}/pause/", cookies=cookies, headers={"X-CSRFToken": csrf}, timeout=30
        )
        assert again.status_code in (200, 302) and Task.objects.get(pk=task.pk).paused is True
    finally:
        server.stop()
