"""The workers page's socket re-renders on a timer (heartbeats and passes append no Event)."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from console.live.ops import WorkersConsumer
from recovery.models import SupervisorProcess
from recovery.supervisor.loop import supervise_once
from tasks import services
from tasks.models import WorkerInstance
from tests.factories import make_member
from tests.live.sockets import connect, live_settings, receive_until, subscribed  # noqa: F401 (the fixture)
from tests.recovery.engine import SAFE, start, worker

pytestmark = pytest.mark.django_db(transaction=True)


async def test_the_page_gets_its_body_on_connect_and_again_when_a_worker_shows_up(org, operator, monkeypatch):
    monkeypatch.setattr(WorkersConsumer, "refresh_seconds", 0.1)
    socket = await connect("/ws/workers/", operator)
    await socket.send_json_to({"type": "resync", "last_event": 0, "reconnect": False})
    first = await socket.receive_from(timeout=5)
    assert 'id="workers-body" class="workers-body" hx-swap-oob="true"' in first
    assert 'hx-swap-oob="true" id="ops-alerts" class="ops-alerts"' in first
    assert "No worker has claimed in the last day." in first

    await sync_to_async(lambda: services.run_claim(worker=worker(org), label="box-7-1"))()
    while "box-7-1" not in (message := await socket.receive_from(timeout=5)):
        pass
    assert 'data-alive="true"' in message

    # A reconnect says so, like every live page.
    await socket.send_json_to({"type": "resync", "last_event": 0, "reconnect": True})
    assert "Live updates reconnected" in await socket.receive_from(timeout=5)
    await socket.disconnect()


async def test_an_instance_that_stops_beating_turns_stale_without_any_event(org, operator, monkeypatch):
    monkeypatch.setattr(WorkersConsumer, "refresh_seconds", 0.1)
    await sync_to_async(lambda: services.run_claim(worker=worker(org), label="box-7-1"))()
    socket = await connect("/ws/workers/", operator)
    await socket.send_json_to({"type": "resync", "last_event": 0})
    assert 'data-alive="true"' in await socket.receive_from(timeout=5)
    await sync_to_async(
        lambda: WorkerInstance.objects.update(last_seen_at=timezone.now() - timezone.timedelta(minutes=5))
    )()
    while 'data-alive="false"' not in await socket.receive_from(timeout=5):
        pass
    await socket.disconnect()


async def test_strangers_and_removed_members_are_closed(org, other_org, operator, monkeypatch):
    from tasks.accounts import member_remove

    monkeypatch.setattr(WorkersConsumer, "refresh_seconds", 0.1)
    socket = await connect("/ws/workers/")
    assert (await socket.receive_output(timeout=5))["code"] == 4401
    gina = await sync_to_async(make_member)(other_org, "gina", "viewer")
    await sync_to_async(member_remove)(org=other_org, username="gina", actor="t")
    socket = await connect("/ws/workers/", gina)
    assert (await socket.receive_output(timeout=5))["code"] == 4403

    socket = await connect("/ws/workers/", operator)
    await sync_to_async(member_remove)(org=org, username="olive", actor="t")
    while (out := await socket.receive_output(timeout=5))["type"] != "websocket.close":
        pass
    assert out["code"] == 4403


async def test_every_live_page_is_sent_the_header_warning_when_the_supervisor_goes_silent_and_when_it_returns(
    org,
    agent,
    operator,
    settings,
):
    settings.CONSOLE_SUPERVISE_SECONDS = 5
    task = await sync_to_async(lambda: start(org, [SAFE]))()
    await sync_to_async(lambda: supervise_once(label="sup-a"))()
    sockets = [await subscribed(path, operator) for path in ("/ws/board/", f"/ws/tasks/{task.pk}/", "/ws/inbox/")]
    # Nothing happens: no event is appended, and the supervisor's last pass simply grows old.
    await sync_to_async(lambda: SupervisorProcess.objects.update(last_pass_at=timezone.now() - timedelta(seconds=60)))()
    for socket in sockets:
        got = await receive_until(socket, lambda m: 'data-alert="supervisor_silent"' in m)
        assert 'hx-swap-oob="true" id="ops-alerts"' in got[-1] and "No supervisor pass since" in got[-1]
    # It is sent once, not again every interval (the relay re-reads it every 0.2 s here).
    for socket in sockets:
        assert await socket.receive_nothing(timeout=0.8)
    # A pass clears it everywhere.
    await sync_to_async(lambda: supervise_once(label="sup-a"))()
    for socket in sockets:
        got = await receive_until(socket, lambda m: 'id="ops-alerts"' in m)
        # Only the other warning stays: a run is queued and no worker was ever seen.
        assert "supervisor_silent" not in got[-1] and 'data-alert="no_worker"' in got[-1]
        await socket.disconnect()
