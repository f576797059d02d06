"""Continuations of a cut-off batch through the real services (no worker process): what is carried, decided, bounded."""

import pytest

from recovery.actions import action_decide, action_retry
from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.errors import NotEligible
from tasks.models import Run, Step
from tests.recovery import engine
from tests.recovery.batch_scenarios import WRITE, cut_batch

pytestmark = pytest.mark.django_db

READ = ("foreach", {"items": ["a", "b", "c"], "do": {"tool": "file_read", "args": {"path": "{{item}}"}}})


def steps_of(run: Run) -> dict[int, Step]:
    return {s.seq: s for s in Step.objects.filter(run=run)}


def test_a_person_who_says_the_item_happened_resumes_the_batch_with_it_kept(org, agent, operator):
    run = cut_batch(engine.first_run(engine.start(org, [WRITE])), 1)
    supervise_once()
    action = RecoveryAction.objects.get(run=run)
    assert (action.kind, action.seq) == ("unknown_outcome", 100_002)
    action_decide(action_id=action.pk, user=operator, version=action.version, outcome="performed", note="b is there")
    cont = Run.objects.get(continues=run)
    carried = steps_of(cont)
    assert sorted(carried) == [100_001, 100_002]  # the batch itself is planned again by the worker
    assert carried[100_002].result["performed"] is True and carried[100_002].result["note"] == "b is there"
    assert cont.carry["declared"]["100002"]["decided_by"] == "olive"  # the page says "marked performed"
    assert carried[100_002].phase == "completed" and carried[100_002].reused_from_id is not None


def test_a_retry_of_the_item_accepting_the_risk_runs_it_again_and_keeps_the_rest(org, agent, operator):
    run = cut_batch(engine.first_run(engine.start(org, [WRITE])), 1)
    supervise_once()
    action = RecoveryAction.objects.get(run=run)
    with pytest.raises(NotEligible, match="duplicate risk"):
        action_retry(action_id=action.pk, user=operator, version=action.version)
    action_retry(action_id=action.pk, user=operator, version=action.version, accept_duplicate_risk=True)
    cont = Run.objects.get(continues=run)
    assert sorted(steps_of(cont)) == [100_001]  # item 2 is not carried: it runs again


def test_a_resumed_batch_carries_completed_and_failed_items_and_drops_by_mode(org, agent):
    from tasks.models import AgentProfile

    AgentProfile.objects.filter(agent=agent).update(tool_modes={"file_read": "forget"})
    run = cut_batch(engine.first_run(engine.start(org, [READ])), 2, failed=(1,))
    supervise_once()
    cont = Run.objects.get(continues=run)
    carried = steps_of(cont)
    assert (carried[100_001].phase, carried[100_001].error) == ("failed", "boom")  # stays failed
    assert carried[100_002].phase == "completed"
    assert [d["seq"] for d in cont.carry["dropped"]] == [100_003]  # its mode forgets it
    assert cont.carry["dropped"][0]["parent_seq"] == 1
    # The continuation's finish counts top-level steps only: the dropped item does not stop it succeeding.
    cont = engine.claim(cont)
    engine.do_step(cont, 1)
    assert engine.finish(cont).status == "succeeded"


def test_the_same_item_cut_off_twice_in_a_chain_is_not_retried_automatically_again(org, agent):
    first = cut_batch(engine.first_run(engine.start(org, [READ])), 1)
    supervise_once()
    second = Run.objects.get(continues=first)
    second = cut_batch(second, 1)  # item 1 carried, item 2 cut off again
    supervise_once()
    action = RecoveryAction.objects.get(run=second)
    assert action.status == "exhausted" and action.cause == "interrupted_twice"
    assert action.evidence["reasons"][0]["seq"] == 100_002
    assert "Item 2 of step 1" in action.evidence["reasons"][0]["detail"]


def test_a_batch_that_made_progress_since_its_last_cut_resumes_again(org, agent):
    first = cut_batch(engine.first_run(engine.start(org, [READ])), 0)
    supervise_once()
    second = cut_batch(Run.objects.get(continues=first), 1)  # further this time: item 2
    supervise_once()
    third = Run.objects.get(continues=second)
    assert sorted(steps_of(third)) == [100_001]
    assert not RecoveryAction.objects.filter(run=second).exists()


def test_continue_now_asks_about_the_item_not_the_whole_batch(org, agent):
    # Continue now opens the decision through this helper (recovery.controls) when none is live.
    from recovery.controls import _open_decision
    from recovery.selectors import diagnose

    run = cut_batch(engine.first_run(engine.start(org, [WRITE])), 1)
    diagnosis = diagnose(run)
    batch = next(v for v in diagnosis.steps if v.seq == 1)
    action = _open_decision(run, batch, diagnosis)
    assert action.seq == 100_002 and action.evidence["tool"] == "file_write"
    assert (action.evidence["item"], action.evidence["parent_seq"]) == (2, 1)
    assert action.evidence["args"] == {"path": "b", "content": "x"}
