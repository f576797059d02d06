"""A real pydantic-ai agent under the console (`recovery_console.pydantic_ai.durable`), in its own process.

The agent (tests/sdk/pydantic_agent.py) is an unchanged pydantic-ai `Agent` with a `FunctionModel` and three
tools; its second tool call, `send_report` (notify), is slow, and the process is SIGKILLed during it. Each
model call and tool call appends a line to a log the test counts.
"""

import json
from pathlib import Path

import pytest

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.models import Run, Step
from tasks.services import run_request_stop
from tests.processes import wait_for
from tests.sdk.conftest import agent_task
from tests.sdk.drive import decide, stop, task_page
from tests.sdk.drive_pydantic import PROMPT, killed_during_the_second_tool_call, start_agent
from tests.sdk.pydantic_agent import read_log

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def run_to_the_end(server, token, run: Run, directory: Path) -> tuple[Run, str]:
    proc = start_agent(server, token, directory)
    try:
        wait_for(
            lambda: Run.objects.filter(pk=run.pk, status__in=("succeeded", "failed", "stopped")).exists(),
            timeout=60,
            what="the run to finish",
        )
    finally:
        out = stop(proc)
    run.refresh_from_db()
    assert proc.returncode == 0, out
    return run, out


def test_killed_during_a_notify_call_the_continuation_replays_without_calling_and_the_model_gets_the_notice(
    daphne_server, org, coder, token, api, operator, tmp_path
):
    one, two = tmp_path / "one", tmp_path / "two"
    task, first = killed_during_the_second_tool_call(daphne_server, token, org, one)
    action = RecoveryAction.objects.get(run=first, kind="unknown_outcome", status="open")
    assert action.seq == 4
    decide(api, action, "agent_verifies", note="Check whether the report went out.")

    second, out = run_to_the_end(daphne_server, token, Run.objects.get(continues=first), two)

    assert second.status == "succeeded", (second.error_detail, out)
    # 0 model calls and 0 tool calls for what was saved: the second process's first model call is the turn
    # after the notice, and its only tools are the check and the repeat.
    turns = read_log(two, "model")
    assert len(turns) == 3, turns
    told = turns[0]["last"]
    assert told["tool"] == "send_report" and "verify the current state before repeating it" in told["content"]
    assert [t["tool"] for t in read_log(two, "tools")] == ["file_check", "send_report"]
    assert (one / "outbox" / "notes.md").read_text() == "one\n"
    assert not (two / "outbox" / "notes.md").exists()
    steps = [(s.seq, s.tool, s.reused_from_id is not None) for s in Step.objects.filter(run=second).order_by("seq")]
    assert steps[:3] == [(1, "model", True), (2, "note_append", True), (3, "model", True)]  # reused
    redo = Step.objects.get(run=second, tool="send_report", reused_from__isnull=True)
    assert redo.seq > 4 and redo.phase == "completed"  # a repeat is a new step with a new number
    output = json.loads(second.output)
    assert output["told"] == [told["content"]] and output["answer"] == "The notes and the report are done."
    assert "The notes and the report are done." in task_page(operator, task)


def test_a_follow_up_after_stop_reaches_the_models_next_request_once_and_the_output_answers_it(
    daphne_server, org, coder, token, api, operator, tmp_path
):
    directory = tmp_path / "agent"
    task, first = agent_task(org, PROMPT)
    proc = start_agent(daphne_server, token, directory, slow=2)
    try:
        wait_for(
            lambda: any(t["tool"] == "send_report" for t in read_log(directory, "tools")),
            timeout=60,
            what="the second tool call",
        )
        run_request_stop(actor=operator, run=first)
        wait_for(lambda: Run.objects.filter(pk=first.pk, status="stopped").exists(), timeout=30, what="stopped")
        assert Step.objects.get(run=first, seq=4).phase == "completed"
        assert not Step.objects.filter(run=first, seq=5).exists()
        body = "Which address did the report go to?"
        assert api.post(f"/api/tasks/{task.pk}/messages/", {"body": body}, format="json").status_code == 201
        supervise_once()
        second = Run.objects.get(continues=first)
        wait_for(lambda: Run.objects.filter(pk=second.pk, status="succeeded").exists(), timeout=60, what="done")
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    second.refresh_from_db()

    turns = read_log(directory, "model")
    # Two turns before the stop; the continuation replayed them and asked the model once more.
    assert len(turns) == 3, turns
    assert turns[-1]["users"] == [PROMPT, body]  # exactly once, after the prompt
    assert [t["tool"] for t in read_log(directory, "tools")] == ["note_append", "send_report"]
    output = json.loads(second.output)
    assert output["followups"] == [f"re: {body}"]
    assert api.get(f"/api/tasks/{task.pk}/").json()["messages"][0]["status"] == "read"
    assert "re: Which address did the report go to?" in task_page(operator, task)
