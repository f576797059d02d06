"""Stop and two follow-ups: the continuation's output answers both, in order, each read once, and the task
says "read" only once the agent acknowledged them."""

import pytest

from recovery.supervisor.loop import supervise_once
from tasks.models import Run, Step
from tasks.services import run_request_stop
from tests.processes import wait_for
from tests.sdk.agents import Counts
from tests.sdk.conftest import agent_task
from tests.sdk.drive import start_agent, stop, task_page

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PLAN = [
    {"name": "note_append", "args": {"path": "notes.md", "line": "one"}},
    {"name": "slow_write", "args": {"path": "report.md", "content": "the report\n"}},
]


def messages(api, task):
    return api.get(f"/api/tasks/{task.pk}/").json()["messages"]


def test_stop_then_two_follow_ups_the_continuation_answers_both_in_order_each_read_once(
    daphne_server, org, coder, token, api, operator, tmp_path
):
    task, first = agent_task(org, plan=PLAN)
    counts, hold = Counts(tmp_path / "counts"), tmp_path / "go"
    proc = start_agent(daphne_server, token, counts, slow=2, hold=str(hold))
    try:
        wait_for(lambda: any(t["tool"] == "slow_write" for t in counts.read("tools")), timeout=60, what="step 4")
        run_request_stop(actor=operator, run=first)
        wait_for(lambda: Run.objects.filter(pk=first.pk, status="stopped").exists(), timeout=30, what="stopped")
        # The call in flight finished and was saved; the stop took effect at the next step (the third turn).
        assert Step.objects.get(run=first, seq=4).phase == "completed"
        assert not Step.objects.filter(run=first, seq=5).exists()

        for body in ("What is in notes.md?", "And is the report written?"):
            assert api.post(f"/api/tasks/{task.pk}/messages/", {"body": body}, format="json").status_code == 201
        supervise_once()
        second = Run.objects.get(continues=first)
        wait_for(lambda: counts.read("held"), timeout=30, what="the continuation to reach its follow-ups")
        # Claimed and replayed, but the agent has not read them yet: nothing says they were read.
        assert "read" not in [m["status"] for m in messages(api, task)]
        assert "Read by the agent" not in task_page(operator, task)
        hold.touch()
        wait_for(lambda: Run.objects.filter(pk=second.pk, status="succeeded").exists(), timeout=60, what="done")
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    second.refresh_from_db()

    assert second.output["followups"] == ["re: What is in notes.md?", "re: And is the report written?"]
    # The saved turns were not asked again; the follow-ups reached the model once, in order.
    turns = counts.read("model")
    assert len(turns) == 3 and turns[-1]["users"] == ["What is in notes.md?", "And is the report written?"]
    read = messages(api, task)
    assert [m["status"] for m in read] == ["read", "read"] and all(m["read_at"] for m in read)
    assert {m["run"] for m in read} == {second.pk}
    assert task_page(operator, task).count(f"Read by the agent in run #{second.pk}") == 2
