"""Console pages through the Django test client: sign-in, board, task and run pages, inbox, settings, admin."""

import html
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from recovery.actions.commands import action_decide, actions_settle
from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from recovery.triage.board import board_count
from recovery.triage.filters import BoardFilter
from tasks.models import Run, Step, Task
from tasks.services import run_finish, step_complete, step_dispatch, step_plan, task_create, task_pause
from tests.console.board_scenarios import bulk_tasks, row_ids
from tests.console.scenarios import SAFE_PLAN, claim, running_task, unknown_outcome_action
from tests.factories import make_member

pytestmark = pytest.mark.django_db

NEXT_LINK = re.compile(r'<a href="([^"]*cursor=[^"]*)">Older tasks →</a>')


# --- sign-in -------------------------------------------------------------------------


def test_every_page_and_card_action_requires_sign_in(client, org, agent, operator):
    action = unknown_outcome_action(org)
    pages = [
        "/",
        "/?state=needs_decision",
        "/inbox/",
        f"/tasks/{action.task_id}/",
        f"/agents/builder/runs/{action.run_id}/",
        "/settings/tools/",
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/?next="), url
    posts = [
        f"/actions/{action.pk}/retry/",
        f"/actions/{action.pk}/decision/",
        f"/actions/{action.pk}/cancel/",
        f"/tasks/{action.task_id}/pause/",
        f"/tasks/{action.task_id}/resume/",
        f"/runs/{action.run_id}/stop/",
    ]
    for url in posts:
        response = client.post(url, {"version": action.version, "outcome": "performed"})
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url
    action.refresh_from_db()
    assert action.status == "open" and action.version == 1 and action.attempts == 0


def test_sign_in_with_username_and_password(client, org, agent, operator):
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    assert 'name="username"' in page.text and 'name="password"' in page.text

    wrong = client.post("/accounts/login/", {"username": "olive", "password": "nope"})
    assert wrong.status_code == 200 and "didn't match" in wrong.text

    response = client.post("/accounts/login/", {"username": "olive", "password": "pw-12345678"})
    assert response.status_code == 302 and response["Location"] == "/"
    board = client.get("/")
    assert board.status_code == 200
    assert "olive" in board.text and "operator" in board.text


# --- the board -----------------------------------------------------------------------


def test_the_board_lists_only_the_users_organization(login, org, agent, operator, other_org, other_agent):
    mine = task_create(org=org, actor="t", title="ours to watch", agent="builder", input=SAFE_PLAN)
    theirs = task_create(org=other_org, actor="t", title="globex secret", agent="builder", input=SAFE_PLAN)
    content = login(operator).get("/").text
    assert "ours to watch" in content and "globex secret" not in content
    assert row_ids(content) == [mine.pk]
    assert theirs.pk not in row_ids(login(operator).get("/?state=all&q=globex").text)


@pytest.fixture
def states(org, agent):
    """One task in each board state, built through the services."""
    exhausted = unknown_outcome_action(org, title="t-exhausted")
    actions_settle(now=timezone.now() + timedelta(days=3))  # its due time passed
    exhausted.refresh_from_db()
    assert exhausted.status == "exhausted"
    decision = unknown_outcome_action(org, title="t-decision")
    blocked = task_create(org=org, actor="t", title="t-blocked", agent="builder", input=SAFE_PLAN)
    task_pause(actor="olive", task=blocked)
    running, _ = running_task(org, title="t-running")
    return {
        "exhausted": exhausted.task_id,
        "needs_decision": decision.task_id,
        "blocked": blocked.pk,
        "running": running.pk,
    }


def test_the_filter_tabs_show_the_tasks_in_each_state(login, operator, states):
    client = login(operator)
    for state, task_id in states.items():
        response = client.get(f"/?state={state}")
        assert response.status_code == 200
        assert row_ids(response.text) == [task_id], state
        assert 'aria-current="page"' in response.text
    assert sorted(row_ids(client.get("/?state=all").text)) == sorted(states.values())
    assert sorted(row_ids(client.get("/").text)) == sorted(states.values())
    # An unknown tab falls back to all.
    assert sorted(row_ids(client.get("/?state=bogus").text)) == sorted(states.values())
    content = client.get("/?state=needs_decision").text
    assert "Needs decision" in content and '<span class="count muted">1 task</span>' in content


def test_search_by_title_and_by_number(login, operator, states):
    client = login(operator)
    assert row_ids(client.get("/?q=t-decision").text) == [states["needs_decision"]]
    assert row_ids(client.get("/?q=BLOCKED").text) == [states["blocked"]]
    # "#N" finds task N, and the task whose run is N (ids are shared by the suite: which task that is varies).
    number = states["running"]
    by_run = set(Run.objects.filter(pk=number).values_list("task_id", flat=True))
    found = row_ids(client.get(f"/?q=%23{number}").text)
    assert number in found and set(found) == {number} | by_run
    assert row_ids(client.get("/?state=running&q=t-decision").text) == []
    empty = client.get("/?q=nothing-like-this")
    assert row_ids(empty.text) == [] and "nothing-like-this" in empty.text


def test_the_search_keeps_the_tab_and_the_tabs_keep_the_search(login, operator, states):
    content = login(operator).get("/?state=needs_decision&q=t-").text
    assert 'name="state" value="needs_decision"' in content
    assert re.search(r'href="/\?state=running&(amp;)?q=t-"', content)


def follow_pages(client, url: str) -> list[list[int]]:
    pages = []
    while url:
        response = client.get(url)
        assert response.status_code == 200
        pages.append(row_ids(response.text))
        match = NEXT_LINK.search(response.text)
        url = "/" + html.unescape(match.group(1)).lstrip("/") if match else None
        assert len(pages) < 10, "the pager does not end"
    return pages


def test_fifty_tasks_fit_on_one_page_without_a_pager(login, org, agent, operator):
    ids = bulk_tasks(org, agent, 50)
    response = login(operator).get("/")
    assert sorted(row_ids(response.text)) == sorted(ids)
    assert "Older tasks" not in response.text
    assert '<span class="count muted">50 tasks</span>' in response.text


def test_keyset_pages_show_every_task_exactly_once(login, org, agent, operator):
    ids = bulk_tasks(org, agent, 123)
    pages = follow_pages(login(operator), "/")
    assert [len(p) for p in pages] == [50, 50, 23]
    seen = [i for page in pages for i in page]
    assert len(seen) == len(set(seen)) == 123 and set(seen) == set(ids)


def test_keyset_pages_break_ties_of_the_same_update_time(login, org, agent, operator):
    ids = bulk_tasks(org, agent, 75)
    Task.objects.filter(pk__in=ids).update(updated_at=timezone.now())  # every row ties on updated_at
    pages = follow_pages(login(operator), "/?state=all")
    seen = [i for page in pages for i in page]
    assert [len(p) for p in pages] == [50, 25]
    assert seen == sorted(ids, reverse=True)


def test_keyset_pages_keep_the_filter_and_search(login, org, agent, operator):
    bulk_tasks(org, agent, 60, title="alpha")
    bulk_tasks(org, agent, 10, title="beta")
    pages = follow_pages(login(operator), "/?state=all&q=alpha")
    assert [len(p) for p in pages] == [50, 10]
    titles = set(Task.objects.filter(pk__in=[i for p in pages for i in p]).values_list("title", flat=True))
    assert all(t.startswith("alpha") for t in titles)


def test_the_count_is_capped(login, org, agent, operator, monkeypatch):
    bulk_tasks(org, agent, 7)
    assert board_count(operator, BoardFilter(), cap=5) == 6
    assert board_count(operator, BoardFilter(), cap=7) == 7
    assert board_count(operator, BoardFilter(), cap=100) == 7
    client = login(operator)
    assert '<span class="count muted">7 tasks</span>' in client.get("/").text
    monkeypatch.setattr("console.views.triage.COUNT_CAP", 5)
    content = client.get("/").text
    assert '<span class="count muted">5+ tasks</span>' in content and "7 tasks" not in content


def test_the_board_builds_its_matching_tasks_once_for_its_page_and_its_count(login, org, agent, operator, monkeypatch):
    """The page and the count filter the same queryset, built once (building one costs milliseconds of Python)."""
    from recovery.triage import board as board_reads

    alpha = bulk_tasks(org, agent, 3, title="alpha")
    bulk_tasks(org, agent, 2, title="beta")
    built, real = [], board_reads.board_queryset

    def counted(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr("console.views.triage.board_queryset", counted)
    monkeypatch.setattr("recovery.triage.board.board_queryset", counted)
    content = login(operator).get("/?state=all&q=alpha").text
    assert sorted(row_ids(content)) == sorted(alpha)
    assert '<span class="count muted">3 tasks</span>' in content
    assert len(built) == 1


def test_the_count_says_one_task(login, org, agent, operator):
    bulk_tasks(org, agent, 1)
    assert '<span class="count muted">1 task</span>' in login(operator).get("/").text


# --- privacy and organizations -------------------------------------------------------


def test_a_private_task_is_hidden_from_a_non_creator_who_is_not_an_admin(
    login, org, agent, operator, viewer, admin_user
):
    other_operator = make_member(org, "otto", "operator")
    task, run = running_task(org, title="private notes", private=True, creator=operator)
    for user in (operator, admin_user):
        client = login(user)
        assert task.pk in row_ids(client.get("/").text), user
        assert client.get(f"/tasks/{task.pk}/").status_code == 200, user
        assert client.get(f"/agents/builder/runs/{run.pk}/").status_code == 200, user
    for user in (viewer, other_operator):
        client = login(user)
        assert "private notes" not in client.get("/").text, user
        assert client.get(f"/tasks/{task.pk}/").status_code == 404, user
        assert client.get(f"/agents/builder/runs/{run.pk}/").status_code == 404, user
        assert client.get(f"/?q=%23{task.pk}").text.count(f'id="task-{task.pk}"') == 0, user


def test_another_organizations_task_and_run_pages_are_404(login, org, agent, operator, other_org, other_agent):
    task, run = running_task(other_org, title="their job")
    client = login(operator)
    assert client.get(f"/tasks/{task.pk}/").status_code == 404
    assert client.get(f"/agents/builder/runs/{run.pk}/").status_code == 404
    assert client.get("/tasks/999999/").status_code == 404


# --- the task page -------------------------------------------------------------------


def test_the_task_page_shows_its_header_every_run_and_every_action(login, org, agent, operator):
    action = unknown_outcome_action(org)
    action_decide(
        action_id=action.pk,
        user=operator,
        version=action.version,
        outcome="not_performed",
        note="not on disk",
        accept_duplicate_risk=True,
    )
    runs = list(Run.objects.filter(task_id=action.task_id).order_by("id"))
    assert len(runs) == 2
    content = login(operator).get(f"/tasks/{action.task_id}/").text
    assert content.count(f'id="task-{action.task_id}"') == 1
    for run in runs:
        assert content.count(f'id="run-{run.pk}"') == 1
    assert len(re.findall(r'id="run-\d+"', content)) == 2
    assert content.count(f'id="action-{action.pk}"') == 1
    assert len(re.findall(r'id="action-\d+"', content)) == 1
    assert "write the report" in content and "Decision recorded: it did not happen" in content


def test_the_unknown_outcome_card_shows_the_exact_operation(login, org, agent, operator):
    action = unknown_outcome_action(org)
    dispatched = Step.objects.get(run_id=action.run_id, seq=2).dispatched_at
    card = re.search(
        rf'<article id="action-{action.pk}".*?</article>', login(operator).get(f"/tasks/{action.task_id}/").text, re.S
    ).group(0)
    assert "file_write" in card and "report.md" in card
    assert dispatched.isoformat() in card
    assert "It did not happen — run it again" in card and 'name="accept_duplicate_risk"' in card


def test_the_run_page_shows_steps_and_lineage(login, org, agent, operator):
    action = unknown_outcome_action(org)
    action_decide(
        action_id=action.pk,
        user=operator,
        version=action.version,
        outcome="not_performed",
        accept_duplicate_risk=True,
    )
    first = Run.objects.get(pk=action.run_id)
    second = Run.objects.get(continues=first)
    client = login(operator)

    response = client.get(f"/agents/builder/runs/{first.pk}/")
    assert response.status_code == 200
    content = response.text
    assert f'id="run-{first.pk}"' in content
    assert content.count('class="step ') == 2
    assert 'data-seq="1"' in content and 'data-seq="2"' in content
    assert "file_write" in content and "report.md" in content
    assert "first run of the task" in content
    # The continuation is only queued: the lineage says so, never "continued by".
    assert f'href="/agents/builder/runs/{second.pk}/"' in content
    assert f"continuation run #{second.pk} (queued)" in content and "continued by" not in content
    assert "Diagnosis" in content

    content = client.get(f"/agents/builder/runs/{second.pk}/").text
    assert f"continues run #{first.pk}" in content and f'href="/agents/builder/runs/{first.pk}/"' in content
    assert "first run of the task" not in content
    # Once a worker starts it, the first run's page and its card both say it continued.
    assert claim(second.task).pk == second.pk
    content = client.get(f"/agents/builder/runs/{first.pk}/").text
    assert content.count(f"continued by run #{second.pk}") == 2 and "(queued)" not in content
    # The run's agent is part of its address.
    assert client.get(f"/agents/someone-else/runs/{first.pk}/").status_code == 404


# --- the inbox -----------------------------------------------------------------------


def test_the_inbox_shows_live_actions_of_the_users_role_exhausted_first(
    login, org, agent, operator, viewer, admin_user
):
    exhausted = unknown_outcome_action(org, title="t-exhausted")
    actions_settle(now=timezone.now() + timedelta(days=3))
    exhausted.refresh_from_db()
    assert exhausted.status == "exhausted" and exhausted.recovery_owner == "role:admin"
    opened = unknown_outcome_action(org, title="t-open")
    decided = unknown_outcome_action(org, title="t-decided")
    action_decide(action_id=decided.pk, user=operator, version=decided.version, outcome="performed", note="it is there")
    decided.refresh_from_db()
    assert decided.status == "retrying"

    content = login(admin_user).get("/inbox/").text
    listed = [int(x) for x in re.findall(r'id="inbox-action-(\d+)"', content)]
    assert listed == [exhausted.pk, opened.pk]

    content = login(operator).get("/inbox/").text
    assert [int(x) for x in re.findall(r'id="inbox-action-(\d+)"', content)] == [opened.pk]
    assert "t-open" in content and "Needs decision" in content

    content = login(viewer).get("/inbox/").text
    assert "inbox-action-" not in content and "Nothing waits on you" in content


def test_the_inbox_shows_actions_owned_by_the_user_by_name(login, org, agent, viewer):
    action = unknown_outcome_action(org, title="for victor")
    RecoveryAction.objects.filter(pk=action.pk).update(recovery_owner="user:victor")
    content = login(viewer).get("/inbox/").text
    assert f'id="inbox-action-{action.pk}"' in content and "for victor" in content


def test_the_inbox_hides_other_organizations(login, org, agent, operator, other_org, other_agent):
    theirs = unknown_outcome_action(other_org, title="their trouble")
    content = login(operator).get("/inbox/").text
    assert f"inbox-action-{theirs.pk}" not in content and "their trouble" not in content


# --- Django admin --------------------------------------------------------------------


@pytest.fixture
def superuser(db):
    return get_user_model().objects.create_superuser("root", "root@example.com", "pw-12345678")


def test_the_django_admin_lists_tasks_runs_steps_and_actions(client, superuser, org, agent, operator):
    action = unknown_outcome_action(org)
    client.force_login(superuser)
    assert client.get("/admin/").status_code == 200
    for url in ("/admin/tasks/task/", "/admin/tasks/run/", "/admin/tasks/step/", "/admin/recovery/recoveryaction/"):
        response = client.get(url)
        assert response.status_code == 200, url
        assert 'id="result_list"' in response.text, url
    assert f"/admin/recovery/recoveryaction/{action.pk}/change/" in client.get("/admin/recovery/recoveryaction/").text


def test_a_run_change_page_shows_status_read_only(client, superuser, org, agent):
    _, run = running_task(org)
    client.force_login(superuser)
    response = client.get(f"/admin/tasks/run/{run.pk}/change/")
    assert response.status_code == 200
    assert 'name="status"' not in response.text
    assert re.search(r'field-status.*?<div class="readonly">Running</div>', response.text, re.S)


def test_reading_the_page_does_not_retire_an_action_whose_continuation_finished_the_task(login, org, agent, operator):
    """The continuation ran and closed the task before a supervisor pass: the retry worked, it was not stale."""
    action = unknown_outcome_action(org)
    action_decide(action_id=action.pk, user=operator, version=1, outcome="not_performed", accept_duplicate_risk=True)
    task = Task.objects.get(pk=action.task_id)
    continuation = claim(task, label="w1-b")
    worker = continuation.lease_worker
    for seq in (2, 3):
        spec = continuation.input["steps"][seq - 1]
        step_plan(worker=worker, run_id=continuation.pk, epoch=1, seq=seq, tool=spec["tool"], args=spec["args"])
        step_dispatch(worker=worker, run_id=continuation.pk, epoch=1, seq=seq)
        step_complete(worker=worker, run_id=continuation.pk, epoch=1, seq=seq, ok=True, result={"ok": True})
    run_finish(worker=worker, run_id=continuation.pk, epoch=1, status="succeeded")
    task.refresh_from_db()
    assert task.status == "done"

    content = login(operator).get(f"/tasks/{task.pk}/").text
    assert f"Continued in run #{continuation.pk}" in content
    action.refresh_from_db()
    assert action.status != "retired", action.resolution_note
    supervise_once()
    action.refresh_from_db()
    assert action.status == "resolved" and action.resolution == "continued"
