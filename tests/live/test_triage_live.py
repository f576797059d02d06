"""Live triage through the real ASGI stack: bulk progress on its page, the inbox and its count, selectable rows."""

import re

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from recovery.actions.commands import action_decide
from recovery.bulk.operations import bulk_advance, bulk_batch, bulk_execute, bulk_preview
from tests.helpers import outer_html
from tests.live.sockets import (  # noqa: F401 (fixture)
    close_code,
    connect,
    live_settings,
    normalize,
    page_html,
    receive_until,
    subscribed,
)
from tests.recovery.bulk_scenarios import unknown_outcomes

pytestmark = pytest.mark.django_db(transaction=True)

DECIDE = {"outcome": "performed", "note": "checked"}


def progress_of(html: str) -> tuple[int, int]:
    m = re.search(r'<progress id="bulk-progress" class="bulk-progress" max="(\d+)" value="(\d+)"', html)
    return int(m.group(2)), int(m.group(1))


async def test_bulk_progress_streams_to_its_page_and_a_reconnect_draws_the_saved_progress(org, agent, operator):
    actions = await database_sync_to_async(unknown_outcomes)(org, 4)
    op = await database_sync_to_async(bulk_preview)(
        user=operator, action="decide", ids=[a.task_id for a in actions], params=DECIDE
    )
    await database_sync_to_async(bulk_execute)(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    communicator = await subscribed(f"/ws/bulk/{op.pk}/", operator)
    try:
        await database_sync_to_async(bulk_batch)(op.pk, size=2)
        messages = await receive_until(communicator, lambda m: 'id="bulk-progress"' in m and 'value="2"' in m)
        pushed = messages[-1]
        assert progress_of(pushed) == (2, 4)
        assert f'id="ledger-{op.pk}" class="card ledger"' in pushed and 'hx-swap-oob="true"' in pushed
        # What was pushed is what a reload draws.
        page = await sync_to_async(page_html)(operator, f"/bulk/{op.pk}/")
        for part in (f"bulk-{op.pk}", f"ledger-{op.pk}"):
            assert normalize(outer_html(pushed, part)) == normalize(outer_html(page, part))
        await database_sync_to_async(bulk_advance)(budget=5)
        messages = await receive_until(communicator, lambda m: 'value="4"' in m and "Finished" in m)
        assert progress_of(messages[-1]) == (4, 4)
    finally:
        await communicator.disconnect()
    # A reconnect (the page says so) draws every part from saved state, with the notice.
    again = await connect(f"/ws/bulk/{op.pk}/", operator)
    try:
        await again.send_json_to({"type": "resync", "last_event": 0, "reconnect": True})
        snapshot = (await receive_until(again, lambda m: "bulk-progress" in m))[-1]
        assert progress_of(snapshot) == (4, 4) and "Live updates reconnected" in snapshot
    finally:
        await again.disconnect()


async def test_a_stranger_cannot_watch_a_bulk_operation(org, agent, operator, other_org):
    from tests.factories import make_member

    actions = await database_sync_to_async(unknown_outcomes)(org, 1)
    op = await database_sync_to_async(bulk_preview)(user=operator, action="pause", ids=[actions[0].task_id])
    gina = await database_sync_to_async(make_member)(other_org, "gina", "operator")
    communicator = await connect(f"/ws/bulk/{op.pk}/", gina)
    code, _ = await close_code(communicator)
    assert code == 4403


async def test_the_inbox_is_live_and_every_live_page_gets_the_count(org, agent, operator):
    actions = await database_sync_to_async(unknown_outcomes)(org, 2)
    inbox = await subscribed("/ws/inbox/", operator)
    board = await subscribed("/ws/board/", operator)
    try:
        await database_sync_to_async(action_decide)(
            action_id=actions[0].pk, user=operator, version=1, outcome="performed", note="done"
        )
        (message,) = (await receive_until(inbox, lambda m: 'id="inbox-list"' in m))[-1:]
        assert f'id="inbox-action-{actions[0].pk}"' not in message
        assert f'id="inbox-action-{actions[1].pk}"' in message
        assert re.search(r'id="inbox-count" class="nav-count" hx-swap-oob="true">1<', message)
        counted = await receive_until(board, lambda m: 'id="inbox-count"' in m)
        assert re.search(r'id="inbox-count" class="nav-count" hx-swap-oob="true">1<', counted[-1])
    finally:
        await inbox.disconnect()
        await board.disconnect()


async def test_pushed_board_rows_carry_selection_only_for_those_who_may_act(org, agent, operator, viewer):
    from tasks.services import task_pause

    actions = await database_sync_to_async(unknown_outcomes)(org, 1)
    task = await database_sync_to_async(lambda: actions[0].task)()
    as_operator = await subscribed("/ws/board/", operator)
    as_viewer = await subscribed("/ws/board/", viewer)
    try:
        await database_sync_to_async(task_pause)(actor=operator, task=task)
        row = f'id="task-{actions[0].task_id}"'
        (mine,) = (await receive_until(as_operator, lambda m: row in m))[-1:]
        (theirs,) = (await receive_until(as_viewer, lambda m: row in m))[-1:]
        assert 'name="ids"' in mine and 'form="bulk-form"' in mine
        assert 'name="ids"' not in theirs
    finally:
        await as_operator.disconnect()
        await as_viewer.disconnect()
