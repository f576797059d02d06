"""A decision found past its deadline is drawn overdue on open inboxes and boards, through the real ASGI stack."""

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from recovery import notify
from recovery.models import RecoveryAction
from tests.live.sockets import live_settings, receive_until, subscribed  # noqa: F401 (fixture)
from tests.recovery.bulk_scenarios import unknown_outcomes

pytestmark = pytest.mark.django_db(transaction=True)


def _late(org) -> RecoveryAction:
    (action,) = unknown_outcomes(org, 1, title="waited all afternoon")
    RecoveryAction.objects.filter(pk=action.pk).update(created_at=timezone.now() - timedelta(hours=5))
    return action


async def test_an_overdue_decision_is_drawn_overdue_on_open_pages(org, agent, operator, settings):
    settings.CONSOLE_DECISION_DEADLINE_SECONDS = 4 * 3600
    action = await database_sync_to_async(_late)(org)
    inbox = await subscribed("/ws/inbox/", operator)
    board = await subscribed("/ws/board/", operator)
    try:
        assert await database_sync_to_async(notify.overdue_notice)() == [action.pk]
        (listed,) = (await receive_until(inbox, lambda m: 'id="inbox-list"' in m))[-1:]
        item = listed[listed.index(f'id="inbox-action-{action.pk}"') :]
        assert 'class="badge overdue"' in item[: item.index("</li>")]
        (row,) = (await receive_until(board, lambda m: f'id="task-{action.task_id}"' in m))[-1:]
        row = row[row.index(f'id="task-{action.task_id}"') :]
        assert 'class="badge overdue"' in row[: row.index("</tr>")]
    finally:
        await inbox.disconnect()
        await board.disconnect()
