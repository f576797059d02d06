"""The board for triage: filters, urgency, saved views, selection, and the inbox count, through the test client."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from recovery.actions.commands import actions_settle
from recovery.models import RecoveryAction, SavedView
from tasks.models import Task
from tasks.services import run_request_stop, task_create, task_pause
from tests.console.board_scenarios import bulk_tasks, failed_task, interrupted_twice, row_ids
from tests.console.scenarios import SAFE_PLAN, running_task, unknown_outcome_action
from tests.factories import make_agent, make_member
from tests.helpers import visible_text

pytestmark = pytest.mark.django_db


@pytest.fixture
def triage(org, agent, operator):
    """One task in each state that matters for triage, made by the services."""
    make_agent(org, "reviewer")
    exhausted = unknown_outcome_action(org, title="t-exhausted")
    actions_settle(now=timezone.now() + timedelta(days=3))
    decision = unknown_outcome_action(org, title="t-decision")
    # Its wait began a day ago: the oldest decision waiting.
    old = unknown_outcome_action(org, title="t-old-decision")
    RecoveryAction.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=1))
    running, _ = running_task(org, title="t-running")
    idle = task_create(org=org, actor="t", title="t-idle", agent="reviewer", input=SAFE_PLAN)
    run_request_stop(actor=operator, run=idle.runs.get())
    blocked = task_create(org=org, actor="t", title="t-blocked", agent="builder", input=SAFE_PLAN)
    task_pause(actor="olive", task=blocked)
    return {
        "idle": idle.pk,
        "blocked": blocked.pk,
        "running": running.pk,
        "exhausted": exhausted.task_id,
        "decision": decision.task_id,
        "old": old.task_id,
    }


def test_urgency_puts_what_waits_on_a_person_first_and_the_longest_wait_first(login, operator, triage):
    ids = row_ids(login(operator).get("/?sort=urgency").text)
    t = triage
    # exhausted, then decisions (longest waiting first), then blocked, then idle, then running.
    assert ids.index(t["exhausted"]) < ids.index(t["old"]) < ids.index(t["decision"]) < ids.index(t["blocked"])
    assert ids.index(t["blocked"]) < ids.index(t["running"])
    assert ids.index(t["blocked"]) < ids.index(t["idle"]) < ids.index(t["running"])
    # The default order is still the last change.
    assert row_ids(login(operator).get("/").text)[0] == t["blocked"]


def test_filters_by_agent_recovery_owner_tool_and_age(login, operator, triage):
    client = login(operator)
    assert row_ids(client.get("/?agent=reviewer").text) == [triage["idle"]]
    assert sorted(row_ids(client.get("/?owner=role:admin").text)) == [triage["exhausted"]]
    assert sorted(row_ids(client.get("/?owner=role:operator").text)) == sorted([triage["decision"], triage["old"]])
    assert sorted(row_ids(client.get("/?tool=file_write").text)) == sorted(
        [triage["exhausted"], triage["decision"], triage["old"]]
    )
    assert row_ids(client.get("/?age=4h").text) == [triage["old"]]
    # Filters combine with the tab and each other, and the menus offer what waits now.
    content = client.get("/?state=needs_decision&tool=file_write&sort=urgency").text
    assert row_ids(content) == [triage["old"], triage["decision"]]
    assert '<option value="file_write" selected>file_write</option>' in content
    assert '<option value="role:admin">admins</option>' in content and '<option value="reviewer">' in content
    # A value the board does not know is dropped, not an error.
    assert client.get("/?age=forever&sort=sideways").status_code == 200


def test_each_row_says_why_and_for_an_unknown_outcome_which_tool_and_step(login, operator, triage):
    content = login(operator).get("/").text
    row = re.search(rf'<tr id="task-{triage["decision"]}".*?</tr>', content, re.S).group(0)
    assert "Unknown outcome: file_write, step 2." in visible_text(row)
    assert "waiting since" in visible_text(row)
    blocked = re.search(rf'<tr id="task-{triage["blocked"]}".*?</tr>', content, re.S).group(0)
    assert "Paused." in visible_text(blocked) and "last change" in visible_text(blocked)


def test_an_operator_gets_selection_and_a_viewer_none(login, operator, viewer, triage):
    content = login(operator).get("/").text
    assert 'id="bulk-form"' in content and content.count('name="ids"') == len(triage)
    assert "Select all 6 matching this filter" in content
    content = login(viewer).get("/").text
    assert 'id="bulk-form"' not in content and 'name="ids"' not in content and "select-page" not in content


def test_the_navigation_counts_what_waits_on_the_person(login, operator, viewer, admin_user, triage):
    def count(user):
        m = re.search(r'id="inbox-count"[^>]*>(\d*)', login(user).get("/workers/").text)
        return int(m.group(1) or 0)

    assert count(operator) == 2  # the two open decisions
    assert count(admin_user) == 3  # and the exhausted one, which waits for an admin
    assert count(viewer) == 0


def test_the_navigation_count_hides_another_persons_private_task_and_stops_at_99(
    login, org, agent, operator, admin_user, triage
):
    from recovery.triage.inbox import inbox_count
    from tests.console.board_scenarios import bulk_board

    oscar = make_member(org, "oscar", "operator")
    unknown_outcome_action(org, title="olive's own", private=True, creator=operator)
    assert inbox_count(operator) == 3  # olive sees her private task's decision
    assert inbox_count(oscar) == 2  # oscar does not: it is counted the way the board shows it
    assert inbox_count(admin_user) == 4
    bulk_board(org, agent, 450)  # every third task has an open action waiting on operators
    assert inbox_count(operator) == 100  # read no further than 99 + 1
    assert ">99+<" in login(operator).get("/workers/").text.replace('<span class="visually-hidden">', "<")


# --- saved views -------------------------------------------------------------------------


def test_a_saved_view_reopens_with_its_filter_and_belongs_to_its_person(login, org, operator, viewer, triage):
    client = login(operator, csrf=False)
    response = client.post(
        "/views/", {"name": "  Stuck writes ", "state": "needs_decision", "tool": "file_write", "sort": "urgency"}
    )
    assert response.status_code == 302
    view = SavedView.objects.get(user=operator)
    assert view.name == "Stuck writes" and view.params == {
        "state": "needs_decision",
        "tool": "file_write",
        "sort": "urgency",
    }
    board = client.get("/").text
    link = re.search(r'<a href="([^"]+)" class="view">Stuck writes</a>', board)
    assert link, "the view is listed on the board"
    reopened = client.get(link.group(1).replace("&amp;", "&"))
    assert row_ids(reopened.text) == [triage["old"], triage["decision"]]
    assert 'class="view active" aria-current="true">Stuck writes' in reopened.text
    # The same name replaces it; another person neither sees it nor can delete it.
    client.post("/views/", {"name": "Stuck writes", "state": "exhausted"})
    assert SavedView.objects.get(user=operator).params == {"state": "exhausted"}
    other = login(viewer)
    assert "Stuck writes" not in other.get("/").text
    assert other.post(f"/views/{view.pk}/delete/").status_code == 404
    assert client.post(f"/views/{view.pk}/delete/").status_code == 302
    assert not SavedView.objects.exists()


def test_a_view_needs_a_name_and_the_form_needs_its_token(login, operator, triage):
    response = login(operator).post("/views/", {"name": "   ", "state": "blocked"})
    assert response.status_code == 400 and "Give the view a name." in response.text
    assert login(operator, csrf=True).post("/views/", {"name": "x"}).status_code == 403
    assert not SavedView.objects.exists()


# --- selection: the board's form --------------------------------------------------------------


def test_select_all_matching_previews_every_matching_task_not_one_page(login, org, agent, operator):
    ids = bulk_tasks(org, agent, 70, title="idle")
    bulk_tasks(org, agent, 5, title="other")
    client = login(operator)
    board = client.get("/?q=idle").text
    assert row_ids(board).__len__() == 50 and "Select all 70 matching this filter" in board
    response = client.post(
        "/bulk/preview/", {"all_matching": "1", "filter_q": "idle", "action": "pause", "ids": [str(ids[0])]}
    )
    assert response.status_code == 302
    op_url = response["Location"]
    page = client.get(op_url).text
    assert "70 tasks" in page and "70 of 70 would be acted on" in visible_text(page)
    assert "Nothing has been done yet" in visible_text(page) or "nothing has been done yet" in visible_text(page)
    assert not Task.objects.filter(paused=True).exists()


def test_a_refused_preview_keeps_what_was_chosen_and_typed(login, org, agent, operator, triage):
    client = login(operator)
    response = client.post(
        "/bulk/preview/",
        {"action": "decide", "ids": [str(triage["decision"])], "note": "looked at the log", "filter_sort": "urgency"},
    )
    assert response.status_code == 400
    assert "`outcome` must be one of" in response.text
    assert "looked at the log</textarea>" in response.text
    assert f'value="{triage["decision"]}" form="bulk-form" aria-label="Select task #{triage["decision"]}" checked' in (
        response.text
    )
    none = client.post("/bulk/preview/", {"action": "pause"})
    assert none.status_code == 400 and "Choose at least one task" in none.text


def test_a_viewer_cannot_preview(login, viewer, triage):
    response = login(viewer).post("/bulk/preview/", {"action": "pause", "ids": [str(triage["idle"])]})
    assert response.status_code == 403


def test_a_stranger_cannot_select_another_organizations_task(login, other_org, triage):
    make_agent(other_org, "builder")
    gina = make_member(other_org, "gina", "operator")
    response = login(gina).post("/bulk/preview/", {"action": "pause", "ids": [str(triage["idle"])]})
    assert response.status_code == 404 or "No task #" in response.text
    assert response.status_code in (400, 404)


# --- follow-through, attempts, search (issue 20) ---------------------------------------------


def row_of(content: str, task_id: int) -> str:
    return visible_text(re.search(rf'<tr id="task-{task_id}".*?</tr>', content, re.S).group(0))


def test_needs_follow_through_lists_idle_tasks_whose_run_failed_or_whose_follow_ups_wait(login, org, operator, triage):
    from recovery.actions.followups import message_save

    failed, _ = failed_task(org, title="t-failed", error="disk full")
    written = task_create(org=org, actor="t", title="t-followup", agent="builder", input=SAFE_PLAN)
    run_request_stop(actor=operator, run=written.runs.get())
    message_save(user=operator, task=Task.objects.get(pk=written.pk), body="Use the Q3 numbers")
    client = login(operator)
    board = client.get("/?state=follow_through")
    assert board.status_code == 200
    assert sorted(row_ids(board.text)) == sorted([failed.pk, written.pk])
    assert 'aria-current="page">Needs follow-through</a>' in board.text
    # Each row says what it owes; the idle task nothing is owed on, and the running one, are not listed.
    assert "ended (it failed)" in row_of(board.text, failed.pk)
    assert "follow-up" in row_of(board.text, written.pk)
    assert triage["idle"] not in row_ids(board.text) and triage["running"] not in row_ids(board.text)


def test_the_attempts_column_is_filled_from_the_chain(login, org, agent, operator):
    exhausted = interrupted_twice(org, title="t-twice")
    decision = unknown_outcome_action(org, title="t-decision")
    running, _ = running_task(org, title="t-running")
    triage = {"decision": decision.task_id, "running": running.pk}
    client = login(operator)
    board = client.get("/").text
    twice = row_of(board, exhausted.pk)
    assert "Attempts 2 of 2 used" in twice
    assert 'title="Step 1 was interrupted twice in this chain' in re.search(
        rf'<tr id="task-{exhausted.pk}".*?</tr>', board, re.S
    ).group(0)
    assert "Attempts 0 of 2 used" in row_of(board, triage["decision"])
    assert "Attempts first run" in row_of(board, triage["running"])
    cells = re.findall(r'<td class="attempts">(.*?)</td>', board, re.S)
    assert cells and not any(visible_text(c).endswith("—") for c in cells)


def test_search_finds_a_run_id_an_error_and_a_tool_argument(login, org, operator, triage):
    failed, run = failed_task(org, title="quarterly numbers", error="[Errno 28] No space left on device")
    client = login(operator)
    assert failed.pk in row_ids(client.get("/", {"q": f"#{run.pk}"}).text)  # a task or a run with that id
    assert row_ids(client.get("/", {"q": f"run {run.pk}"}).text) == [failed.pk]
    assert row_ids(client.get("/", {"q": "no space left"}).text) == [failed.pk]
    assert row_ids(client.get("/", {"q": "q3-summary"}).text) == [failed.pk]
    assert row_ids(client.get("/", {"q": "nothing like this"}).text) == []
    # Search combines with the tab.
    assert row_ids(client.get("/", {"q": "q3-summary", "state": "follow_through"}).text) == [failed.pk]
    assert row_ids(client.get("/", {"q": "q3-summary", "state": "running"}).text) == []


def test_a_bulk_preview_of_the_follow_through_view_names_it(login, org, agent, operator):
    failed_task(org, title="t-failed", error="disk full")
    client = login(operator)
    response = client.post("/bulk/preview/", {"all_matching": "1", "filter_state": "follow_through", "action": "pause"})
    assert response.status_code == 302, response.content
    page = visible_text(client.get(response["Location"]).text)
    assert "state needs follow-through" in page and "1 of 1 would be acted on" in page
