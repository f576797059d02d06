"""Batches end to end: a real worker process SIGKILLed inside a foreach, a real server, the real supervisor."""

import json
import signal
import time
from pathlib import Path

import pytest
from django.test import Client

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.models import AgentProfile, Run, Step
from tasks.services import task_create
from tests.factories import worker_token
from tests.helpers import plan
from tests.processes import lapse_and_supervise, run_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ITEMS = ["a", "b", "c", "d", "e"]


def settle_interrupted(run: Run, timeout: float = 30) -> Run:
    """Let the killed worker's lease lapse and the supervisor mark the run interrupted.

    A heartbeat the worker sent just before it died may still renew the lease
    once, so wait for the fact rather than for one lease period.
    """
    deadline = time.monotonic() + timeout
    while True:
        lapse_and_supervise(run)
        run.refresh_from_db()
        if run.status == "interrupted":
            return run
        assert time.monotonic() < deadline, f"run #{run.pk} is still {run.status}"


def batch(items, tool, args):
    return ("foreach", {"items": items, "do": {"tool": tool, "args": args}})


def test_a_worker_killed_during_item_3_of_5_resumes_reusing_items_1_and_2(daphne_server, org, agent, api, operator):
    # The admin declared bash safe to replay for this agent: a cut-off item runs again by itself.
    AgentProfile.objects.filter(agent=agent).update(tool_modes={"bash": "replay"})
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="batch",
        agent="builder",
        input=plan(batch(ITEMS, "bash", {"command": "echo {{item}} >> visits.txt; echo {{item}}"})),
    )
    code, out = run_worker(daphne_server, token, fault="crash_after_dispatch:100003@1")
    assert code == -signal.SIGKILL, out
    first = Run.objects.get(task=task)
    steps = {s.seq: s for s in Step.objects.filter(run=first)}
    assert [steps[100_000 + i].phase for i in (1, 2, 3)] == ["completed", "completed", "dispatched"]
    assert 100_004 not in steps and steps[1].phase == "dispatched"
    assert steps[100_002].parent_seq == 1 and steps[100_002].args["command"] == "echo b >> visits.txt; echo b"
    assert (Path(task.workspace) / "visits.txt").read_text() == "a\nb\n"  # item 3's tool never ran

    settle_interrupted(first)
    diagnosis = api.get(f"/api/runs/{first.pk}/").json()["diagnosis"]
    assert diagnosis["disposition"] == "auto_resumable"
    verdict = next(s for s in diagnosis["steps"] if s["seq"] == 1)
    assert verdict["reason"] == "batch_resumes"
    assert "items 1–2 reused, item 3 runs again (replay), items 4–5 not started" in verdict["detail"]
    assert not RecoveryAction.objects.filter(task=task).exists()
    client = Client()
    client.force_login(operator)
    page = client.get(f"/agents/builder/runs/{first.pk}/").content.decode()
    assert "Step 1 (foreach): The batch resumes: items 1–2 reused, item 3 runs again (replay), items 4–5 not" in page

    second = Run.objects.get(continues=first)
    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    second.refresh_from_db()
    assert second.status == "succeeded"
    steps = {s.seq: s for s in Step.objects.filter(run=second)}
    assert steps[100_001].reused_from_id and steps[100_002].reused_from_id  # carried, not run
    assert not any(steps[100_000 + i].reused_from_id for i in (3, 4, 5))
    # Items 1 and 2 did not run again: each item's tool ran exactly once, in order.
    assert (Path(task.workspace) / "visits.txt").read_text() == "a\nb\nc\nd\ne\n"
    result = steps[1].result
    assert [r["stdout"] for r in result["results"]] == ["a\n", "b\n", "c\n", "d\n", "e\n"]
    assert result["failed"] == [] and result["dropped"] == []
    page = api.get(f"/api/runs/{second.pk}/").json()
    assert [s["seq"] for s in page["steps"] if s["reused"]] == [100_001, 100_002]


def test_an_item_of_a_notify_tool_cut_off_after_dispatch_opens_a_decision_naming_it(daphne_server, org, agent, api):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="reports",
        agent="builder",
        input=plan(batch(["north", "south", "east"], "file_write", {"path": "{{item}}.md", "content": "# {{item}}"})),
    )
    code, out = run_worker(daphne_server, token, fault="crash_after_dispatch:100002@1")
    assert code == -signal.SIGKILL, out
    first = Run.objects.get(task=task)
    settle_interrupted(first)
    supervise_once()
    action = RecoveryAction.objects.get(task=task)
    assert action.kind == "unknown_outcome" and action.seq == 100_002
    body = api.get(f"/api/actions/{action.pk}/").json()
    evidence = body["evidence"]
    assert evidence["tool"] == "file_write" and evidence["args"] == {"path": "south.md", "content": "# south"}
    assert (evidence["item"], evidence["parent_seq"]) == (2, 1)
    assert "Item 2 of the batch" in evidence["reasons"][0]["detail"]

    # A person checked: it did not happen. The batch resumes: item 1 reused, item 2 and 3 run.
    response = api.post(
        f"/api/actions/{action.pk}/decision/",
        {"version": body["version"], "outcome": "not_performed", "note": "no south.md", "accept_duplicate_risk": True},
        format="json",
    )
    assert response.status_code == 200, response.content
    second = Run.objects.get(continues=first)
    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    second.refresh_from_db()
    assert second.status == "succeeded"
    steps = {s.seq: s for s in Step.objects.filter(run=second)}
    assert steps[100_001].reused_from_id and not steps[100_002].reused_from_id
    workspace = Path(task.workspace)
    assert sorted(p.name for p in workspace.glob("*.md")) == ["east.md", "north.md", "south.md"]


def test_an_item_that_failed_stays_failed_after_recovery(daphne_server, org, agent, api):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="reads",
        agent="builder",
        input=plan(batch(["missing", "there", "third"], "file_read", {"path": "{{item}}.txt"})),
    )
    workspace = Path(task.workspace)
    (workspace / "there.txt").write_text("here\n")
    (workspace / "third.txt").write_text("3\n")
    code, out = run_worker(daphne_server, token, fault="crash_after_dispatch:100003@1")
    assert code == -signal.SIGKILL, out
    first = Run.objects.get(task=task)
    assert Step.objects.get(run=first, seq=100_001).phase == "failed"
    settle_interrupted(first)
    diagnosis = api.get(f"/api/runs/{first.pk}/").json()["diagnosis"]
    assert diagnosis["disposition"] == "auto_resumable"
    detail = next(s for s in diagnosis["steps"] if s["seq"] == 1)["detail"]
    assert "item 1 failed (the saved failure is kept; not retried), item 2 reused, item 3 runs again" in detail

    # The file appears now: had item 1 been retried, it would succeed.
    (workspace / "missing.txt").write_text("late\n")
    second = Run.objects.get(continues=first)
    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    second.refresh_from_db()
    steps = {s.seq: s for s in Step.objects.filter(run=second)}
    assert steps[100_001].phase == "failed" and steps[100_001].reused_from_id  # carried as it was
    assert steps[100_003].phase == "completed" and not steps[100_003].reused_from_id
    foreach = steps[1]
    assert foreach.phase == "failed"
    assert foreach.result["results"] == [None, {"content": "here\n"}, {"content": "3\n"}]
    assert [f["item"] for f in foreach.result["failed"]] == [1]
    assert second.status == "failed" and second.error_code == "step_failed"
    assert "1 of 3 items failed; item 1" in second.error_detail
    claim_log = json.dumps(foreach.result)
    assert "late" not in claim_log


def test_start_over_runs_everything_again_and_says_so(daphne_server, org, agent, api, operator):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="announce",
        agent="builder",
        input=plan(batch(["a", "b", "c"], "bash", {"command": "echo {{item}} >> log.txt"})),
    )
    code, out = run_worker(daphne_server, token, fault="crash_after_dispatch:100002@1")
    assert code == -signal.SIGKILL, out
    old = Run.objects.get(task=task)
    settle_interrupted(old)
    action = RecoveryAction.objects.get(task=task)
    assert action.kind == "unknown_outcome" and action.seq == 100_002
    log = Path(task.workspace) / "log.txt"
    assert log.read_text() == "a\n"

    refused = api.post(f"/api/tasks/{task.pk}/start-over/", {}, format="json")
    assert refused.status_code == 409 and refused.json()["reason"] == "duplicate_risk_not_accepted"
    assert [s["seq"] for s in refused.json()["steps"]] == [100_001, 100_002]  # bash items may happen twice
    response = api.post(f"/api/tasks/{task.pk}/start-over/", {"accept_duplicate_risk": True}, format="json")
    assert response.status_code == 202, response.content
    fresh = Run.objects.get(pk=response.json()["run"])
    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    fresh.refresh_from_db()
    assert fresh.status == "succeeded" and fresh.continues_id is None
    assert not Step.objects.filter(run=fresh, reused_from__isnull=False).exists()
    # Everything ran again: item 1 twice in all (once per run), items 2 and 3 once (2 was cut off before it ran).
    assert log.read_text() == "a\na\nb\nc\n"
    action.refresh_from_db()
    assert action.status == "retired"

    client = Client()
    client.force_login(operator)
    page = client.get(f"/agents/builder/runs/{fresh.pk}/").content.decode()
    assert (
        f"Fresh start by olive after run #{old.pk}: runs the task again from the beginning and reuses nothing" in page
    )
    supervise_once()
    assert Run.objects.filter(task=task).count() == 2  # the old chain is not recovered afterwards
