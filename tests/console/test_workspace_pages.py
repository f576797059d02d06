"""Workspace cards and pages: the panel, the repair controls with their confirmations, the run page, live parts."""

import pytest

from console.live.updates import parts_for, run_update, task_update
from recovery.supervisor.loop import supervise_once
from tests.helpers import outer_html, visible_text
from tests.recovery import engine as e
from tests.recovery.workdisk import crash_at, edit_by_hand, validation_action

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
PLAN = [
    ("file_write", {"path": "draft.md", "content": "first draft\n"}),
    ("sleep", {"seconds": 0}),
    ("file_write", {"path": "draft.md", "content": "final\n"}),
]


@pytest.fixture
def diverged(org, agent):
    task = e.start(org, PLAN)
    source = crash_at(e.first_run(task), 2)
    edit_by_hand(task, "draft.md", "first draft\nby hand\n")
    edit_by_hand(task, "todo.txt", "added\n")
    supervise_once()
    return task, source, validation_action(task)


def test_the_task_page_shows_the_panel_and_the_card_with_evidence_and_confirmations(diverged, client, admin_user):
    task, _, action = diverged
    client.force_login(admin_user)
    page = client.get(f"/tasks/{task.pk}/").content.decode()
    panel = visible_text(outer_html(page, f"workspace-{task.pk}"))
    assert "draft.md" in panel and "changed on disk" in panel and "todo.txt" in panel and "added on disk" in panel
    assert f"Workspace hold — Recovery action #{action.pk}" in panel
    assert "2 files; 2 differ from the manifest" in panel  # a count agrees with its verb
    card_html = outer_html(page, f"action-{action.pk}")
    card = visible_text(card_html)
    assert "Workspace changed — 2 files differ" in card
    assert "+by hand" in card_html  # the diff
    assert "the remaining plan changes it (step 3)" in card
    assert "Reconcile reads the workspace again" in card and "it holds draft.md" in card
    assert "adopts into the manifest the files only a person changed (todo.txt)" in card
    assert "Isolated reissue builds a fresh directory" in card
    assert "Confirm reconcile" in card and "Confirm isolated reissue" in card and "Open a repair task" in card
    assert (
        f'name="run" value="{action.run_id}"' in card_html and f'name="version" value="{action.version}"' in card_html
    )


def test_confirming_a_reconcile_answers_with_the_card_showing_its_actual_result(diverged, client, admin_user):
    _task, _, action = diverged
    client.force_login(admin_user)
    r = client.post(
        f"/actions/{action.pk}/repair/",
        {"version": action.version, "run": action.run_id, "repair": "reconcile"},
        **HX,
    )
    assert r.status_code == 200, r.content
    card = visible_text(r.content.decode())
    assert "Reconcile by ada" in card and "2 files checked, 1 adopted into the manifest, 1 held (draft.md" in card
    assert "held: step 3 of the remaining plan also changes it" in card
    assert "adopted (added on disk)" in card
    assert "Confirm isolated reissue" in card  # still open: the continuation waits for the held file
    # The same confirmation again is stale: it names the version it was drawn at.
    r = client.post(
        f"/actions/{action.pk}/repair/",
        {"version": action.version, "run": action.run_id, "repair": "reconcile"},
        **HX,
    )
    assert r.status_code == 409 and "out of date" in visible_text(r.content.decode())


def test_the_run_page_hosts_repair_controls_only_for_the_refused_run_while_its_action_is_live(
    diverged, client, admin_user, operator
):
    _task, source, action = diverged
    refused = action.run
    client.force_login(admin_user)
    page = client.get(f"/agents/builder/runs/{refused.pk}/").content.decode()
    section = outer_html(page, f"run-repair-{refused.pk}")
    assert "Confirm reconcile" in section and f"action-{action.pk}" in section
    assert "Workspace validation failed" in visible_text(page)
    other = client.get(f"/agents/builder/runs/{source.pk}/").content.decode()
    assert "Confirm reconcile" not in other and f"action-{action.pk}" not in other
    client.force_login(operator)
    as_operator = client.get(f"/agents/builder/runs/{refused.pk}/").content.decode()
    assert "Confirm reconcile" not in as_operator and "a workspace repair needs the admin role" in as_operator
    client.force_login(admin_user)
    client.post(
        f"/actions/{action.pk}/repair/", {"version": action.version, "run": refused.pk, "repair": "reissue"}, **HX
    )
    after = client.get(f"/agents/builder/runs/{refused.pk}/").content.decode()
    assert "Confirm reconcile" not in after and f"action-{action.pk}" not in outer_html(
        after, f"run-repair-{refused.pk}"
    )


def test_a_push_redraws_the_panel_the_card_and_the_run_page_section(diverged, admin_user):
    task, _, action = diverged
    refused = action.run
    assert "workspace" in parts_for({"action_resolved"}) and "workspace" in parts_for({"step_completed"})
    assert "workspace" not in parts_for({"step_dispatched"})
    from recovery.workspaces.repairs import action_repair

    action_repair(action_id=action.pk, user=admin_user, version=action.version, repair="reissue", run=refused.pk)
    pushed = task_update(task.pk, viewer=admin_user, run_ids=set(), new_run_ids=set(), kinds={"action_resolved"})
    panel = visible_text(outer_html(pushed, f"workspace-{task.pk}"))
    assert "Workspace hold" not in panel and "The workspace before an isolated reissue, kept as it was" in panel
    assert "Reissued by ada" in visible_text(outer_html(pushed, f"action-{action.pk}"))
    run_push = run_update(refused.pk, viewer=admin_user)
    assert f'id="run-repair-{refused.pk}"' in run_push and "Confirm" not in run_push


def test_the_held_copy_page_lists_what_it_keeps(diverged, client, admin_user):
    task, _, action = diverged
    from recovery.workspaces.repairs import action_repair

    action_repair(action_id=action.pk, user=admin_user, version=action.version, repair="reconcile")
    client.force_login(admin_user)
    page = client.get(f"/tasks/{task.pk}/").content.decode()
    from recovery.models import HeldCopy

    copy = HeldCopy.objects.get(task=task)
    assert f"/tasks/{task.pk}/workspace/?held={copy.pk}" in page
    held = visible_text(client.get(f"/tasks/{task.pk}/workspace/?held={copy.pk}").content.decode())
    assert "draft.md" in held and copy.path in held


def test_the_board_and_inbox_say_why(diverged, client, admin_user):
    _task, _, _action = diverged
    client.force_login(admin_user)
    board = visible_text(client.get("/").content.decode())
    assert "The workspace no longer matches what the checkpoints recorded" in board
    inbox = visible_text(client.get("/inbox/").content.decode())
    assert "The workspace no longer matches" in inbox
