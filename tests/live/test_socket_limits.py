"""Websocket frames and query strings with insane values never crash the consumer; resync floods are closed (4429)."""

import json

import pytest
from channels.db import database_sync_to_async

from console.live.consumers import CLOSE_THROTTLED, RESYNC_BURST, ResyncBudget, cursor_value
from tasks.services import task_create
from tests.console.scenarios import SAFE_PLAN
from tests.live.sockets import (
    connect,
    is_warnings,
    live_settings,  # noqa: F401 (an autouse fixture)
    receive_until,
    subscribed,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "frame",
    [
        '{"type": "resync", "last_event": 1e400}',
        '{"type": "resync", "last_event": -1e400}',
        '{"type": "resync", "last_event": NaN}',
        '{"type": "resync", "last_event": 99999999999999999999999999999999}',
        '{"type": "resync", "last_event": -5}',
        '{"type": "resync", "last_event": "' + "9" * 5000 + '"}',
        '{"type": "resync", "last_event": {"$text": "\\u0000"}}',
        '{"type": "resync", "last_event": [1]}',
        '{"type": "resync", "last_event": true, "reconnect": {"x": 1}}',
    ],
    ids=["inf", "minus_inf", "nan", "huge", "negative", "5000_digits", "object", "list", "bool"],
)
async def test_a_resync_with_an_insane_cursor_is_answered_as_from_the_start(org, agent, operator, frame):
    task = await database_sync_to_async(task_create)(org=org, actor="t", title="t", agent="builder", input=SAFE_PLAN)
    communicator = await connect(f"/ws/tasks/{task.pk}/", operator)
    try:
        await communicator.send_to(text_data=frame)
        received = await receive_until(communicator, lambda m: f'id="task-{task.pk}"' in m)
        assert len(received) == 1  # the consumer is alive and redrew the page from saved state
    finally:
        await communicator.disconnect()


async def test_a_frame_nested_past_the_recursion_limit_is_ignored(org, agent, operator):
    task = await database_sync_to_async(task_create)(org=org, actor="t", title="t", agent="builder", input=SAFE_PLAN)
    communicator = await subscribed(f"/ws/tasks/{task.pk}/", operator)
    try:
        await communicator.send_to(text_data="[" * 200_000 + "]" * 200_000)
        await communicator.send_to(bytes_data=b"\xff\x00")
        await communicator.send_json_to({"type": "resync", "last_event": 0})
        await receive_until(communicator, lambda m: f'id="task-{task.pk}"' in m)
    finally:
        await communicator.disconnect()


@pytest.mark.parametrize(
    "query",
    ["after=1e999", "after=" + "9" * 30, "q=a%00b", "q=%ff%fe", "state=" + "x" * 5000, "q=" + "y" * 50_000],
    ids=["float_after", "huge_after", "nul_search", "invalid_utf8", "long_state", "long_search"],
)
async def test_a_board_socket_with_an_odd_query_string_connects_and_draws(org, agent, operator, query):
    await database_sync_to_async(task_create)(org=org, actor="t", title="t", agent="builder", input=SAFE_PLAN)
    communicator = await connect(f"/ws/board/?{query}", operator)
    try:
        await communicator.send_to(text_data=json.dumps({"type": "resync", "last_event": 0}))
        await receive_until(communicator, lambda m: 'id="board-rows"' in m)
    finally:
        await communicator.disconnect()


async def test_a_flood_of_resyncs_is_closed_with_4429(org, agent, operator):
    task = await database_sync_to_async(task_create)(org=org, actor="t", title="t", agent="builder", input=SAFE_PLAN)
    communicator = await connect(f"/ws/tasks/{task.pk}/", operator)
    try:
        for _ in range(RESYNC_BURST + 20):
            await communicator.send_json_to({"type": "resync", "last_event": 0, "reconnect": True})
        answered = 0
        while True:
            message = await communicator.receive_output(timeout=5)
            if message["type"] == "websocket.close":
                assert message["code"] == CLOSE_THROTTLED
                break
            answered += not is_warnings(message.get("text", ""))  # the header's warnings are not a redraw
        assert answered == RESYNC_BURST  # the page's redraws up to the budget, then the close
    finally:
        await communicator.disconnect()


def test_the_resync_budget_refills_over_time():
    now = [0.0]
    budget = ResyncBudget(burst=2, refill=1.0, clock=lambda: now[0])
    assert budget.take() and budget.take() and not budget.take()
    now[0] += 1.0
    assert budget.take() and not budget.take()


@pytest.mark.parametrize(
    "raw, value",
    [(5, 5), (5.0, 5), ("7", 7), (True, 0), (-1, 0), (2**63, 0), (float("inf"), 0), ("1e3", 0), (None, 0), ("٣", 0)],
)
def test_a_cursor_is_a_sane_non_negative_64_bit_integer_or_0(raw, value):
    assert cursor_value(raw) == value
