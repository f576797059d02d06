"""A recovery breaker is live on every open page: when it opens, the header's warning and the rows of the tasks
it holds are pushed; when an admin closes it, the warning goes. Pushed by its events, not the warnings' timer."""

import pytest
from channels.db import database_sync_to_async

from recovery.actions.breakers import breaker_close
from recovery.models import RecoveryBreaker
from recovery.supervisor.loop import supervise_once
from tests.live.sockets import live_settings, receive_until, subscribed  # noqa: F401 (fixture)
from tests.recovery import engine as e

pytestmark = pytest.mark.django_db(transaction=True)

SAID = "Automatic recovery paused for builder: 4 tasks failed with `sleep` / `lease_lapsed`"


def storm(org, settings) -> list:
    settings.CONSOLE_BREAKER_TASKS = 2
    return [e.interrupted(org, [e.SAFE, e.SAFE, e.SAFE], 2, title=f"storm {i}") for i in range(4)]


def warning(message: str) -> bool:
    return 'id="ops-alerts"' in message


async def test_the_warning_and_the_held_rows_arrive_when_it_opens_and_the_warning_goes_when_it_closes(
    org, agent, viewer, admin_user, settings
):
    settings.CONSOLE_LIVE_RECHECK_SECONDS = 60  # the warnings' own timer never fires here: only the events push
    runs = await database_sync_to_async(storm)(org, settings)
    held = runs[3].task_id
    board = await subscribed("/ws/board/", viewer)
    task_page = await subscribed(f"/ws/tasks/{held}/", viewer)
    try:
        await database_sync_to_async(supervise_once)()
        b = await database_sync_to_async(RecoveryBreaker.objects.get)()
        for socket in (board, task_page):
            pushed = await receive_until(socket, lambda m: warning(m) and SAID in m)
            assert f'href="/breakers/{b.pk}/"' in pushed[-1]
        await receive_until(board, lambda m: f"recovery breaker #{b.pk} paused automatic recovery" in m)

        await database_sync_to_async(breaker_close)(user=admin_user, breaker_id=b.pk, reason="provider is back")
        for socket in (board, task_page):
            await receive_until(socket, lambda m: warning(m) and SAID not in m)
    finally:
        await board.disconnect()
        await task_page.disconnect()
