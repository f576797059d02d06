"""Live pages against a real daphne when every page opens at once (an outage's reconnect burst), and refusals.

Daphne drops a handshake that the application has not accepted within its
`--websocket_connect_timeout` (the Procfile's, which tests.processes.Server
uses). A connect that read the session, the user and the access before
accepting queued those reads behind every other socket's on the one database
thread, and under a burst daphne dropped it. Every socket here must connect and
get its resync, and daphne's own log must show as many `WSCONNECT` as
`WSCONNECTING`; a socket that may not watch is still closed with its code.
"""

import asyncio
import time

import psycopg
import pytest
from django.db import connection
from django.test import Client

from console.live.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED
from console.live.relay import listen_params
from tasks.services import task_create
from tests.console.scenarios import SAFE_PLAN, running_task, unknown_outcome_action
from tests.factories import make_agent, make_member, make_org
from tests.live.wsclient import WebSocket
from tests.processes import Server, connect_timeout

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SOCKETS = 100
AT_ONCE = 50


@pytest.fixture(scope="module")
def daphne(django_db_setup, tmp_path_factory):
    server = Server(log=tmp_path_factory.mktemp("burst") / "daphne.log").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server(daphne, transactional_db):
    daphne.logged_from = daphne.log.stat().st_size  # this test's part of daphne's log
    return daphne


@pytest.fixture
def pg_server(server):
    if connection.vendor != "postgresql":
        pytest.skip("the burst is measured where it is deployed, on PostgreSQL: DATABASE_URL=postgres://…")
    return server


def session_of(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def handshakes(server: Server, accepted: int) -> tuple[int, int]:
    """(WSCONNECTING, WSCONNECT) lines this test added to daphne's access log: handshakes begun, and accepted
    (waiting a moment for the `accepted` the client saw to be written)."""
    deadline = time.monotonic() + 5
    while True:
        with open(server.log, "rb") as log:
            log.seek(server.logged_from)
            text = log.read().decode("utf-8", "replace")
        counts = text.count('"WSCONNECTING '), text.count('"WSCONNECT ')
        if counts[1] >= accepted or time.monotonic() > deadline:
            return counts
        time.sleep(0.1)


async def open_and_resync(url: str, origin: str, cookie: str, gate: asyncio.Semaphore) -> tuple[float, float]:
    """A reconnecting page: its socket opens (at most AT_ONCE handshakes in flight, as the bench's burst) and
    asks to resync; returns (when it was accepted, when the page had its fresh cards and the reconnect notice)."""
    async with gate:
        # The client would wait longer than daphne's limit: a handshake daphne gives up on fails here.
        ws = await WebSocket.connect(url, origin=origin, cookie=f"sessionid={cookie}", timeout=60)
        accepted = time.monotonic()
        await ws.send_json({"type": "resync", "last_event": 0, "reconnect": True})
    try:
        while (message := await ws.recv()) is not None:
            if 'id="live-notice"' in message and 'id="live-cursor"' in message:
                return accepted, time.monotonic()
        raise ConnectionError(f"closed with {ws.close_code} before its resync")
    finally:
        await ws.close()


async def burst(url: str, origin: str, cookie: str, sockets: int) -> list:
    gate = asyncio.Semaphore(AT_ONCE)
    jobs = [open_and_resync(url, origin, cookie, gate) for _ in range(sockets)]
    return await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), 120)


def failed(results: list) -> list[str]:
    return sorted({repr(r) for r in results if isinstance(r, BaseException)})


@pytest.mark.postgres
def test_a_hundred_sockets_opening_fifty_at_a_time_all_connect_and_resync(pg_server, org, agent, operator):
    server = pg_server
    # The page an operator has open in an outage: a run whose worker died after dispatching a write.
    task = unknown_outcome_action(org).task
    cookie = session_of(operator)
    connection.close()  # nothing of this process holds the database while the server works

    results = asyncio.run(burst(f"ws://127.0.0.1:{server.port}/ws/tasks/{task.pk}/", server.url, cookie, SOCKETS))

    assert not failed(results), f"{len(failed(results))} kinds of failure among {SOCKETS} pages: {failed(results)}"
    assert handshakes(server, SOCKETS) == (SOCKETS, SOCKETS)


@pytest.mark.postgres
def test_sockets_open_at_once_while_the_database_is_stalled_and_resync_when_it_answers(pg_server, org, agent, operator):
    """A burst while the database does not answer (a failover, a lock): every handshake is still accepted within
    daphne's limit, and each page gets its cards once the database answers again."""
    server = pg_server
    task, _ = running_task(org)
    cookie = session_of(operator)
    connection.close()
    stall = connect_timeout() + 1.5  # longer than daphne waits for an accept

    async def stalled_burst(stalled: psycopg.Connection) -> tuple[list, float]:
        url = f"ws://127.0.0.1:{server.port}/ws/tasks/{task.pk}/"
        pages = asyncio.ensure_future(burst(url, server.url, cookie, AT_ONCE))
        await asyncio.sleep(stall)
        released = time.monotonic()
        stalled.rollback()
        return await pages, released

    with psycopg.connect(**listen_params()) as stalled:
        # Every connect reads its session first: while this lock is held, no socket can learn who it is for.
        stalled.execute("LOCK TABLE django_session IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        results, released = asyncio.run(stalled_burst(stalled))

    assert not failed(results), f"{len(failed(results))} kinds of failure among {AT_ONCE} pages: {failed(results)}"
    assert all(accepted - started < connect_timeout() for accepted, _ in results)
    assert all(resynced > released for _, resynced in results)  # the cards come from the database, once it answers
    assert handshakes(server, AT_ONCE) == (AT_ONCE, AT_ONCE)


async def closed_with(url: str, origin: str, cookie: str | None) -> tuple[int | None, list[str]]:
    """Open a socket as a page does (and ask for its resync); the close code and what arrived before it."""
    ws = await WebSocket.connect(url, origin=origin, cookie=f"sessionid={cookie}" if cookie else "", timeout=10)
    await ws.send_json({"type": "resync", "last_event": 0, "reconnect": False})
    received = []
    try:
        while (message := await asyncio.wait_for(ws.recv(), 10)) is not None:
            received.append(message)
    finally:
        await ws.close()
    return ws.close_code, received


def test_a_refused_socket_is_accepted_and_closed_with_its_code(server, org, agent, operator, viewer):
    """4401 for a socket no session signs in (none, unknown, signed out), 4403 for a page its user may not see
    (another organization's task and run, a private task of someone else, a task that does not exist): the
    browser's page reads the code and says live updates stopped; nothing of the page is sent first."""
    other_org = make_org("globex")
    make_agent(other_org, "builder")
    outsider = make_member(other_org, "gina", "operator")
    foreign_task, foreign_run = running_task(org, title="not theirs")
    private = task_create(
        org=org, actor=operator, title="mine", agent="builder", input=SAFE_PLAN, private=True, creator=operator
    )
    signed_out = Client()
    signed_out.force_login(operator)
    signed_out_key = signed_out.cookies["sessionid"].value
    signed_out.post("/accounts/logout/")
    cases = [
        (f"/ws/tasks/{foreign_task.pk}/", None, CLOSE_UNAUTHENTICATED),
        ("/ws/board/", "not-a-session-key", CLOSE_UNAUTHENTICATED),
        ("/ws/board/", signed_out_key, CLOSE_UNAUTHENTICATED),
        ("/ws/workers/", None, CLOSE_UNAUTHENTICATED),
        (f"/ws/tasks/{foreign_task.pk}/", session_of(outsider), CLOSE_FORBIDDEN),
        (f"/ws/runs/{foreign_run.pk}/", session_of(outsider), CLOSE_FORBIDDEN),
        (f"/ws/tasks/{private.pk}/", session_of(viewer), CLOSE_FORBIDDEN),
        ("/ws/tasks/999999/", session_of(operator), CLOSE_FORBIDDEN),
    ]
    connection.close()

    async def every_case():
        return await asyncio.gather(
            *(closed_with(f"ws://127.0.0.1:{server.port}{path}", server.url, key) for path, key, _ in cases)
        )

    outcomes = asyncio.run(every_case())
    assert [code for code, _ in outcomes] == [code for _, _, code in cases]
    assert all(received == [] for _, received in outcomes)
    assert handshakes(server, len(cases)) == (len(cases), len(cases))  # accepted, then closed with the code
