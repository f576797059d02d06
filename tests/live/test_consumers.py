"""The live sockets through the real ASGI stack: who may subscribe, what reaches whom, and resync."""

import asyncio
import re
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.utils import timezone

from config.asgi import application
from console.live.access import check_access
from console.live.relay import relay
from recovery.supervisor.loop import supervise_once
from tasks import events
from tasks.accounts import member_remove
from tasks.models import Run
from tasks.services import leases_expire, task_create, task_pause, task_resume
from tests.console.scenarios import SAFE_PLAN, running_task, unknown_outcome_action
from tests.factories import make_agent, make_member
from tests.helpers import outer_html
from tests.live.sockets import (
    ORIGIN,
    close_code,
    connect,
    cursor_of,
    is_warnings,
    live_settings,  # noqa: F401 (an autouse fixture)
    normalize,
    page_html,
    receive_page,
    receive_until,
    session_headers,
    subscribed,
)

pytestmark = pytest.mark.django_db(transaction=True)


# --- fixtures and helpers -------------------------------------------------------------


async def nothing_but_warnings(communicator, *, timeout: float) -> bool:
    """Nothing arrives within `timeout` but, perhaps, the header's operations warnings (a queued run and no
    worker seen is news of its own, sent to every live page of the organization)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        # receive_nothing only looks (a receive that times out would cancel the consumer).
        if await communicator.receive_nothing(timeout=min(left, 0.05)):
            continue
        message = await communicator.receive_from()
        if not is_warnings(message):
            return False
    return True


def element(html: str, tag: str, element_id: str) -> str:
    """The outer HTML of `<tag id="element_id" ...>` (the card partials do not nest their own tag)."""
    match = re.search(rf'<{tag}\b[^>]*\bid="{element_id}"[^>]*>.*?</{tag}>', html, re.S)
    assert match, f"no <{tag} id={element_id!r}> in {html[:500]!r}"
    return match.group(0)


@pytest.fixture
def other_agent(other_org):
    return make_agent(other_org, "builder")


@pytest.fixture
def outsider(other_org):
    return make_member(other_org, "gina", "operator")


# --- what a subscribed page receives ----------------------------------------------------


async def test_a_committed_change_reaches_the_task_page_as_the_cards_a_reload_draws(org, agent, operator):
    task = await database_sync_to_async(task_create)(
        org=org, actor="t", title="report", agent="builder", input=SAFE_PLAN
    )
    communicator = await subscribed(f"/ws/tasks/{task.pk}/", operator)
    try:
        await database_sync_to_async(task_pause)(actor=operator, task=task)
        message = (await receive_until(communicator, lambda m: f'id="task-{task.pk}"' in m))[-1]
        header = element(message, "section", f"task-{task.pk}")
        assert 'hx-swap-oob="true"' in header
        assert '<dt>Paused</dt><dd><span class="warn">yes</span></dd>' in header
        assert "Resume task" in header
        assert f'id="actions-{task.pk}"' in message
        assert cursor_of(message) == await database_sync_to_async(events.last_event_id)()
        # The pushed cards are the cards a reload draws.
        page = await sync_to_async(page_html)(operator, f"/tasks/{task.pk}/")
        assert normalize(header) == normalize(element(page, "section", f"task-{task.pk}"))
        for part in (f"actions-{task.pk}", f"messages-{task.pk}"):
            if f'id="{part}"' in message:
                assert normalize(outer_html(message, part)) == normalize(outer_html(page, part))
        # A pause does not touch the follow-up composer: what someone is typing there stays.
        assert f'id="composer-{task.pk}"' not in message

        await database_sync_to_async(task_resume)(actor=operator, task=task)
        message = (await receive_until(communicator, lambda m: f'id="task-{task.pk}"' in m))[-1]
        assert "<dt>Paused</dt><dd>no</dd>" in message
    finally:
        await communicator.disconnect()


async def test_a_commit_wakes_the_relay_at_once_without_waiting_for_its_poll(org, agent, operator, settings):
    """PostgreSQL's NOTIFY, SQLite's write-ahead log: either wakes the tail, so a push is not a poll away."""
    settings.CONSOLE_RELAY_POLL_SECONDS = 30
    task = await database_sync_to_async(task_create)(
        org=org, actor="t", title="report", agent="builder", input=SAFE_PLAN
    )
    communicator = await subscribed(f"/ws/tasks/{task.pk}/", operator)
    try:
        await asyncio.sleep(0.3)  # past the relay's first look at the database
        started = time.monotonic()
        await database_sync_to_async(task_pause)(actor=operator, task=task)
        await receive_until(communicator, lambda m: "Resume task" in m, timeout=5)
        assert time.monotonic() - started < 2
    finally:
        await communicator.disconnect()


async def test_the_run_page_receives_its_run_card_when_the_run_is_interrupted(org, agent, operator):
    task, run = await database_sync_to_async(running_task)(org)
    communicator = await subscribed(f"/ws/runs/{run.pk}/", operator)
    try:
        await database_sync_to_async(leases_expire)(now=timezone.now() + timedelta(hours=1))
        message = (await receive_until(communicator, lambda m: f'id="run-{run.pk}"' in m))[-1]
        assert 'data-status="interrupted"' in element(message, "article", f"run-{run.pk}")
        assert f'id="task-{task.pk}"' not in message
    finally:
        await communicator.disconnect()


async def test_another_organizations_events_never_arrive(org, agent, operator, other_org, other_agent):
    mine = await database_sync_to_async(task_create)(org=org, actor="t", title="mine", agent="builder", input=SAFE_PLAN)
    theirs = await database_sync_to_async(task_create)(
        org=other_org, actor="t", title="theirs", agent="builder", input=SAFE_PLAN
    )
    board = await subscribed("/ws/board/?state=all&q=", operator)
    page = await subscribed(f"/ws/tasks/{mine.pk}/", operator)
    try:
        await database_sync_to_async(task_pause)(actor="someone", task=theirs)
        await database_sync_to_async(task_create)(
            org=other_org, actor="t", title="theirs too", agent="builder", input=SAFE_PLAN
        )
        assert await nothing_but_warnings(board, timeout=1.0)
        assert await nothing_but_warnings(page, timeout=0.2)

        # The sockets are alive: a change of our own arrives, and carries nothing foreign.
        await database_sync_to_async(task_pause)(actor=operator, task=mine)
        for communicator in (board, page):
            received = await receive_until(communicator, lambda m: f'id="task-{mine.pk}"' in m)
            assert not any("theirs" in m or f'id="task-{theirs.pk}"' in m for m in received)
    finally:
        await board.disconnect()
        await page.disconnect()


# --- who may subscribe ------------------------------------------------------------------


@pytest.mark.parametrize("origin", [b"http://evil.example", b"http://testserver.evil.example", None])
async def test_a_foreign_or_missing_origin_is_refused(org, agent, operator, origin):
    headers = [h for h in await sync_to_async(session_headers)(operator) if h[0] != b"origin"]
    if origin is not None:
        headers.append((b"origin", origin))
    communicator = WebsocketCommunicator(application, "/ws/board/", headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    assert not connected
    await communicator.disconnect()


@pytest.mark.parametrize("cookie", [None, b"sessionid=not-a-session-key"], ids=["no-cookie", "unknown-session"])
async def test_a_visitor_who_is_not_signed_in_is_closed_with_4401(org, agent, cookie):
    task = await database_sync_to_async(task_create)(org=org, actor="t", title="t", agent="builder", input=SAFE_PLAN)
    headers = [ORIGIN] + ([(b"cookie", cookie)] if cookie else [])
    for path in ("/ws/board/", f"/ws/tasks/{task.pk}/"):
        communicator = await connect(path, headers=headers)
        try:
            code, sent = await close_code(communicator)
            assert code == 4401 and sent == []
        finally:
            await communicator.disconnect()
    assert not relay.subscribers


async def test_another_organizations_task_or_run_is_closed_with_4403(org, agent, other_org, other_agent, outsider):
    task, run = await database_sync_to_async(running_task)(org)
    for path in (f"/ws/tasks/{task.pk}/", f"/ws/runs/{run.pk}/", "/ws/tasks/999999/"):
        communicator = await connect(path, outsider)
        try:
            code, sent = await close_code(communicator)
            assert code == 4403 and sent == [], path
        finally:
            await communicator.disconnect()
    assert not relay.subscribers


async def test_after_removal_from_the_organization_nothing_more_arrives_and_the_socket_closes_4403(
    org, agent, operator
):
    task = await database_sync_to_async(task_create)(org=org, actor="t", title="t", agent="builder", input=SAFE_PLAN)
    board = await subscribed("/ws/board/", operator)
    page = await subscribed(f"/ws/tasks/{task.pk}/", operator)
    try:
        started = time.monotonic()
        await database_sync_to_async(member_remove)(org=org, username=operator.username)
        # A change right after the removal commits must not be drawn for the removed member.
        await database_sync_to_async(task_pause)(actor="someone", task=task)
        for communicator in (board, page):
            code, sent = await close_code(communicator, timeout=5)
            assert code == 4403
            assert not any(f'id="task-{task.pk}"' in m for m in sent), sent
        assert time.monotonic() - started < 5
        assert not relay.subscribers
    finally:
        await board.disconnect()
        await page.disconnect()


async def test_a_private_task_reaches_its_creators_board_and_admins_but_not_other_members(org, agent, operator):
    colleague = await database_sync_to_async(make_member)(org, "oscar", "operator")
    admin = await database_sync_to_async(make_member)(org, "ada", "admin")
    creator_board = await subscribed("/ws/board/", operator)
    admin_board = await subscribed("/ws/board/", admin)
    colleague_board = await subscribed("/ws/board/", colleague)
    try:
        task = await database_sync_to_async(task_create)(
            org=org, actor=operator, title="secret", agent="builder", input=SAFE_PLAN, private=True, creator=operator
        )
        for communicator in (creator_board, admin_board):
            received = await receive_until(communicator, lambda m: f'id="task-{task.pk}"' in m)
            assert 'hx-swap-oob="afterbegin:#board-rows"' in received[-1]  # a new row on top
        await database_sync_to_async(task_pause)(actor=operator, task=task)
        for communicator in (creator_board, admin_board):
            await receive_until(communicator, lambda m: f'id="task-{task.pk}"' in m)
        assert await nothing_but_warnings(colleague_board, timeout=1.0)

        # Nor can the colleague open the task's own page.
        page = await connect(f"/ws/tasks/{task.pk}/", colleague)
        try:
            code, _ = await close_code(page)
            assert code == 4403
        finally:
            await page.disconnect()
    finally:
        for communicator in (creator_board, admin_board, colleague_board):
            await communicator.disconnect()


async def test_a_task_made_private_stops_reaching_other_members_task_page(org, agent, operator):
    colleague = await database_sync_to_async(make_member)(org, "oscar", "operator")
    task = await database_sync_to_async(task_create)(
        org=org, actor="t", title="open", agent="builder", input=SAFE_PLAN, creator=operator
    )
    page = await subscribed(f"/ws/tasks/{task.pk}/", colleague)
    try:
        await database_sync_to_async(type(task).objects.filter(pk=task.pk).update)(private=True)
        code, sent = await close_code(page, timeout=5)
        # Nothing of the task reaches the colleague; the header's warnings, sent to every page once it connected,
        # may still be on their way.
        assert code == 4403 and [m for m in sent if 'id="ops-alerts"' not in m] == []
    finally:
        await page.disconnect()


async def test_many_tabs_of_one_page_cost_one_access_check_per_interval_and_all_close_when_it_is_gone(
    org, agent, operator, monkeypatch
):
    colleague = await database_sync_to_async(make_member)(org, "oscar", "operator")
    task = await database_sync_to_async(task_create)(
        org=org, actor="t", title="open", agent="builder", input=SAFE_PLAN, creator=operator
    )
    tabs = [await subscribed(f"/ws/tasks/{task.pk}/", colleague) for _ in range(3)]
    checks = []
    real = check_access

    def counted(user, page, obj_id):
        checks.append(time.monotonic())
        return real(user, page, obj_id)

    monkeypatch.setattr("console.live.relay.check_access", counted)
    monkeypatch.setattr("console.live.consumers.check_access", counted)
    try:
        await asyncio.sleep(0.5)  # two intervals of 0.2 s
        assert 1 <= len(checks) <= 3, checks  # one per interval, not one per tab
        await database_sync_to_async(type(task).objects.filter(pk=task.pk).update)(private=True)
        for tab in tabs:
            code, sent = await close_code(tab, timeout=5)
            assert code == 4403 and [m for m in sent if not is_warnings(m)] == []  # the header's warnings at most
    finally:
        for tab in tabs:
            await tab.disconnect()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the connection pool is PostgreSQL's")
async def test_the_relays_rechecks_hand_their_connections_back_to_the_pool(org, agent, operator, settings, monkeypatch):
    """Each recheck reads access, warnings and leases in executor threads of the loop. channels closes a thread's
    connections around each call, but its test communicator makes that close a no-op while a test awaits a
    socket, and those threads kept one pool connection each until the suite's threaded tests found the pool
    empty. The relay closes them itself."""
    from django.db.backends.postgresql.base import DatabaseWrapper

    def in_use():
        stats = DatabaseWrapper._connection_pools["default"].get_stats()
        return stats.get("pool_size", 0) - stats.get("pool_available", 0)

    task = await database_sync_to_async(task_create)(
        org=org, actor="t", title="open", agent="builder", input=SAFE_PLAN, creator=operator
    )
    tabs = [await subscribed(f"/ws/tasks/{task.pk}/", operator) for _ in range(2)]
    try:
        before = in_use()
        monkeypatch.setattr("channels.db.close_old_connections", lambda: None)  # as the communicator does
        await asyncio.sleep(0.7)  # three rechecks of 0.2 s
        settings.CONSOLE_LIVE_RECHECK_SECONDS = 60  # none in flight when the pool is read
        await asyncio.sleep(0.5)
        assert in_use() <= before
    finally:
        for tab in tabs:
            await tab.disconnect()


# --- resync -------------------------------------------------------------------------------


async def test_a_reconnect_resync_returns_every_card_from_saved_state_and_the_notice(org, agent, operator):
    action = await database_sync_to_async(unknown_outcome_action)(org)
    task_id = action.task_id
    run_ids = await database_sync_to_async(
        lambda: list(Run.objects.filter(task_id=task_id).values_list("pk", flat=True))
    )()
    cursor = await database_sync_to_async(events.last_event_id)()
    communicator = await connect(f"/ws/tasks/{task_id}/", operator)
    try:
        await communicator.send_json_to({"type": "resync", "last_event": cursor, "reconnect": True})
        message = await receive_page(communicator)
        page = await sync_to_async(page_html)(operator, f"/tasks/{task_id}/")
        cards = [("section", f"task-{task_id}"), ("div", f"actions-{task_id}"), ("article", f"action-{action.pk}")]
        cards += [("article", f"run-{rid}") for rid in run_ids]
        for _tag, element_id in cards:
            assert normalize(outer_html(message, element_id)) == normalize(outer_html(page, element_id))
        assert f'<ol class="chain" id="chain-{task_id}" hx-swap-oob="true">' in message
        notice = element(message, "div", "live-notice")
        assert 'hx-swap-oob="true"' in notice
        assert "Live updates reconnected — this page now shows saved state." in notice
        assert "Reconnecting does not restart the agent." in notice
        assert cursor_of(message) == cursor
        assert message.count('<span id="live-cursor"') == 1
    finally:
        await communicator.disconnect()


async def test_a_resync_of_an_up_to_date_page_returns_nothing_and_a_page_behind_catches_up(org, agent, operator):
    task = await database_sync_to_async(task_create)(org=org, actor="t", title="t", agent="builder", input=SAFE_PLAN)
    cursor = await database_sync_to_async(events.last_event_id)()
    for path in (f"/ws/tasks/{task.pk}/", "/ws/board/"):
        communicator = await connect(path, operator)
        try:
            await communicator.send_json_to({"type": "resync", "last_event": cursor, "reconnect": False})
            assert await nothing_but_warnings(communicator, timeout=0.5)
            # A page that missed an event (drawn before it) gets its cards again, without the notice.
            await communicator.send_json_to({"type": "resync", "last_event": cursor - 1, "reconnect": False})
            message = await receive_page(communicator)
            assert f'id="task-{task.pk}"' in message
            assert "live-notice" not in message
            assert cursor_of(message) == cursor
        finally:
            await communicator.disconnect()


async def test_messages_other_than_resync_are_ignored(org, agent, operator):
    task = await database_sync_to_async(task_create)(org=org, actor="t", title="t", agent="builder", input=SAFE_PLAN)
    communicator = await subscribed(f"/ws/tasks/{task.pk}/", operator)
    try:
        for text in ("not json", '{"type": "pause"}', '{"type": "resync", "last_event": "x"}', "[]"):
            await communicator.send_to(text_data=text)
        # A last_event that is not a number counts as 0: the page gets its cards again.
        received = await receive_until(communicator, lambda m: f'id="task-{task.pk}"' in m)
        assert len(received) == 1
        assert await nothing_but_warnings(communicator, timeout=0.3)
    finally:
        await communicator.disconnect()


async def test_a_supervisor_pass_pushes_the_interrupted_run_its_continuation_and_the_header(org, agent, operator):
    task, run = await database_sync_to_async(running_task)(org, agent="builder")  # resumes by itself
    communicator = await subscribed(f"/ws/tasks/{task.pk}/", operator)
    try:
        await database_sync_to_async(leases_expire)(now=timezone.now() + timedelta(hours=1))
        await database_sync_to_async(supervise_once)()
        continuation = await database_sync_to_async(Run.objects.get)(continues_id=run.pk)
        cursor = await database_sync_to_async(events.last_event_id)()
        received = await receive_until(communicator, lambda m: cursor_of(m) == cursor)
        pushed = "".join(received)
        # The new run is appended to the chain (before its last line, the chain's recovery line); the interrupted
        # one is replaced in place.
        assert f'<ol hx-swap-oob="beforebegin:#chain-recovery-{task.pk}"><li>' in pushed
        page = await sync_to_async(page_html)(operator, f"/tasks/{task.pk}/")
        latest = {}
        for message in received:
            for tag, element_id in (("section", f"task-{task.pk}"), ("article", f"run-{run.pk}")):
                if f'id="{element_id}"' in message:
                    latest[element_id] = element(message, tag, element_id)
            if f'id="run-{continuation.pk}"' in message:
                latest[f"run-{continuation.pk}"] = element(message, "article", f"run-{continuation.pk}")
        assert 'data-status="interrupted"' in latest[f"run-{run.pk}"]
        assert 'data-status="queued"' in latest[f"run-{continuation.pk}"]
        for element_id, html in latest.items():
            tag = "section" if element_id.startswith("task-") else "article"
            assert normalize(html) == normalize(element(page, tag, element_id)), element_id
    finally:
        await communicator.disconnect()


async def test_sockets_that_open_together_start_one_relay_and_each_change_arrives_once(org, agent, operator):
    """Many pages reconnect at once after a restart: the process must still run one relay (and one LISTEN)."""
    task = await database_sync_to_async(task_create)(org=org, actor="t", title="t", agent="builder", input=SAFE_PLAN)
    headers = await sync_to_async(session_headers)(operator)
    communicators = [WebsocketCommunicator(application, f"/ws/tasks/{task.pk}/", headers=headers) for _ in range(5)]
    try:
        results = await asyncio.gather(*(c.connect(timeout=5) for c in communicators))
        assert all(connected for connected, _ in results)
        for communicator in communicators:
            await communicator.send_json_to({"type": "resync", "last_event": 0, "reconnect": False})
            await receive_page(communicator)
        running = [t for t in asyncio.all_tasks() if t.get_name() == "console-event-relay" and not t.done()]
        listening = [t for t in asyncio.all_tasks() if t.get_name() == "console-event-listen" and not t.done()]
        expected = (1, 1 if connection.vendor == "postgresql" else 0)
        assert (len(running), len(listening)) == expected, "(relay loops, LISTEN connections) of one process"

        await database_sync_to_async(task_pause)(actor=operator, task=task)
        for communicator in communicators:
            await receive_until(communicator, lambda m: f'id="task-{task.pk}"' in m)
            assert await nothing_but_warnings(communicator, timeout=0.3)  # once, not once per relay loop
    finally:
        for communicator in communicators:
            await communicator.disconnect()


async def test_a_workers_page_open_beside_them_does_not_stop_the_access_recheck_of_live_pages(org, agent, operator):
    """The workers page's socket is the relay's too (for session ends), but it has no page access to re-read:
    the relay's periodic re-check must go on for the other pages (it stopped at the first interval)."""
    colleague = await database_sync_to_async(make_member)(org, "oscar", "operator")
    task = await database_sync_to_async(task_create)(
        org=org, actor="t", title="open", agent="builder", input=SAFE_PLAN, creator=operator
    )
    workers = await connect("/ws/workers/", operator)
    page = await subscribed(f"/ws/tasks/{task.pk}/", colleague)
    try:
        await asyncio.sleep(0.5)  # a re-check interval or two with both sockets subscribed
        await database_sync_to_async(type(task).objects.filter(pk=task.pk).update)(private=True)
        code, sent = await close_code(page, timeout=5)
        assert code == 4403 and [m for m in sent if not is_warnings(m)] == []
    finally:
        await page.disconnect()
        await workers.disconnect()


# --- one render per audience ------------------------------------------------------------------


async def test_each_role_gets_its_own_render_and_sockets_of_one_audience_share_one(org, agent, operator, monkeypatch):
    """Two operators (three sockets) and a viewer on one task page: a pause is rendered twice, once per role; every
    socket's cards are the cards its own reload draws, and the viewer's hold no operator's controls."""
    import console.live.relay as relay_module

    colleague = await database_sync_to_async(make_member)(org, "oscar", "operator")
    viewer = await database_sync_to_async(make_member)(org, "vera", "viewer")
    task = await database_sync_to_async(task_create)(
        org=org, actor="t", title="report", agent="builder", input=SAFE_PLAN
    )
    renders = []
    real = relay_module.task_update

    def counted(*args, viewer, **kwargs):
        renders.append(viewer.username)
        return real(*args, viewer=viewer, **kwargs)

    monkeypatch.setattr(relay_module, "task_update", counted)
    sockets = {
        "operator": await subscribed(f"/ws/tasks/{task.pk}/", operator),
        "operator, second tab": await subscribed(f"/ws/tasks/{task.pk}/", operator),
        "colleague": await subscribed(f"/ws/tasks/{task.pk}/", colleague),
        "viewer": await subscribed(f"/ws/tasks/{task.pk}/", viewer),
    }
    users = {"operator": operator, "operator, second tab": operator, "colleague": colleague, "viewer": viewer}
    try:
        await database_sync_to_async(task_pause)(actor=operator, task=task)
        pushed = {}
        for name, communicator in sockets.items():
            pushed[name] = (await receive_until(communicator, lambda m: f'id="task-{task.pk}"' in m))[-1]
        assert len(renders) == 2, renders  # one per role, not one per socket nor per person
        assert {"vera"} < set(renders) and len(set(renders) & {operator.username, "oscar"}) == 1, renders
        for name, message in pushed.items():
            page = await sync_to_async(page_html)(users[name], f"/tasks/{task.pk}/")
            for part in (f"task-{task.pk}", f"actions-{task.pk}"):
                assert normalize(outer_html(message, part)) == normalize(outer_html(page, part)), (name, part)
        resume = "<button>Resume task</button>"
        assert resume in pushed["operator"] and resume in pushed["colleague"]
        assert resume not in pushed["viewer"]
        assert pushed["operator"] == pushed["operator, second tab"]  # the one render, as sent
    finally:
        for communicator in sockets.values():
            await communicator.disconnect()


def test_a_shared_render_leaves_the_viewers_own_name_for_each_socket_to_fill_in(org, agent, operator):
    """The one viewer-specific word of a card (its viewer's name, the owner a repaired workspace returns to) is a
    stand-in in a render shared by an audience; each socket's copy carries its own viewer's name, escaped."""
    from console.cards.actions import VIEWER_NAME, action_context, for_viewer, shared_render
    from recovery.selectors import action_detail

    action = action_detail(operator, unknown_outcome_action(org).pk)
    assert action_context(action, operator)["username"] == operator.username
    with shared_render():
        assert action_context(action, operator)["username"] == VIEWER_NAME
    colleague = make_member(org, "o<sc>ar", "operator")
    html = f'<input name="return_owner" value="{VIEWER_NAME}">'
    assert for_viewer(html, colleague) == '<input name="return_owner" value="o&lt;sc&gt;ar">'
    assert for_viewer(html, operator) == f'<input name="return_owner" value="{operator.username}">'
    assert for_viewer("<p>no stand-in</p>", operator) == "<p>no stand-in</p>"
