"""What the board is pushed on a (re)connect is what a reload of the same board draws, empty states included."""

import pytest

from console.live.snapshots import RECONNECT_NOTICE, board_snapshot, cursor_fragment, notice_fragment
from tasks.services import task_create
from tests.console.scenarios import SAFE_PLAN
from tests.helpers import outer_html, visible_text

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"q": "no such title"}, "No tasks match “no such title”."),
        ({"state": "exhausted"}, "No tasks in this view."),
        ({"state": "exhausted", "q": "zzz"}, "No tasks in this view match “zzz”."),
    ],
)
def test_an_empty_board_pushed_says_what_its_reload_says(client, operator, org, agent, params, said):
    task_create(org=org, actor="t", title="Write the notes", agent="builder", input=SAFE_PLAN)
    client.force_login(operator)
    reloaded = visible_text(outer_html(client.get("/", params).content.decode(), "board-rows"))
    pushed = visible_text(board_snapshot(operator, filters=params))
    assert said in reloaded
    assert pushed == reloaded


def test_a_pushed_board_swaps_its_rows_out_of_band_from_a_template():
    html = cursor_fragment(42) + notice_fragment()
    assert 'data-last-event="42"' in html and 'hx-swap-oob="true"' in html
    assert RECONNECT_NOTICE in html
