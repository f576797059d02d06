"""The runner API: a step planned and dispatched in one request (`"dispatch": true` on plan)."""

import pytest

from tasks.models import Event, IdempotencyRecord, Run, Step
from tasks.services import run_request_stop
from tests.helpers import claim, create_task, plan


@pytest.fixture
def task(api, agent):
    return create_task(api, steps=plan(("file_read", {"path": "a"}), ("sleep", {"seconds": 0})))


def _plan(runner, rid, body, key=None):
    extra = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return runner.post(f"/api/runner/runs/{rid}/steps/", body, format="json", **extra)


@pytest.mark.parametrize("key", [None, "plan-and-dispatch-1"])
def test_a_step_is_planned_and_dispatched_in_one_request(runner, task, key):
    c = claim(runner)
    rid, epoch = c["run"], c["lease_epoch"]
    body = {"epoch": epoch, "seq": 1, "tool": "file_read", "args": {"path": "a"}, "dispatch": True}
    r = _plan(runner, rid, body, key)
    assert r.status_code == 201 and r.json() == {"seq": 1, "phase": "dispatched", "recovery_mode": "replay"}
    step = Step.objects.get(run_id=rid, seq=1)
    assert step.phase == "dispatched" and step.dispatch_epoch == epoch and step.planned_at and step.dispatched_at
    kinds = list(Event.objects.filter(run_id=rid).order_by("id").values_list("kind", flat=True))
    assert kinds[-2:] == ["step_planned", "step_dispatched"]
    if key:  # the same key and body: the first answer again, nothing more written
        again = _plan(runner, rid, body, key)
        assert again.json() == r.json() and again.headers["Idempotent-Replayed"] == "true"
        assert Event.objects.filter(run_id=rid).count() == len(kinds)
    r = runner.post(f"/api/runner/runs/{rid}/steps/1/complete/", {"epoch": epoch, "ok": True}, format="json")
    assert r.status_code == 200 and r.json()["phase"] == "completed"


def test_without_dispatch_a_plan_only_plans_as_before(runner, task):
    c = claim(runner)
    body = {"epoch": c["lease_epoch"], "seq": 1, "tool": "file_read", "args": {"path": "a"}, "dispatch": False}
    r = _plan(runner, c["run"], body)
    assert r.status_code == 201 and r.json()["phase"] == "planned"


@pytest.mark.parametrize("key", [None, "plan-and-dispatch-2"])
def test_a_stop_requested_refuses_both_and_leaves_nothing_planned(runner, task, operator, key):
    c = claim(runner)
    rid, epoch = c["run"], c["lease_epoch"]
    run_request_stop(actor=operator, run=Run.objects.get(pk=rid))
    body = {"epoch": epoch, "seq": 1, "tool": "file_read", "args": {"path": "a"}, "dispatch": True}
    r = _plan(runner, rid, body, key)
    assert r.status_code == 409 and r.json()["code"] == "not_eligible" and r.json()["reason"] == "stop_requested"
    # All or nothing: the state a crash before the plan would have left.
    assert not Step.objects.filter(run_id=rid).exists()
    assert not IdempotencyRecord.objects.filter(run_id=rid, key=key or "-").exists()


def test_a_stale_epoch_refuses_both(runner, task):
    c = claim(runner)
    body = {"epoch": c["lease_epoch"] + 1, "seq": 1, "tool": "file_read", "args": {}, "dispatch": True}
    r = _plan(runner, c["run"], body)
    assert r.status_code == 409 and r.json()["code"] == "stale_lease"
    assert not Step.objects.filter(run_id=c["run"]).exists()


def test_a_batch_is_not_dispatched_at_once(runner, task):
    c = claim(runner)
    steps = [{"seq": 1, "tool": "file_read", "args": {"path": "a"}}, {"seq": 2, "tool": "sleep", "args": {}}]
    r = _plan(runner, c["run"], {"epoch": c["lease_epoch"], "steps": steps, "dispatch": True})
    assert r.status_code == 400
    assert not Step.objects.filter(run_id=c["run"]).exists()
