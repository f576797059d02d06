"""Two web processes on one PostgreSQL database: a change made anywhere reaches a page open on either.

Server A takes an API call, a separate supervisor process settles a lapsed
lease, and a websocket held open on server B sees both: the relay of each web
process tails the shared Event table, woken by LISTEN/NOTIFY.
"""

import re
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import psycopg
import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from console.live.relay import NOTIFY_CHANNEL, listen_params
from recovery.models import RecoveryAction
from tasks.models import Run
from tasks.services import task_create
from tests.console.scenarios import SAFE_PLAN, WRITE_PLAN, checkpoint, claim
from tests.factories import user_token
from tests.live.wsclient import LiveSocket
from tests.processes import Server, manage

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CSRF_INPUT = re.compile(r'<input type="hidden" name="csrfmiddlewaretoken" value="[^"]*">')


def normalize(html: str) -> str:
    html = CSRF_INPUT.sub("", html).replace(' hx-swap-oob="true"', "")
    html = re.sub(r"(<time\b[^>]*>)[^<]*(</time>)", r"\1\2", html)  # relative times move on by themselves
    return re.sub(r"\s+", " ", re.sub(r">\s+<", "><", html)).strip()


def element(html: str, tag: str, element_id: str) -> str:
    match = re.search(rf'<{tag}\b[^>]*\bid="{element_id}"[^>]*>.*?</{tag}>', html, re.S)
    assert match, f"no <{tag} id={element_id!r}>"
    return match.group(0)


@pytest.fixture
def two_servers(transactional_db):
    if connection.vendor != "postgresql":
        pytest.skip(
            "needs PostgreSQL: several web processes share one database only there "
            "(SQLite is the single-process embedded setup); run with DATABASE_URL=postgres://…"
        )
    servers = [Server(), Server()]
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: s.start(), servers))
        yield servers
    finally:
        for server in servers:
            server.stop()


def open_socket(server: Server, path: str, user) -> LiveSocket:
    """A socket on the server, subscribed: its first resync has been answered (as a page's would be)."""
    client = Client()
    client.force_login(user)
    socket = LiveSocket(
        f"ws://127.0.0.1:{server.port}{path}",
        origin=server.url,
        cookie=f"sessionid={client.cookies['sessionid'].value}",
    ).open()
    socket.send_json({"type": "resync", "last_event": 0, "reconnect": False})
    socket.receive_until(lambda m: 'id="live-cursor"' in m)
    return socket


def receive_all(socket: LiveSocket, needles: list[str], timeout: float = 15) -> list[str]:
    """Messages until every needle has appeared in one of them."""
    seen: set[str] = set()

    def done(message: str) -> bool:
        seen.update(n for n in needles if n in message)
        return len(seen) == len(needles)

    return socket.receive_until(done, timeout=timeout)


def page_html(user, url: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_changes_made_through_server_a_and_by_the_supervisor_process_reach_a_page_on_server_b(
    two_servers, org, agent, operator
):
    server_a, server_b = two_servers
    # A run whose worker dispatched `file_write report.md` (step 2) and then went silent.
    lapsing = task_create(org=org, actor="t", title="write the report", agent="builder", input=WRITE_PLAN)
    run = claim(lapsing)
    checkpoint(run, 1)
    paused = task_create(org=org, actor="t", title="pause me", agent="builder", input=SAFE_PLAN)

    sockets = []
    try:
        board = open_socket(server_b, "/ws/board/", operator)
        sockets.append(board)
        paused_page = open_socket(server_b, f"/ws/tasks/{paused.pk}/", operator)
        sockets.append(paused_page)
        lapsing_page = open_socket(server_b, f"/ws/tasks/{lapsing.pk}/", operator)
        sockets.append(lapsing_page)

        # 1. An operator pauses through server A's API; the page on server B shows it.
        with psycopg.connect(**listen_params(), autocommit=True) as listener:
            listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
            response = httpx.post(
                f"{server_a.url}/api/tasks/{paused.pk}/pause/",
                headers={"Authorization": f"Token {user_token(operator)}"},
                timeout=10,
            )
            assert response.status_code == 200, response.text
            assert response.json()["paused"] is True
            # The commit on server A notified every relay (they would otherwise wait for their poll).
            assert list(listener.notifies(timeout=5, stop_after=1)), "server A's commit sent no NOTIFY"
        (message,) = paused_page.receive_until(lambda m: f'id="task-{paused.pk}"' in m)[-1:]
        assert '<dt>Paused</dt><dd><span class="warn">yes</span></dd>' in element(
            message, "section", f"task-{paused.pk}"
        )
        board.receive_until(lambda m: f'<tr id="task-{paused.pk}"' in m)

        # 2. The lease lapses; a real supervisor process interrupts the run and opens a decision.
        Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
        manage("supervise", "--once")
        run.refresh_from_db()
        assert run.status == "interrupted"
        action = RecoveryAction.objects.get(task=lapsing)
        assert action.status == "open" and action.kind == "unknown_outcome"
        received = receive_all(lapsing_page, [f'id="run-{run.pk}"', f'id="action-{action.pk}"'])
        run_card = element([m for m in received if f'id="run-{run.pk}"' in m][-1], "article", f"run-{run.pk}")
        action_card = element(
            [m for m in received if f'id="action-{action.pk}"' in m][-1], "article", f"action-{action.pk}"
        )
        assert 'data-status="interrupted"' in run_card
        assert 'data-status="open"' in action_card and "It did not happen — run it again" in action_card
        # What server B pushed is what a reload draws from the saved state.
        page = page_html(operator, f"/tasks/{lapsing.pk}/")
        assert normalize(run_card) == normalize(element(page, "article", f"run-{run.pk}"))
        assert normalize(action_card) == normalize(element(page, "article", f"action-{action.pk}"))
        board.receive_until(lambda m: f'<tr id="task-{lapsing.pk}"' in m)

        # Nothing about the lapsing task ever reached the page of the paused one.
        leftovers = []
        while not paused_page.messages.empty():
            leftovers.append(paused_page.messages.get_nowait())
        assert not any(f'id="task-{lapsing.pk}"' in (m or "") for m in leftovers)
    finally:
        for socket in sockets:
            socket.close()
