"""A burst that wants more connections than the pool has: requests queue for one, and one that waits it out
is answered 503 `database_busy` (never a 500), having written nothing. A real daphne with a pool of one."""

import threading

import httpx
import psycopg
import pytest
from django.db import connection
from django.test import Client

from tasks.models import Task
from tests.factories import user_token
from tests.processes import Server, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def admin_connection() -> psycopg.Connection:
    sd = connection.settings_dict
    return psycopg.connect(
        host=sd.get("HOST") or "127.0.0.1",
        port=sd.get("PORT") or 5432,
        user=sd.get("USER") or "postgres",
        dbname=sd["NAME"],
        autocommit=False,
    )


def lock_waiters(db: str) -> int:
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=db, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'", [db]
        ).fetchone()[0]


@pytest.fixture
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite runs without a connection pool (CONSOLE_DB_POOL is PostgreSQL's): no pool to wait out")


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
