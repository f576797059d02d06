"""The runner API: claims, fenced writes, step phases, finish."""

import pytest

from tasks.models import Run
from tests.helpers import claim, create_task, plan


@pytest.fixture
def task(api, agent):
    return create_task(api, steps=plan(("file_read", {"path": "a"}), ("sleep", {"seconds": 0})))


def test_claim_leases_the_queued_run_and_returns_its_plan(runner, task):
    c = claim(runner)
    assert c["run"] == task["current_run"]
    assert c["lease_epoch"] == 1
    assert c["input"]["steps"][0]["tool"] == "file_read"
    assert c["reused"] == [] and c["messages"] == []
    run = Run.objects.get(pk=c["run"])
    assert run.status == "running" and run.lease_owner.startswith("w1/")
    assert claim(runner) is None  # nothing else queued: 204


def test_a_step_goes_planned_dispatched_completed_and_the_run_finishes(runner, task, api):
    c = claim(runner)
    rid, epoch = c["run"], c["lease_epoch"]
    r = runner.post(
        f"/api/runner/runs/{rid}/steps/",
        {"epoch": epoch, "seq": 1, "tool": "file_read", "args": {"path": "a"}},
        format="json",
    )
    assert r.status_code == 201 and r.json() == {"seq": 1, "phase": "planned", "recovery_mode": "replay"}
    r = runner.post(f"/api/runner/runs/{rid}/steps/1/dispatch/", {"epoch": epoch}, format="json")
    assert r.json()["phase"] == "dispatched"
    r = runner.post(
        f"/api/runner/runs/{rid}/steps/1/complete/",
        {"epoch": epoch, "ok": True, "result": {"content": "x"}},
        format="json",
    )
    assert r.json() == {"seq": 1, "phase": "completed", "stop_requested": False}
    r = runner.post(f"/api/runner/runs/{rid}/finish/", {"epoch": epoch, "status": "succeeded"}, format="json")
    # Step 2 of the plan never ran: the run cannot claim success.
    assert r.status_code == 409 and r.json()["code"] == "not_eligible"
    for path in ("steps/", "steps/2/dispatch/", "steps/2/complete/"):
        body = {"epoch": epoch, "seq": 2, "tool": "sleep", "args": {"seconds": 0}, "ok": True}
        assert runner.post(f"/api/runner/runs/{rid}/{path}", body, format="json").status_code in (200, 201)
    r = runner.post(f"/api/runner/runs/{rid}/finish/", {"epoch": epoch, "status": "succeeded"}, format="json")
    assert r.status_code == 200 and r.json()["status"] == "succeeded"
    detail = api.get(f"/api/tasks/{task['id']}/").json()
    assert detail["status"] == "done" and detail["state"] == "done" and detail["budget_used"] == 2
