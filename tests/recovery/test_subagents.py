"""A subagent's calls checkpoint under it; after a crash it resumes under its own identity."""

import signal

import pytest

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.accounts import agent_add
from tasks.models import AgentProfile, Run, Step
from tasks.services import task_create
from tests.factories import worker_token
from tests.helpers import plan
from tests.processes import lapse_and_supervise, run_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BASE = 100_000


def test_a_subagent_cut_off_mid_plan_resumes_without_redoing_its_finished_calls(daphne_server, org, agent, api):
    scout = agent_add(org=org, name="scout")
    AgentProfile.objects.filter(agent=scout).update(tool_modes={"file_read": "forget"})
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="delegate",
        agent="builder",
        input=plan(
            ("file_write", {"path": "a.txt", "content": "a"}),
            (
                "subagent",
                {
                    "agent": "scout",
                    "input": plan(
                        ("bash", {"command": "echo visit >> visits.txt"}),
                        ("sleep", {"seconds": 1}),
                        ("file_read", {"path": "visits.txt"}),
                    ),
                },
            ),
            ("file_read", {"path": "a.txt"}),
        ),
    )
    code, out = run_worker(daphne_server, token, fault=f"crash_after_dispatch:{2 * BASE + 2}@1")
    assert code == -signal.SIGKILL, out
    first = Run.objects.get(task=task)
    steps = {s.seq: s for s in Step.objects.filter(run=first)}
    assert steps[2].phase == "dispatched" and steps[2 * BASE + 1].parent_seq == 2

    lapse_and_supervise(first)
    diagnosis = api.get(f"/api/runs/{first.pk}/").json()["diagnosis"]
    assert diagnosis["disposition"] == "auto_resumable"
    parent = next(s for s in diagnosis["steps"] if s["seq"] == 2)
    assert parent["verdict"] == "replay" and parent["reason"] == "subagent_resumes"
    assert not RecoveryAction.objects.filter(task=task).exists()

    second = Run.objects.get(continues=first)
    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    second.refresh_from_db()
    assert second.status == "succeeded"
    steps = {s.seq: s for s in Step.objects.filter(run=second)}
    assert steps[1].reused_from_id and steps[2 * BASE + 1].reused_from_id  # not run again
    assert steps[2].reused_from_id is None and steps[2].phase == "completed"
    assert steps[2 * BASE + 3].recovery_mode == "forget"  # scout's override of file_read
    # The bash call inside the subagent appended its line exactly once.
    assert steps[2 * BASE + 3].result["content"] == "visit\n"
    assert steps[2].result["agent"] == "scout"


def test_a_subagent_cut_off_in_a_call_of_unknown_outcome_asks_for_a_decision(daphne_server, org, agent, api):
    agent_add(org=org, name="scout")
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="delegate",
        agent="builder",
        input=plan(("subagent", {"agent": "scout", "input": plan(("file_write", {"path": "x", "content": "x"}))})),
    )
    code, out = run_worker(daphne_server, token, fault=f"crash_after_dispatch:{BASE + 1}@1")
    assert code == -signal.SIGKILL, out
    lapse_and_supervise(Run.objects.get(task=task))
    supervise_once()
    action = RecoveryAction.objects.get(task=task)
    assert action.kind == "unknown_outcome" and action.seq == 1
    detail = api.get(f"/api/actions/{action.pk}/").json()
    assert "file_write" in detail["evidence"]["reasons"][0]["detail"]
    assert "scout" in detail["evidence"]["reasons"][0]["detail"]


def test_a_subagent_must_name_an_agent_of_the_organization(org, agent, runner):
    task = task_create(
        org=org, actor="t", title="x", agent="builder", input=plan(("subagent", {"agent": "ghost", "input": plan()}))
    )
    claim = runner.post("/api/runner/claim/", {"worker": "w"}, format="json").json()
    response = runner.post(
        f"/api/runner/runs/{claim['run']}/steps/",
        {"epoch": claim["lease_epoch"], "seq": 1, "tool": "subagent", "args": {"agent": "ghost", "input": plan()}},
        format="json",
    )
    assert response.status_code == 400 and response.json()["code"] == "invalid"
    assert not Step.objects.filter(run__task=task).exists()
