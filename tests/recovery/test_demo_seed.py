"""`make run`'s demo, whole, through the real engine (real workers over HTTP, real crashes): every task ends
where the demo says it does, as the operator API reads it, and seeding again adds nothing."""

import io

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from recovery.demo import seed
from recovery.models import RecoveryAction
from tasks.accounts import token_issue
from tasks.models import Run, Task

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EXPECTED = {
    "Write the release notes": "done",
    "Summarise the incident log": "done",
    "Send the weekly digests": "done",
    "Post the release to the partner webhooks": "needs_decision",
    "Publish the pricing page": "needs_decision",
    "Migrate the billing webhooks": "exhausted",
    "Refactor the importer": "blocked",  # paused after the Stop
    "Draft the changelog": "needs_decision",
    "Publish the release bundle": "needs_decision",
    "Remind the overdue customers": "needs_decision",  # pydantic-ai: killed in a notify call
    "Summarise the support tickets": "done",  # pydantic-ai: stopped, a follow-up, answered
    "Raise the API rate limits": "needs_decision",  # pydantic-ai: its replay diverged
    "Sync the CRM export": "queued",  # its retry waits for the live worker
    "Nightly dependency audit": "queued",
    "Rebuild the search index, shard 1 of 2": "blocked",  # paused by one bulk operation
    "Rebuild the search index, shard 2 of 2": "blocked",
}


def test_the_whole_demo_reaches_the_states_it_announces_and_a_second_seed_adds_nothing(tmp_path):
    out = io.StringIO()
    first = seed(stdout=out, credentials=tmp_path / "credentials.txt")
    assert sorted(first) == ["admin", "operator", "viewer"]
    said = out.getvalue()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token_issue(username='operator')}")
    body = api.get("/api/tasks/?state=all").json()
    states = {t["title"]: t["state"] for t in body["results"]}
    for title in EXPECTED:
        assert f"{title!r}" in said  # the demo said what it made
    assert states == EXPECTED
    importer = next(t for t in body["results"] if t["title"] == "Refactor the importer")
    messages = api.get(f"/api/tasks/{importer['id']}/").json()["messages"]
    assert [m["status"] for m in messages] == ["waiting"]  # the follow-up after the Stop waits, undelivered
    (op,) = api.get("/api/bulk/").json()["results"]
    the_pydantic_ai_agents_stand_where_the_demo_says(api, {t["title"]: t["id"] for t in body["results"]})
    assert (op["action"], op["status"]) == ("pause", "finished")

    again = io.StringIO()
    second = seed(stdout=again, credentials=tmp_path / "credentials.txt")
    assert "already exist" in again.getvalue() and Task.objects.count() == len(EXPECTED)
    assert second["operator"][1] != first["operator"][1]  # the passwords are new on every start
    assert second["operator"][1] in (tmp_path / "credentials.txt").read_text()


def the_pydantic_ai_agents_stand_where_the_demo_says(api, ids):
    # Killed during its notify call (the reminder): an unknown outcome waits for a person, on an agent run whose
    # page reads as its conversation.
    courier = Task.objects.get(pk=ids["Remind the overdue customers"])
    (action,) = RecoveryAction.objects.filter(task=courier, status="open")
    assert action.kind == "unknown_outcome" and action.run.kind == "agent"
    step = action.run.steps.get(seq=action.seq)
    assert (step.tool, step.recovery_mode, step.phase) == ("reminder_send", "notify", "dispatched")
    assert list(action.run.steps.order_by("seq").values_list("tool", flat=True)) == [
        "model",
        "invoices_read",
        "model",
        "reminder_send",
    ]
    page = Client()
    page.force_login(get_user_model().objects.get(username="operator"))
    html = page.get(f"/agents/courier/runs/{action.run_id}/").content.decode()
    assert "The conversation of run" in html
    assert "2 invoices are overdue. I remind Ana about invoice INV-101 (EUR 40)." in html  # why it sent

    # Stopped by a person, then a follow-up: the continuation replays what was saved and its output answers it.
    analyst = Task.objects.get(pk=ids["Summarise the support tickets"])
    first, second = Run.objects.filter(task=analyst).order_by("id")
    assert (first.status, first.stop_reason, second.status) == ("stopped", "stop", "succeeded")
    assert second.continues_id == first.pk
    question = "Which customer should support call first?"
    assert f'You asked: "{question}" Ana first' in second.output
    (message,) = api.get(f"/api/tasks/{analyst.pk}/").json()["messages"]
    assert (message["body"], message["status"]) == (question, "read")
    assert second.steps.filter(reused_from__isnull=False).count() == first.steps.count()

    # Killed in a call safe to replay, continued automatically by an agent now given other instructions: the
    # replay took another path, the run failed `diverged` and a diverged action waits.
    deployer = Task.objects.get(pk=ids["Raise the API rate limits"])
    last = Run.objects.filter(task=deployer).order_by("id").last()
    assert (last.status, last.error_code) == ("failed", "diverged")
    assert RecoveryAction.objects.filter(run=last, kind="diverged", status="open").exists()
