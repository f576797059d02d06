"""`make run`'s demo, whole, through the real engine (real workers over HTTP, real crashes): every task ends
where the demo says it does, as the operator API reads it, and seeding again adds nothing."""

import io

import pytest
from rest_framework.test import APIClient

from recovery.demo import seed
from tasks.accounts import token_issue
from tasks.models import Task

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
    assert (op["action"], op["status"]) == ("pause", "finished")

    again = io.StringIO()
    second = seed(stdout=again, credentials=tmp_path / "credentials.txt")
    assert "already exist" in again.getvalue() and Task.objects.count() == len(EXPECTED)
    assert second["operator"][1] != first["operator"][1]  # the passwords are new on every start
    assert second["operator"][1] in (tmp_path / "credentials.txt").read_text()
