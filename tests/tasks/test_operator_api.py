"""The operator API: organization and privacy boundaries, task creation, lists, detail shapes, Stop, events."""

from pathlib import Path

import pytest
import yaml

from tasks.models import Event, Run, Task
from tests.factories import make_agent, make_member, user_token
from tests.helpers import claim, create_task, plan, snapshot

PLAN = plan(("sleep", {"seconds": 0}))


def runner_post(runner, run_id: int, path: str, body: dict):
    return runner.post(f"/api/runner/runs/{run_id}/{path}", body, format="json")


def run_plan_to_the_end(runner, c: dict) -> None:
    """Plan, dispatch and complete every step of a claimed run's plan."""
    rid, epoch = c["run"], c["lease_epoch"]
    for seq, step in enumerate(c["input"]["steps"], start=1):
        body = {"epoch": epoch, "seq": seq, "tool": step["tool"], "args": step["args"]}
        assert runner_post(runner, rid, "steps/", body).status_code == 201
        assert runner_post(runner, rid, f"steps/{seq}/dispatch/", {"epoch": epoch}).status_code == 200
        r = runner_post(runner, rid, f"steps/{seq}/complete/", {"epoch": epoch, "ok": True, "result": {}})
        assert r.status_code == 200


def all_pages(client, url: str) -> list[list[dict]]:
    pages = []
    while url is not None:
        r = client.get(url)
        assert r.status_code == 200, r.content
        body = r.json()
        assert set(body) >= {"results", "next"}
        pages.append(body["results"])
        url = body["next"]
        assert len(pages) < 100, "`next` never became null"
    return pages


def assert_not_found(r, *secrets: str) -> None:
    assert r.status_code == 404, r.content
    assert r.json()["code"] == "not_found"
    text = r.content.decode()
    for secret in secrets:
        assert secret not in text


# --- organization boundary --------------------------------------------------------


@pytest.fixture
def foreign_task(other_org, make_token_client):
    """A task of another organization, with its queued run."""
    make_agent(other_org, "builder")
    gus = make_member(other_org, "gus", "admin")
    return create_task(make_token_client(user_token(gus)), title="globex merger memo", steps=PLAN)


def test_another_organizations_task_and_run_are_not_found(api, agent, foreign_task):
    rid = foreign_task["current_run"]
    assert_not_found(api.get(f"/api/tasks/{foreign_task['id']}/"), "globex merger memo", "gus")
    assert_not_found(api.get(f"/api/runs/{rid}/"), "globex merger memo", "sleep")
    before = snapshot(rid)
    assert_not_found(api.post(f"/api/runs/{rid}/stop/"), "globex merger memo")
    assert snapshot(rid) == before
    assert Run.objects.get(pk=rid).status == "queued"
    assert foreign_task["id"] not in [t["id"] for t in api.get("/api/tasks/").json()["results"]]


def test_another_organizations_task_is_not_found_even_for_an_admin(admin_user, foreign_task, make_token_client):
    client = make_token_client(user_token(admin_user))
    assert_not_found(client.get(f"/api/tasks/{foreign_task['id']}/"), "globex merger memo")
    assert_not_found(client.post(f"/api/runs/{foreign_task['current_run']}/stop/"), "globex merger memo")


# --- private tasks -------------------------------------------------------------------


def test_a_private_task_is_seen_by_its_creator_and_admins_only(api, agent, org, admin_user, make_token_client):
    task = create_task(api, title="salary review", steps=PLAN, private=True)
    public = create_task(api, title="public work", steps=PLAN)
    other = make_token_client(user_token(make_member(org, "otto", "operator")))
    admin = make_token_client(user_token(admin_user))

    for client in (api, admin):
        assert client.get(f"/api/tasks/{task['id']}/").status_code == 200
        assert client.get(f"/api/runs/{task['current_run']}/").status_code == 200
        assert task["id"] in [t["id"] for t in client.get("/api/tasks/").json()["results"]]

    assert_not_found(other.get(f"/api/tasks/{task['id']}/"), "salary review")
    assert_not_found(other.get(f"/api/runs/{task['current_run']}/"), "salary review")
    assert_not_found(other.post(f"/api/runs/{task['current_run']}/stop/"), "salary review")
    assert Run.objects.get(pk=task["current_run"]).status == "queued"
    listed = [t["id"] for t in other.get("/api/tasks/?state=all").json()["results"]]
    assert public["id"] in listed and task["id"] not in listed
    assert [t["id"] for t in other.get("/api/tasks/?q=salary").json()["results"]] == []
    assert other.get(f"/api/events/?task={task['id']}").json()["results"] == []
    assert task["id"] not in {e["task"] for e in other.get("/api/events/?limit=1000").json()["results"]}
    assert task["id"] in {e["task"] for e in admin.get("/api/events/?limit=1000").json()["results"]}


# --- creating tasks --------------------------------------------------------------------

INVALID_BODIES = {
    "no_title": {"agent": "builder", "input": PLAN},
    "blank_title": {"title": "   ", "agent": "builder", "input": PLAN},
    "no_agent": {"title": "t", "input": PLAN},
    "unknown_agent": {"title": "t", "agent": "nobody", "input": PLAN},
    "no_input": {"title": "t", "agent": "builder"},
    "input_without_steps": {"title": "t", "agent": "builder", "input": {"plan": []}},
    "steps_not_a_list": {"title": "t", "agent": "builder", "input": {"steps": "sleep"}},
    "step_without_tool": {"title": "t", "agent": "builder", "input": {"steps": [{"args": {}}]}},
    "args_not_an_object": {"title": "t", "agent": "builder", "input": {"steps": [{"tool": "sleep", "args": [0]}]}},
    "negative_budget": {"title": "t", "agent": "builder", "input": PLAN, "budget_limit": -1},
}


def counts() -> tuple[int, int, int]:
    return Task.objects.count(), Run.objects.count(), Event.objects.count()


@pytest.mark.parametrize("body", INVALID_BODIES.values(), ids=INVALID_BODIES.keys())
def test_an_invalid_task_is_refused_and_nothing_is_written(api, agent, body):
    before = counts()
    r = api.post("/api/tasks/", body, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["code"] == "invalid"
    assert counts() == before


def test_a_parent_in_another_organization_is_refused_without_leaking_it(api, agent, foreign_task):
    """A referenced id is resolved under the caller's visibility: another organization's task is 404, exactly
    as a task that does not exist (tests/tasks/test_references.py has the private-task case)."""
    before = counts()
    r = api.post(
        "/api/tasks/", {"title": "t", "agent": "builder", "input": PLAN, "parent": foreign_task["id"]}, format="json"
    )
    missing = api.post(
        "/api/tasks/", {"title": "t", "agent": "builder", "input": PLAN, "parent": 999_999}, format="json"
    )
    assert r.status_code == missing.status_code == 404 and r.json()["code"] == "not_found"
    assert r.json()["detail"].replace(str(foreign_task["id"]), "N") == missing.json()["detail"].replace("999999", "N")
    assert "globex merger memo" not in r.content.decode()
    assert counts() == before


def test_a_viewer_cannot_create_a_task(agent, viewer, make_token_client):
    before = counts()
    r = make_token_client(user_token(viewer)).post(
        "/api/tasks/", {"title": "t", "agent": "builder", "input": PLAN}, format="json"
    )
    assert r.status_code == 403 and r.json()["code"] == "forbidden"
    assert counts() == before


def test_a_created_task_has_every_documented_field(api, agent):
    task = create_task(api, title="ship it", steps=PLAN, budget_limit=5, export_destination="s3://bucket/out")
    detail = api.get(f"/api/tasks/{task['id']}/")
    assert detail.status_code == 200
    d = detail.json()
    assert d["id"] == task["id"] and d["title"] == "ship it"
    assert d["state"] == "queued"
    assert d["paused"] is False
    assert d["budget_limit"] == 5 and d["budget_used"] == 0
    assert d["runs"] == [d["current_run"]] and d["current_run"] == task["current_run"]
    assert Run.objects.get(pk=d["current_run"]).status == "queued"
    assert d["actions"] == [] and d["messages"] == []
    assert d["export_destination"] == "s3://bucket/out"
    workspace = Path(d["workspace"])
    assert workspace.is_absolute() and workspace.is_dir()


# --- lists -------------------------------------------------------------------------------


def test_the_task_list_pages_through_every_task_once_newest_first(api, agent):
    ids = [create_task(api, title=f"task {i}", steps=PLAN)["id"] for i in range(7)]
    pages = all_pages(api, "/api/tasks/?limit=3")
    assert [len(p) for p in pages] == [3, 3, 1]
    seen = [t["id"] for page in pages for t in page]
    assert seen == sorted(ids, reverse=True)
    assert all({"state", "current_run", "actions"} <= set(t) for page in pages for t in page)


def test_the_task_list_without_parameters_is_paged_too(api, agent):
    ids = [create_task(api, title=f"task {i}", steps=PLAN)["id"] for i in range(53)]
    pages = all_pages(api, "/api/tasks/")
    assert len(pages) > 1
    assert [t["id"] for page in pages for t in page] == ids[::-1]


def test_the_state_filter_follows_a_run_from_claim_to_success(api, agent, runner):
    first = create_task(api, title="first", steps=PLAN)
    c = claim(runner)
    assert c["task"] == first["id"]
    second = create_task(api, title="second", steps=PLAN)

    def listed(state):
        return [t["id"] for t in api.get(f"/api/tasks/?state={state}").json()["results"]]

    assert listed("running") == [first["id"]]
    assert listed("queued") == [second["id"]]
    assert listed("done") == []
    assert listed("all") == [second["id"], first["id"]]
    assert [t["state"] for t in api.get("/api/tasks/?state=running").json()["results"]] == ["running"]

    run_plan_to_the_end(runner, c)
    r = runner_post(runner, c["run"], "finish/", {"epoch": c["lease_epoch"], "status": "succeeded"})
    assert r.status_code == 200 and r.json()["status"] == "succeeded"

    assert listed("done") == [first["id"]]
    assert listed("running") == []
    assert listed("all") == [second["id"], first["id"]]
    assert api.get("/api/tasks/?state=done").json()["results"][0]["state"] == "done"


def test_an_unknown_state_filter_is_invalid(api):
    r = api.get("/api/tasks/?state=sleeping")
    assert r.status_code == 400 and r.json()["code"] == "invalid"


def test_search_matches_titles_case_insensitively_and_ids(api, agent):
    alpha = create_task(api, title="Deploy alpha", steps=PLAN)
    create_task(api, title="Write docs", steps=PLAN)
    beta = create_task(api, title="re-deploy beta", steps=PLAN)
    found = [t["id"] for t in api.get("/api/tasks/?q=DEPLOY").json()["results"]]
    assert found == [beta["id"], alpha["id"]]
    assert [t["id"] for t in api.get(f"/api/tasks/?q={alpha['id']}").json()["results"]] == [alpha["id"]]
    assert api.get("/api/tasks/?q=nothing-like-this").json()["results"] == []


# --- runs ---------------------------------------------------------------------------------


def test_a_run_has_every_documented_field(api, agent, runner):
    task = create_task(api, steps=plan(("file_read", {"path": "a"}), ("file_write", {"path": "b", "content": "c"})))
    c = claim(runner)
    rid, epoch = c["run"], c["lease_epoch"]
    runner_post(runner, rid, "steps/", {"epoch": epoch, "seq": 1, "tool": "file_read", "args": {"path": "a"}})
    runner_post(runner, rid, "steps/1/dispatch/", {"epoch": epoch})
    runner_post(runner, rid, "steps/1/complete/", {"epoch": epoch, "ok": True, "result": {"content": "x"}})
    body = {"epoch": epoch, "seq": 2, "tool": "file_write", "args": {"path": "b", "content": "c"}}
    runner_post(runner, rid, "steps/", body)

    r = api.get(f"/api/runs/{rid}/")
    assert r.status_code == 200
    run = r.json()
    assert run["task"] == task["id"] and run["agent"] == "builder"
    assert run["status"] == "running" and run["attempt"] == 1
    assert run["continues"] is None and run["continued_by"] is None
    assert "error_code" in run and not run["error_code"]
    step_fields = ("seq", "parent_seq", "tool", "args", "phase", "recovery_mode", "result", "reused")
    assert [tuple(s[f] for f in step_fields) for s in run["steps"]] == [
        (1, None, "file_read", {"path": "a"}, "completed", "replay", {"content": "x"}, False),
        (2, None, "file_write", {"path": "b", "content": "c"}, "planned", "notify", None, False),
    ]
    assert all("error" in s and not s["error"] for s in run["steps"])
    assert not run["steps"][0]["error"] and not run["steps"][1]["error"]
    diagnosis = run["diagnosis"]
    assert set(diagnosis) >= {"disposition", "steps", "reasons"}
    assert diagnosis["disposition"] in ("auto_resumable", "needs_decision", "corrupt", "exhausted", "none")
    assert isinstance(diagnosis["steps"], list) and isinstance(diagnosis["reasons"], list)


def test_stopping_a_queued_run_stops_it_at_once(api, agent, runner):
    task = create_task(api, steps=PLAN)
    r = api.post(f"/api/runs/{task['current_run']}/stop/")
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "stopped"
    assert api.get(f"/api/runs/{task['current_run']}/").json()["status"] == "stopped"
    assert claim(runner) is None  # a stopped run is never claimed


def test_stopping_a_running_run_asks_the_worker_and_it_confirms(api, agent, runner):
    create_task(api, steps=plan(("sleep", {"seconds": 0}), ("sleep", {"seconds": 0})))
    c = claim(runner)
    rid, epoch = c["run"], c["lease_epoch"]
    assert (
        runner_post(
            runner, rid, "steps/", {"epoch": epoch, "seq": 1, "tool": "sleep", "args": {"seconds": 0}}
        ).status_code
        == 201
    )

    r = api.post(f"/api/runs/{rid}/stop/")
    assert r.status_code == 200 and r.json()["status"] == "stopping"

    hb = runner_post(runner, rid, "heartbeat/", {"epoch": epoch})
    assert hb.status_code == 200 and hb.json()["stop_requested"] is True
    before = snapshot(rid)
    r = runner_post(runner, rid, "steps/1/dispatch/", {"epoch": epoch})
    assert r.status_code == 409 and r.json()["code"] == "not_eligible"
    assert snapshot(rid) == before

    r = runner_post(runner, rid, "finish/", {"epoch": epoch, "status": "stopped"})
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "stopped" and r.json()["stop_receipt"]
    run = api.get(f"/api/runs/{rid}/").json()
    assert run["status"] == "stopped" and run["stop_receipt"]


def test_a_viewer_cannot_stop_a_run(api, agent, runner, viewer, make_token_client):
    task = create_task(api, steps=PLAN)
    claim(runner)
    before = snapshot(task["current_run"])
    r = make_token_client(user_token(viewer)).post(f"/api/runs/{task['current_run']}/stop/")
    assert r.status_code == 403 and r.json()["code"] == "forbidden"
    assert snapshot(task["current_run"]) == before


# --- events -------------------------------------------------------------------------------

EVENT_FIELDS = {"id", "kind", "task", "run", "actor", "payload", "created_at"}


def test_events_come_in_id_order_for_the_users_organization_only(api, agent, org, runner, foreign_task):
    task = create_task(api, title="mine", steps=PLAN)
    c = claim(runner)
    body = {"epoch": c["lease_epoch"], "seq": 1, "tool": "sleep", "args": {"seconds": 0}}
    runner_post(runner, c["run"], "steps/", body)

    events = [e for page in all_pages(api, "/api/events/?limit=3") for e in page]
    expected = list(Event.objects.filter(org=org).order_by("id").values_list("id", flat=True))
    assert [e["id"] for e in events] == expected
    assert all(set(e) >= EVENT_FIELDS for e in events)
    assert foreign_task["id"] not in {e["task"] for e in events}
    planned = next(e for e in events if e["kind"] == "step_planned")
    assert planned["task"] == task["id"] and planned["run"] == c["run"]
    assert planned["actor"] == "worker:w1" and planned["payload"]["seq"] == 1

    mine = api.get(f"/api/events/?task={task['id']}").json()
    assert mine["next"] is None
    assert [e["kind"] for e in mine["results"]] == ["task_created", "run_queued", "run_claimed", "step_planned"]

    after = mine["results"][1]["id"]
    later = api.get(f"/api/events/?after={after}&task={task['id']}").json()["results"]
    assert [e["kind"] for e in later] == ["run_claimed", "step_planned"]


def test_the_schema_is_an_openapi_3_document_listing_both_apis(api):
    r = api.get("/api/schema/")
    assert r.status_code == 200
    doc = yaml.safe_load(r.content)
    assert str(doc["openapi"]).startswith("3")
    assert {"/api/tasks/", "/api/runner/claim/"} <= set(doc["paths"])
