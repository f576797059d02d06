"""DESIGN §6a, row by row: what each saved fact makes the screen say, and what it must never say.

Each situation is reached through the real engine (the services a worker and
the supervisor call; one journey with real worker processes below) and read
on every surface: task page, run pages, board row, inbox row, pushed cards.
"""

import re

import pytest
from rest_framework.test import APIClient

from recovery.actions import action_cancel, action_decide, action_retry
from recovery.controls import task_continue
from recovery.followups import message_save
from recovery.models import RecoveryAction, RecoveryAttempt
from recovery.supervisor.loop import supervise_once
from tasks.models import Message, Run, Task
from tasks.services import run_request_stop
from tests.factories import make_agent, user_token
from tests.recovery import engine as e
from tests.truth.surfaces import assert_no_iso, read

FORBIDDEN_AFTER_DECISION = ("Retry", "Retrying", "ontinuing", "ontinued")


@pytest.fixture
def careful(org):
    return make_agent(org, "careful", auto_resume=False)


def decide(action, user, outcome, note="", risk=False):
    action.refresh_from_db()
    return action_decide(
        action_id=action.pk, user=user, version=action.version, outcome=outcome, note=note, accept_duplicate_risk=risk
    )


# --- a decision is a decision; a queued run is not a continuation ---------------------------------


def test_a_decision_that_it_happened_is_named_a_decision_until_its_run_starts_then_its_real_outcome(
    org, agent, operator
):
    action = e.parked(org, [e.SAFE, e.WRITE, e.SAFE], 2)
    decide(action, operator, "performed", note="report.md is on disk")
    continuation = Run.objects.get(continues_id=action.run_id)
    s = read(operator, action.task_id)
    card = s.card(f"action-{action.pk}")
    assert "Decision recorded: it happened (olive," in card and "report.md is on disk" in card
    assert f"Run #{continuation.pk} queued — step 2 will not run again." in card
    for word in FORBIDDEN_AFTER_DECISION:
        assert word not in card, f"{word!r} on a card whose continuation has not started: {card}"
    assert "Decision recorded: it happened" in s.pushed and "Retrying" not in s.pushed
    assert (
        "continued by" not in s.runs[action.run_id]
        and f"continuation run #{continuation.pk} (queued)" in (s.runs[action.run_id])
    )
    assert "Queued" in s.row and "Needs decision" not in s.row
    assert s.inbox == ""  # nothing waits on a person any more
    assert_no_iso(s)

    run = e.claim(continuation)
    s = read(operator, action.task_id)
    card = s.card(f"action-{action.pk}")
    assert f"Continuing in run #{run.pk} since" in card and "Decision recorded: it happened" in card
    assert "queued" not in card and "Retry" not in card
    # The step a person declared performed has no saved result, and the page says so.
    steps = s.runs[run.pk]
    assert "marked performed by olive: report.md is on disk — no saved result" in steps
    assert "decided_by" not in steps  # no declared statement is shown as if it were a result
    assert f"reused — saved result of run #{action.run_id}" in steps  # step 1 really was saved
    assert steps.count("reused — saved result") == 1
    # The interrupted run no longer asks for the decision that was made: it says how it was settled.
    source = s.runs[action.run_id]
    assert "a person decides" not in source
    assert f"run #{run.pk} does not run it again: decided it happened — olive: report.md is on disk" in source
    assert f"settled — continued in run #{run.pk}." in source
    assert_no_iso(s)

    e.advance(run, 3)
    e.finish(run)
    s = read(operator, action.task_id)
    card = s.card(f"action-{action.pk}")
    assert f"Continued in run #{run.pk} — it succeeded." in card
    assert "Retrying" not in s.task and "Cancel action" not in card
    assert "Done" in s.card(f"task-{action.task_id}") and "Done" in s.row
    assert RecoveryAttempt.objects.get(action=action).outcome == "succeeded"
    assert_no_iso(s)


def test_a_retry_is_named_a_retry_until_a_worker_starts_it_and_a_replayed_step_says_so_only_where_it_ran(
    org, careful, operator
):
    run = e.interrupted(org, [e.SAFE, e.SAFE], 1, agent="careful")
    supervise_once()
    action = RecoveryAction.objects.get(run=run)
    s = read(operator, action.task_id)
    safe = "Safe to continue — this agent waits for an operator (auto-resume is off)."
    assert safe in s.card(f"action-{action.pk}") and safe in s.runs[run.pk]
    assert "automatically" not in s.runs[run.pk].replace("not retried automatically", "")
    assert "Needs decision" in s.row and "Needs decision" in s.inbox

    attempt = action_retry(action_id=action.pk, user=operator, version=action.version)
    s = read(operator, action.task_id)
    card = s.card(f"action-{action.pk}")
    assert "Retry requested by olive" in card
    assert f"run #{attempt.continuation_run_id} queued; nothing has resumed yet." in card
    assert "ontinu" not in card and "resumed." not in card
    assert "Decision" not in card

    cont = e.claim(attempt.continuation_run)
    s = read(operator, action.task_id)
    assert f"Continuing in run #{cont.pk} since" in s.card(f"action-{action.pk}")
    e.advance(cont, 1)
    assert (
        "run again (replay)" in s.runs[cont.pk] or "run again (replay)" in read(operator, action.task_id).runs[cont.pk]
    )
    e.lapse()  # the continuation is cut off too
    s = read(operator, action.task_id)
    assert f"Continued in run #{cont.pk} — it was interrupted." in s.card(f"action-{action.pk}")
    assert "run again (replay)" in s.runs[cont.pk]
    assert "run again (replay)" not in s.runs[run.pk]  # only in the run that ran it
    assert RecoveryAttempt.objects.get(action=action).outcome == "interrupted"
    assert_no_iso(s)


# --- stop, stopping, and what continues a run ---------------------------------------------------


def test_a_stopping_run_is_never_called_running_and_a_stopped_run_never_continues_by_itself(org, agent, operator):
    task = e.start(org, [e.SAFE, e.SAFE, e.SAFE])
    run = e.claim(e.first_run(task))
    e.do_step(run, 1)
    run_request_stop(actor=operator, run=run)
    s = read(operator, task.pk)
    header = s.card(f"task-{task.pk}")
    assert "Stopping" in header and "Stopping — asked by olive" in header
    assert "the worker stops at its next step or its lease lapses" in header
    assert "Running" not in header and "Running" not in s.row and "Stopping" in s.row
    assert_no_iso(s)

    run.refresh_from_db()
    e.finish(run, "stopped")
    supervise_once()
    s = read(operator, task.pk)
    assert "Stopped by olive" in s.runs[run.pk] and "continues when someone writes a follow-up." in s.runs[run.pk]
    assert "automatically" not in s.runs[run.pk] and "automatically" not in s.task
    assert "Stopped by olive" in s.card(f"task-{task.pk}")  # the header says why nothing runs
    assert not Run.objects.filter(continues=run).exists()
    assert_no_iso(s)


def test_a_decision_that_it_did_not_happen_says_on_the_cut_off_run_that_the_next_run_runs_it_again(
    org, agent, operator
):
    action = e.parked(org, [e.SAFE, e.WRITE], 2)
    decide(action, operator, "not_performed", note="nothing on disk", risk=True)
    continuation = Run.objects.get(continues_id=action.run_id)
    source = read(operator, action.task_id).runs[action.run_id]
    assert f"run #{continuation.pk} (queued) runs it again: decided: it did not happen" in source
    assert f"settled — run #{continuation.pk} is queued." in source
    assert "a person decides" not in source and "continued in" not in source
    e.claim(continuation)
    source = read(operator, action.task_id).runs[action.run_id]
    assert f"run #{continuation.pk} runs it again: decided: it did not happen" in source
    assert f"settled — continued in run #{continuation.pk}." in source


# --- exhausted, unresolved, cancelled ------------------------------------------------------------


def test_an_action_exhausted_by_two_interruptions_says_why_who_may_act_and_no_due_time(
    org, agent, operator, admin_user
):
    first = e.interrupted(org, [e.SAFE, e.SAFE, e.SAFE], 2)
    supervise_once()
    second = Run.objects.get(continues=first)
    e.crash_after_dispatch(second, 2)
    supervise_once()
    action = RecoveryAction.objects.get(run=second)
    assert action.status == "exhausted"
    for user in (operator, admin_user):
        s = read(user, first.task_id)
        card = s.card(f"action-{action.pk}")
        assert "Step 2 was interrupted twice in this chain" in card
        assert "An admin may grant one more attempt, with a reason; an operator may cancel this action." in card
        assert "Due" not in card and "attempts used" not in card and "0 of" not in card
        assert "Exhausted" in s.row and "0 of" not in s.row
        assert_no_iso(s)
    assert "Grant one more attempt" in read(admin_user, first.task_id).card(f"action-{action.pk}")
    assert "Grant one more attempt" not in read(operator, first.task_id).card(f"action-{action.pk}")


def test_an_unresolved_decision_is_shown_with_who_when_and_the_note_and_can_be_decided_now(org, agent, operator):
    action = e.parked(org, [e.SAFE, e.POST], 2)
    decide(action, operator, "unresolved", note="asked the vendor, no answer yet")
    s = read(operator, action.task_id)
    card = s.card(f"action-{action.pk}")
    assert "Unresolved — olive," in card and "asked the vendor, no answer yet" in card
    assert "(decide now)" in card and "It happened — keep it" in card
    assert "Needs decision" in s.inbox
    assert_no_iso(s)


def test_a_cancelled_action_says_what_happens_now_and_the_task_offers_its_next_control(org, agent, operator):
    action = e.parked(org, [e.SAFE, e.WRITE], 2)
    action_cancel(action_id=action.pk, user=operator, version=action.version)
    s = read(operator, action.task_id)
    card = s.card(f"action-{action.pk}")
    assert "Cancelled by olive" in card and "Continue now, Start over, Close" in card
    header = s.card(f"task-{action.task_id}")
    assert "Continue now" in header and "Nothing is scheduled" in header
    assert "Blocked" not in header or "Held" in header
    assert_no_iso(s)

    # Continue now with the unknown outcome still undecided opens a decision and names it.
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {user_token(operator)}")
    r = api.post(f"/api/tasks/{action.task_id}/continue/", {}, format="json")
    assert r.status_code == 409 and r.json()["code"] == "needs_decision"
    fresh = RecoveryAction.objects.get(pk=r.json()["action"])
    assert fresh.status == "open" and fresh.kind == "unknown_outcome" and fresh.seq == 2
    s = read(operator, action.task_id)
    assert "It happened — keep it" in s.card(f"action-{fresh.pk}")


def test_a_follow_up_on_a_done_task_is_refused_in_the_api_and_on_the_page(org, agent, operator):
    task = e.start(org, [e.SAFE])
    e.run_to_end(e.first_run(task))
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {user_token(operator)}")
    r = api.post(f"/api/tasks/{task.pk}/messages/", {"body": "one more thing"}, format="json")
    assert r.status_code == 409 and r.json()["code"] == "task_closed"
    assert "Reopen" in r.json()["detail"]
    s = read(operator, task.pk)
    assert "follow-ups are refused until an operator reopens it" in s.task
    from django.test import Client

    client = Client()
    client.force_login(operator)
    response = client.post(f"/tasks/{task.pk}/messages/", {"body": "one more thing"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 409 and "would never be delivered" in response.content.decode()


def test_a_decided_continuation_that_fails_says_it_failed_and_the_task_says_what_may_follow(org, agent, operator):
    action = e.parked(org, [e.SAFE, e.WRITE, e.SAFE], 2)
    decide(action, operator, "performed", note="report.md is on disk")
    run = e.claim(Run.objects.get(continues_id=action.run_id))
    e.advance(run, 2)
    e.finish(run, status="failed")
    s = read(operator, action.task_id)
    card = s.card(f"action-{action.pk}")
    assert f"Continued in run #{run.pk} — it failed." in card and "succeeded" not in card
    assert "Cancel action" not in card and "Retrying" not in card
    assert RecoveryAttempt.objects.get(action=action).outcome == "failed"
    header = s.card(f"task-{action.task_id}")
    assert f"run #{run.pk} ended (it failed)" in header and "Done" not in header
    assert "Continue now" in header and "Start over" in header  # the way on is named, and offered
    assert f"run #{run.pk} ended (it failed)" in s.row and "Done" not in s.row
    timeline = s.runs[run.pk]
    assert "Failed" in timeline and "succeeded" not in timeline
    # The run's timeline: the decision it carried, and when each step it ran was dispatched and how long it took.
    assert "Carries a decision: it happened (olive," in timeline and "report.md is on disk" in timeline
    # Relative to when the page was drawn: "now" on a quiet machine, a few seconds on a loaded one.
    assert re.search(r"dispatched (now|a second ago|\d+ seconds? ago) · took", timeline), timeline
    assert_no_iso(s)


def test_a_follow_up_after_a_cancelled_unknown_outcome_says_what_it_waits_for_and_which_control_moves_it(
    org, agent, operator
):
    action = e.parked(org, [e.SAFE, e.POST], 2)
    action_cancel(action_id=action.pk, user=operator, version=action.version)
    message_save(user=operator, task=Task.objects.get(pk=action.task_id), body="also send the summary")
    # Before the supervisor's pass the follow-up says what ends its wait: the decision it opens.
    before = (
        "step 2 has an unknown outcome that nobody has decided. The supervisor opens its decision on its next pass."
    )
    assert before in read(operator, action.task_id).task
    # A follow-up written after the cancel asks for the task to go on: the supervisor opens the decision it waits
    # on, so the task is in the inbox (never a follow-up waiting on nothing, hidden from triage).
    supervise_once()
    message = Message.objects.get(task_id=action.task_id)
    assert message.status == "waiting" and Run.objects.filter(task_id=action.task_id).count() == 1
    opened = RecoveryAction.objects.get(task_id=action.task_id, status="open")
    assert (opened.kind, opened.seq) == ("unknown_outcome", 2)
    assert message.waiting_reason == f"Waiting on recovery action #{opened.pk}: it needs a decision first."
    s = read(operator, action.task_id)
    assert f"Waiting on recovery action #{opened.pk}" in s.task and "Needs decision" in s.inbox
    # Cancelled again, after the follow-up was written: the person chose; the supervisor does not reopen it, and
    # the follow-up names the controls that move it on.
    action_cancel(action_id=opened.pk, user=operator, version=opened.version)
    supervise_once()
    assert not RecoveryAction.objects.filter(task_id=action.task_id, status="open").exists()
    waits = "step 2 has an unknown outcome that nobody has decided. An operator opens its decision with Continue now"
    assert waits in read(operator, action.task_id).task
    # Continue now opens that decision; the follow-up then names the action it waits on.
    again = task_continue(user=operator, task_id=action.task_id).action
    supervise_once()
    message.refresh_from_db()
    assert message.status == "waiting" and message.waiting_reason == (
        f"Waiting on recovery action #{again}: it needs a decision first."
    )
    assert f"Waiting on recovery action #{again}" in read(operator, action.task_id).task


# --- a person's statement stays a statement along the chain (issue 20, item 1) ------------------------


def _step_row(run_page_html: str, seq: int) -> str:
    """The words of one step's row on a run page (its `data-seq`)."""
    import re

    from tests.helpers import visible_text

    found = re.search(rf'<li class="step[^"]*" data-seq="{seq}">(.*?)</li>', run_page_html, re.S)
    assert found, f"no row for step {seq}"
    return visible_text(found.group(1))


def test_a_batch_item_declared_performed_is_never_a_saved_result_on_any_later_run_of_the_chain(org, agent, operator):
    from django.test import Client

    from tests.recovery.batch_scenarios import WRITE, cut_batch, do_item

    # Item 2 of the batch is cut off after its dispatch; a person says it happened.
    first = cut_batch(e.first_run(e.start(org, [WRITE])), 1)
    supervise_once()
    action = RecoveryAction.objects.get(run=first)
    decide(action, operator, "performed", note="b is on disk")
    # The decided run resumes the batch; item 3 fails, so the batch (and the run) fails.
    decided = e.claim(Run.objects.get(continues=first))
    e.plan_step(decided, 1)
    e.dispatch_step(decided, 1)
    do_item(decided, 3, phase="failed")
    e.complete_step(decided, 1, ok=False, error="1 of 3 items failed; item 3: boom")
    e.finish(decided, status="failed")
    # Continue now runs the failed batch again; that run is cut off before item 3 is dispatched, and the
    # supervisor continues it by itself.
    later = task_continue(user=operator, task_id=action.task_id).run
    later = e.claim(later)
    e.plan_step(later, 1)
    e.dispatch_step(later, 1)
    do_item(later, 3, phase="planned")
    e.lapse()
    supervise_once()
    last = Run.objects.get(continues=later)

    client = Client()
    client.force_login(operator)
    for run in (decided, later, last):
        page = client.get(f"/agents/builder/runs/{run.pk}/").content.decode()
        item = _step_row(page, 100_002)
        assert "marked performed by olive" in item and "b is on disk" in item and "no saved result" in item, item
        assert "saved result of run" not in item, f"run #{run.pk} calls a person's statement a saved result: {item}"
        assert "took" not in item, f"run #{run.pk} gives the statement a duration: {item}"
        # Nobody asked for a retry: Continue now is named as what it was.
        assert "retry requested" not in visible_text_of(page), f"run #{run.pk} claims a retry request"
    assert "run again (asked for with Continue now)" in _step_row(
        client.get(f"/agents/builder/runs/{later.pk}/").content.decode(), 1
    )
    # The API says the same: a declaration, not a saved result, on every later run.
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {user_token(operator)}")
    for run in (later, last):
        steps = {s["seq"]: s for s in api.get(f"/api/runs/{run.pk}/").json()["steps"]}
        assert (
            steps[100_002]["carried"] == "declared_performed" and steps[100_002]["declared"]["note"] == "b is on disk"
        )


def visible_text_of(html: str) -> str:
    from tests.helpers import visible_text

    return visible_text(html)
