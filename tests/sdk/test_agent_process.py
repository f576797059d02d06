"""Agent runs end to end: an agent under `serve` in its own process, SIGKILLed during its third tool call.

The agent (tests/sdk/agents.py) has a deterministic "model" (no network): it writes two notes, then a report
with `slow_write` (notify mode), during which the process is killed. Each model call and tool call appends a
line to a counts file of its process; the tools' side effects are lines in workspace files.
"""

import signal
from pathlib import Path

import pytest

from recovery.models import RecoveryAction
from tasks.models import Run, Step
from tests.processes import lapse_and_supervise, wait_for
from tests.sdk.agents import PLAN, Counts
from tests.sdk.conftest import agent_task
from tests.sdk.drive import decide, start_agent, stop, task_page

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SAVED = [
    (1, "model", "completed"),
    (2, "note_append", "completed"),
    (3, "model", "completed"),
    (4, "note_append", "completed"),
    (5, "model", "completed"),
    (6, "slow_write", "dispatched"),
]


def killed_during_the_third_tool_call(server, token, org, tmp_path):
    """A task whose agent process was SIGKILLed while `slow_write` (its third tool call) ran."""
    task, first = agent_task(org, plan=PLAN)
    one = Counts(tmp_path / "one")
    proc = start_agent(server, token, one, slow=60)
    wait_for(lambda: any(t["tool"] == "slow_write" for t in one.read("tools")), timeout=60, what="the third call")
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGKILL, out
    assert list(Step.objects.filter(run=first).order_by("seq").values_list("seq", "tool", "phase")) == SAVED
    assert len(one.read("model")) == 3 and [t["tool"] for t in one.read("tools")] == [
        "note_append",
        "note_append",
        "slow_write",
    ]
    lapse_and_supervise(first)
    first.refresh_from_db()
    assert first.status == "interrupted"
    return task, first


def continue_in_a_new_process(server, token, task, first, counts: Counts, **kwargs) -> Run:
    second = Run.objects.get(continues=first)
    proc = start_agent(server, token, counts, **kwargs)
    try:
        wait_for(
            lambda: Run.objects.filter(pk=second.pk, status__in=("succeeded", "failed", "stopped")).exists(),
            timeout=60,
            what="the continuation to finish",
        )
    finally:
        out = stop(proc)
    second.refresh_from_db()
    assert proc.returncode == 0, out
    return second


def the_saved_work_was_not_done_again(task, two: Counts):
    # The continuation called the model 0 times for the three saved turns and ran tools 1-2 0 times.
    assert all(m["turn"] > 6 for m in two.read("model")), two.read("model")
    assert not [t for t in two.read("tools") if t["tool"] == "note_append"]
    assert (Path(task.workspace) / "notes.md").read_text() == "one\ntwo\n"


def test_decided_the_agent_verifies_the_model_gets_the_notice_and_the_run_finishes_with_its_output(
    daphne_server, org, coder, token, api, operator, tmp_path
):
    task, first = killed_during_the_third_tool_call(daphne_server, token, org, tmp_path)
    action = RecoveryAction.objects.get(run=first, kind="unknown_outcome", status="open")
    assert action.seq == 6
    decide(api, action, "agent_verifies", note="Check whether the report exists.")

    two = Counts(tmp_path / "two")
    second = continue_in_a_new_process(daphne_server, token, task, first, two)

    assert second.status == "succeeded", second.error_detail
    the_saved_work_was_not_done_again(task, two)
    # The model's next turn received the notice in place of the result; it checked, found nothing, wrote again.
    told = two.read("model")[0]["last"]
    assert told["decision"] == "agent_verifies" and "verify the current state" in told["content"]
    assert [t["tool"] for t in two.read("tools")] == ["file_check", "slow_write"]
    assert (Path(task.workspace) / "report.md").read_text() == "the report\n"
    redo = Step.objects.get(run=second, tool="slow_write", reused_from__isnull=True)
    assert redo.seq > 6 and redo.phase == "completed"  # a repeat is a new step with a new number
    assert second.output["answer"] == "Done: 3 planned call(s)." and second.output["notices"] == [told["content"]]
    assert "Done: 3 planned call(s)." in task_page(operator, task)


def test_decided_performed_the_note_reaches_the_model(daphne_server, org, coder, token, api, operator, tmp_path):
    task, first = killed_during_the_third_tool_call(daphne_server, token, org, tmp_path)
    action = RecoveryAction.objects.get(run=first, kind="unknown_outcome", status="open")
    decide(api, action, "performed", note="I saved the report by hand")

    two = Counts(tmp_path / "two")
    second = continue_in_a_new_process(daphne_server, token, task, first, two)

    assert second.status == "succeeded", second.error_detail
    the_saved_work_was_not_done_again(task, two)
    told = two.read("model")[0]["last"]
    assert told["decision"] == "performed"
    assert "olive" in told["content"] and "I saved the report by hand" in told["content"]
    assert two.read("tools") == []  # nothing ran again: a person said it happened
    assert not (Path(task.workspace) / "report.md").exists()
    assert second.output["notices"] == [told["content"]]
    assert "Done: 3 planned call(s)." in task_page(operator, task)


def test_with_the_agents_tell_agent_setting_no_person_is_asked(daphne_server, org, coder, token, operator, tmp_path):
    from recovery.modes import profile_update

    profile_update(actor=operator, profile=coder.profile, unknown_outcome="tell_agent", reason="the agent checks")
    task, first = killed_during_the_third_tool_call(daphne_server, token, org, tmp_path)
    action = RecoveryAction.objects.get(run=first, kind="unknown_outcome")

    two = Counts(tmp_path / "two")
    second = continue_in_a_new_process(daphne_server, token, task, first, two)

    assert second.status == "succeeded", second.error_detail
    the_saved_work_was_not_done_again(task, two)
    told = two.read("model")[0]["last"]
    assert told["decision"] == "agent_verifies" and "verify the current state" in told["content"]
    assert [t["tool"] for t in two.read("tools")] == ["file_check", "slow_write"]
    action.refresh_from_db()
    assert action.decision == "agent_verifies" and action.decided_by == ""  # no person decided
    page = task_page(operator, task)
    assert "Done: 3 planned call(s)." in page
    # The card says the agent's setting handed it over, and what the model was told.
    assert "Handed to the agent by its setting" in page and told["content"] in page, page


def test_an_agent_that_takes_another_path_is_refused_and_the_action_shows_both_calls(
    daphne_server, org, coder, token, api, tmp_path
):
    task, first = killed_during_the_third_tool_call(daphne_server, token, org, tmp_path)
    action = RecoveryAction.objects.get(run=first, kind="unknown_outcome", status="open")
    decide(api, action, "agent_verifies")

    two = Counts(tmp_path / "two")
    second = continue_in_a_new_process(daphne_server, token, task, first, two, variant="aside")

    assert second.status == "failed" and second.error_code == "diverged"
    assert two.read("model") == [] and two.read("tools") == []  # nothing ran
    assert not Step.objects.filter(run=second, reused_from__isnull=True).exists()
    diverged = RecoveryAction.objects.get(run=second, kind="diverged")
    body = api.get(f"/api/actions/{diverged.pk}/").json()
    evidence = body["evidence"]
    assert evidence["seq"] == 3
    assert evidence["saved"]["tool"] == evidence["asked"]["tool"] == "model"
    assert evidence["saved"]["args"]["digest"] != evidence["asked"]["args"]["digest"]
    assert evidence["saved"]["args"]["request"]["messages"][-1]["role"] == "tool"
    assert evidence["asked"]["args"]["request"]["messages"][-1]["content"] == "(an aside the first version never made)"
