"""Idempotency-Key: the same key and body replays the first response; another body is a conflict."""

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tasks.models import Event, Run, Step, Task
from tests.factories import make_agent, make_member, make_org, user_token
from tests.helpers import claim, create_task, plan, snapshot

BODY = {"title": "once", "agent": "builder", "input": plan(("sleep", {"seconds": 0}))}


def keyed(client, path: str, body: dict | None, key: str):
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_the_same_key_and_body_creates_one_task_and_replays_its_response(api, agent):
    first = keyed(api, "/api/tasks/", BODY, "k-1")
    again = keyed(api, "/api/tasks/", BODY, "k-1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert Task.objects.count() == 1 and Run.objects.count() == 1
    assert Event.objects.filter(kind="task_created").count() == 1


def test_the_same_key_with_another_body_is_a_conflict_and_creates_nothing(api, agent):
    assert keyed(api, "/api/tasks/", BODY, "k-1").status_code == 201
    r = keyed(api, "/api/tasks/", {**BODY, "title": "twice"}, "k-1")
    assert r.status_code == 409 and r.json()["code"] == "idempotency_conflict"
    assert list(Task.objects.values_list("title", flat=True)) == ["once"]


def test_a_key_belongs_to_its_principal(api, agent, org, make_token_client):
    other = make_token_client(user_token(make_member(org, "otto", "operator")))
    a = keyed(api, "/api/tasks/", BODY, "shared-key")
    b = keyed(other, "/api/tasks/", BODY, "shared-key")
    assert a.status_code == b.status_code == 201
    assert a.json()["id"] != b.json()["id"]
    assert Task.objects.count() == 2


@pytest.fixture
def held(api, agent, runner):
    create_task(api, steps=plan(("sleep", {"seconds": 0}), ("sleep", {"seconds": 1})))
    c = claim(runner)
    return c["run"], c["lease_epoch"]


def test_a_runner_write_with_the_same_key_is_replayed_and_another_body_conflicts(runner, held):
    rid, epoch = held
    path = f"/api/runner/runs/{rid}/steps/"
    step1 = {"epoch": epoch, "seq": 1, "tool": "sleep", "args": {"seconds": 0}}
    first = keyed(runner, path, step1, "plan-1")
    again = keyed(runner, path, step1, "plan-1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert Step.objects.filter(run_id=rid).count() == 1
    assert Event.objects.filter(run_id=rid, kind="step_planned").count() == 1

    before = snapshot(rid)
    r = keyed(runner, path, {**step1, "seq": 2, "args": {"seconds": 1}}, "plan-1")
    assert r.status_code == 409 and r.json()["code"] == "idempotency_conflict"
    assert snapshot(rid) == before


@pytest.mark.parametrize("tool", ["sleep", "file_write"])  # PostgreSQL's one-statement path, and the general one
def test_a_repeated_complete_with_another_outcome_is_a_conflict_and_the_first_stands(api, agent, runner, tool):
    """A step's outcome is recorded once. Repeating `complete` with the same outcome (a retry without its key)
    returns it again; with another one it is 409 idempotency_conflict, saying what is saved, so the worker
    learns that its second answer was not kept (it was 200 and silently kept the first)."""
    args = {"seconds": 0} if tool == "sleep" else {"path": "a.md", "content": "x"}
    create_task(api, steps=plan((tool, args)))
    c = claim(runner)
    rid, epoch = c["run"], c["lease_epoch"]
    base = f"/api/runner/runs/{rid}/steps/"
    assert runner.post(base, {"epoch": epoch, "seq": 1, "tool": tool, "args": args}, format="json").status_code == 201
    assert runner.post(f"{base}1/dispatch/", {"epoch": epoch}, format="json").status_code == 200
    path = f"{base}1/complete/"
    first = {"epoch": epoch, "ok": True, "result": {"n": 1}}
    assert keyed(runner, path, first, "complete-1").json()["phase"] == "completed"
    assert keyed(runner, path, first, "complete-2").status_code == 200  # the same outcome again: the same answer
    before = snapshot(rid)
    for other in (
        {**first, "result": {"n": 2}},
        {**first, "ok": False, "result": None, "error": "it broke"},
        {**first, "usage": 7},
    ):
        r = keyed(runner, path, other, f"complete-{other}")
        assert r.status_code == 409, r.content
        assert r.json()["code"] == "idempotency_conflict" and r.json()["phase"] == "completed"
        assert "already" in r.json()["detail"]
        r = runner.post(path, other, format="json")  # without a key, the same
        assert r.status_code == 409 and r.json()["code"] == "idempotency_conflict"
    assert snapshot(rid) == before
    step = Step.objects.get(run_id=rid, seq=1)
    assert (step.phase, step.result, step.usage) == ("completed", {"n": 1}, 1)
    # The same key keeps its meaning: its own body replays, another body conflicts.
    assert keyed(runner, path, first, "complete-1").headers["Idempotent-Replayed"] == "true"
    assert keyed(runner, path, {**first, "result": {"n": 3}}, "complete-1").json()["code"] == "idempotency_conflict"


def test_stop_with_the_same_key_is_replayed_and_asks_once(api, held):
    rid, _ = held
    first = keyed(api, f"/api/runs/{rid}/stop/", None, "stop-1")
    again = keyed(api, f"/api/runs/{rid}/stop/", None, "stop-1")
    assert first.status_code == again.status_code == 200
    assert first.json()["status"] == "stopping" and again.json() == first.json()
    assert Event.objects.filter(run_id=rid, kind="run_stop_requested").count() == 1


def test_a_stop_key_reused_for_another_run_conflicts_and_stops_nothing(api, agent, held):
    rid, _ = held
    queued = create_task(api, title="other", steps=plan(("sleep", {"seconds": 0})))["current_run"]
    assert keyed(api, f"/api/runs/{rid}/stop/", None, "stop-1").status_code == 200
    before = snapshot(queued)
    r = keyed(api, f"/api/runs/{queued}/stop/", None, "stop-1")
    assert r.status_code == 409 and r.json()["code"] == "idempotency_conflict"
    assert snapshot(queued) == before
    assert Run.objects.get(pk=queued).status == "queued"


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_key_create_one_task():
    org = make_org("acme")
    make_agent(org, "builder")
    key = user_token(make_member(org, "olive", "operator"))
    threads_n = 6
    barrier = threading.Barrier(threads_n)
    responses = []
    errors = []

    def post():
        try:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
            barrier.wait(timeout=10)
            r = keyed(client, "/api/tasks/", BODY, "race-1")
            responses.append((r.status_code, r.json()))
        except Exception as exc:  # surfaced below: a thread's failure must fail the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=post) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert errors == []
    assert len(responses) == threads_n
    assert {status for status, _ in responses} == {201}
    assert len({body["id"] for _, body in responses}) == 1
    assert Task.objects.count() == 1 and Run.objects.count() == 1
    assert Event.objects.filter(kind="task_created").count() == 1
