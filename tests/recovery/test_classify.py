"""classify(): a run's saved steps in, a diagnosis out. Pure: no database, no clock."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recovery.rules import classify as c
from recovery.rules.classify import RunFacts, StepFacts, classify
from tests.recovery.facts import TOOLS, at, facts, reason, step


def verdicts(diagnosis) -> dict[int, str]:
    return {s.seq: s.verdict for s in diagnosis.steps}


# --- verdicts and dispositions ------------------------------------------------------------


def test_completed_steps_are_reused_and_the_rest_is_safe_so_the_run_resumes_by_itself():
    d = classify(
        facts(
            step(1, "completed", "notify"),
            step(2, "completed", "replay"),
            step(3, "dispatched", "replay"),
            step(4, "planned", "notify"),
        )
    )
    assert verdicts(d) == {1: c.REUSE, 2: c.REUSE, 3: c.REPLAY, 4: c.NOT_DISPATCHED}
    assert d.disposition == c.AUTO_RESUMABLE
    assert d.reasons == ()


def test_a_dispatched_step_of_mode_forget_is_dropped_and_says_so():
    d = classify(facts(step(1), step(2, "dispatched", "forget", tool="shred", args={"path": "x"})))
    assert verdicts(d) == {1: c.REUSE, 2: c.DROP}
    assert d.disposition == c.AUTO_RESUMABLE
    dropped = d.steps[1]
    assert dropped.reason == "forget" and "shred" in dropped.detail and "drops" in dropped.detail


def test_a_dispatched_notify_step_without_a_result_is_an_unknown_outcome_naming_tool_arguments_and_time():
    d = classify(facts(step(1), step(2, "dispatched", "notify", tool="http_post", args={"url": "https://x/hook"})))
    assert verdicts(d) == {1: c.REUSE, 2: c.UNKNOWN_OUTCOME}
    assert d.disposition == c.NEEDS_DECISION
    r = reason(d, "unknown_outcome")
    assert r.seq == 2
    assert "http_post" in r.detail
    assert "https://x/hook" in r.detail
    # The time is a separate fact (the card shows it as relative text), never an ISO string in a sentence.
    assert at(20).isoformat() not in r.detail
    step_detail = d.steps[1].detail
    assert "http_post" in step_detail and "https://x/hook" in step_detail and at(20).isoformat() not in step_detail


def test_each_unknown_outcome_is_its_own_reason():
    d = classify(
        facts(
            step(1, "completed", "notify"),
            step(2, "dispatched", "notify", tool="file_write", args={"path": "a.md"}),
            step(3, "dispatched", "notify", tool="bash", args={"command": "make deploy"}),
        )
    )
    unknown = [r for r in d.reasons if r.code == "unknown_outcome"]
    assert [r.seq for r in unknown] == [2, 3]
    assert "a.md" in unknown[0].detail and "make deploy" in unknown[1].detail


def test_a_failed_step_keeps_its_failure_and_needs_a_decision():
    d = classify(facts(step(1), step(2, "failed", "replay", error="exit 2: no such file", has_result=False)))
    assert verdicts(d) == {1: c.REUSE, 2: c.REUSE}
    assert d.disposition == c.NEEDS_DECISION
    r = reason(d, "step_failed")
    assert r.seq == 2 and "exit 2: no such file" in r.detail


def test_a_nested_call_of_unknown_outcome_parks_the_run():
    nested = step(3, "dispatched", "notify", tool="file_write", args={"path": "sub.txt"}, parent_seq=2)
    d = classify(
        facts(step(1), step(2, "dispatched", "replay", tool="batch"), nested, plan=plan_of(("file_read", "batch")))
    )
    assert d.disposition == c.NEEDS_DECISION
    r = reason(d, "unknown_outcome")
    assert r.seq == 3 and "under step 2" in r.detail


def test_a_subagent_cut_off_in_a_nested_write_is_one_decision_about_the_subagent_call():
    nested = step(3, "dispatched", "notify", tool="file_write", args={"path": "sub.txt"}, parent_seq=2)
    parent = step(2, "dispatched", "notify", tool="subagent", args={"agent": "scout", "input": {"steps": []}})
    d = classify(facts(step(1), parent, nested, plan=plan_of(("file_read", "subagent"))))
    assert d.disposition == c.NEEDS_DECISION
    reasons = [r for r in d.reasons if r.code == "unknown_outcome"]
    assert len(reasons) == 1 and reasons[0].seq == 2
    assert "scout" in reasons[0].detail and "file_write" in reasons[0].detail and "step 3" in reasons[0].detail


def test_a_subagent_cut_off_in_a_safe_call_resumes_by_itself():
    done = step(3, "completed", "notify", tool="bash", parent_seq=2)
    cut = step(4, "dispatched", "replay", tool="sleep", parent_seq=2)
    parent = step(2, "dispatched", "notify", tool="subagent", args={"agent": "scout", "input": {"steps": []}})
    d = classify(facts(step(1), parent, done, cut, plan=plan_of(("file_read", "subagent"))))
    assert d.disposition == c.AUTO_RESUMABLE
    assert d.verdict_of(2) == c.REPLAY


def plan_of(tools) -> dict:
    return {"steps": [{"tool": t, "args": {}} for t in tools]}


@pytest.mark.parametrize("status", ["queued", "running", "stopping", "succeeded", "failed", "cancelled"])
def test_a_run_that_was_not_interrupted_or_stopped_has_no_disposition(status):
    d = classify(facts(step(1), step(2, "dispatched", "notify"), status=status))
    assert d.disposition == c.NONE
    assert d.reasons == ()


def test_a_stopped_run_is_diagnosed_like_an_interrupted_one():
    d = classify(facts(step(1), step(2, "planned"), status="stopped"))
    assert d.disposition == c.AUTO_RESUMABLE


def test_the_diagnosis_has_the_shape_of_the_api():
    d = classify(facts(step(1), step(2, "dispatched", "notify"))).as_dict()
    assert set(d) == {"disposition", "steps", "reasons"}
    assert all(set(s) == {"seq", "tool", "verdict", "reason", "detail"} for s in d["steps"])
    assert all({"code", "detail"} <= set(r) for r in d["reasons"])


# --- corruption: fail closed, nothing replayed -----------------------------------------------


def assert_corrupt(d, code: str, seq=None):
    assert d.disposition == c.CORRUPT, d
    r = reason(d, code)
    if seq is not None:
        assert r.seq == seq, r
    assert r.detail and r.detail != code
    return r


def test_a_result_without_a_recorded_dispatch_is_corrupt():
    d = classify(facts(step(1), step(2, "completed", dispatched_at=None)))
    assert verdicts(d)[2] == c.CORRUPT
    r = assert_corrupt(d, "result_without_dispatch", seq=2)
    assert "2" in r.detail


def test_a_result_on_a_step_that_never_completed_is_corrupt():
    d = classify(facts(step(1), step(2, "dispatched", "replay", has_result=True)))
    assert verdicts(d)[2] == c.CORRUPT
    assert_corrupt(d, "result_without_completion", seq=2)


def test_a_dispatch_recorded_after_a_later_step_completed_is_corrupt():
    late = step(1, "dispatched", "replay", dispatched_at=at(30))  # step 2 completed at 21
    d = classify(facts(late, step(2)))
    r = assert_corrupt(d, "dispatch_after_later_completion", seq=1)
    assert "step 2" in r.detail


def test_a_gap_in_the_step_numbers_is_corrupt_and_names_the_missing_step():
    d = classify(facts(step(1), step(3), step(4, "dispatched"), plan=plan_of(["file_read"] * 4)))
    r = assert_corrupt(d, "seq_gap", seq=2)
    assert "2" in r.detail


def test_two_checkpoints_of_one_step_are_corrupt():
    d = classify(facts(step(1), step(1, "dispatched"), plan=plan_of(["file_read"])))
    assert_corrupt(d, "duplicate_seq")


@pytest.mark.parametrize(
    "broken",
    [
        step(2, "dispatched", "replay", args=["not", "an", "object"]),
        step(2, "dispatched", "replay", args="path=x"),
        step(2, "completed", "replay", result_readable=False),
    ],
    ids=["args_list", "args_string", "result_unreadable"],
)
def test_an_unreadable_payload_is_corrupt(broken):
    d = classify(facts(step(1), broken, plan=plan_of(["file_read", "file_read"])))
    assert verdicts(d)[2] == c.CORRUPT
    assert_corrupt(d, "unreadable_payload", seq=2)


def test_an_unknown_phase_is_corrupt_and_quotes_it():
    d = classify(facts(step(1), step(2, "half-done")))
    r = assert_corrupt(d, "unknown_phase", seq=2)
    assert "half-done" in r.detail


def test_an_unknown_recovery_mode_is_corrupt_and_quotes_it():
    d = classify(facts(step(1), step(2, "dispatched", "maybe", tool="file_read")))
    r = assert_corrupt(d, "unknown_mode", seq=2)
    assert "maybe" in r.detail


def test_a_step_that_disagrees_with_the_plan_is_corrupt_and_names_both_tools():
    d = classify(facts(step(1), step(2, "dispatched", "notify", tool="bash"), plan=plan_of(["file_read", "fetch"])))
    r = assert_corrupt(d, "plan_mismatch", seq=2)
    assert "bash" in r.detail and "fetch" in r.detail


def test_a_step_beyond_the_plan_is_corrupt():
    d = classify(facts(step(1), step(2), step(3, "dispatched"), plan=plan_of(["file_read", "file_read"])))
    r = assert_corrupt(d, "step_not_in_plan", seq=3)
    assert "2 steps" in r.detail


@pytest.mark.parametrize("plan", [None, [], {"steps": "file_read"}, {"plan": []}], ids=repr)
def test_an_unreadable_plan_is_corrupt(plan):
    d = classify(RunFacts(run_id=7, status="interrupted", plan=plan, steps=(step(1),)))
    assert_corrupt(d, "unreadable_plan")


def test_a_nested_step_whose_parent_is_missing_is_corrupt():
    d = classify(facts(step(1), step(5, "completed", parent_seq=4), plan=plan_of(["file_read"])))
    assert_corrupt(d, "orphan_step", seq=5)


def test_corruption_wins_over_an_unknown_outcome_and_every_finding_is_reported():
    d = classify(
        facts(
            step(1, "completed", dispatched_at=None),
            step(2, "dispatched", "notify"),
            step(3, "sideways"),
            plan=plan_of(["file_read", "file_write", "file_read"]),
        )
    )
    assert d.disposition == c.CORRUPT
    codes = {(r.code, r.seq) for r in d.reasons}
    assert {("result_without_dispatch", 1), ("unknown_phase", 3)} <= codes


# --- bounds ----------------------------------------------------------------------------------


def test_an_operation_interrupted_in_an_earlier_run_of_the_chain_is_not_retried_again():
    d = classify(
        facts(step(1), step(2, "dispatched", "replay", tool="fetch"), chain_length=2, earlier_interruptions={2: 1})
    )
    assert d.disposition == c.EXHAUSTED
    r = reason(d, "interrupted_twice")
    assert r.seq == 2 and "fetch" in r.detail


@pytest.mark.parametrize("mode", ["replay", "notify", "forget"])
def test_interrupted_twice_applies_to_every_mode(mode):
    d = classify(facts(step(1), step(2, "dispatched", mode), chain_length=3, earlier_interruptions={2: 1}))
    assert d.disposition == c.EXHAUSTED
    assert [r.code for r in d.reasons] == ["interrupted_twice"]


def test_a_verified_stop_is_not_an_interruption_and_counts_against_no_bound():
    """Issue 20, item 2: a run that ended `stopped` (with a receipt) left its step dispatched on purpose."""
    stopped = classify(
        facts(step(1), step(2, "dispatched", "replay"), status="stopped", chain_length=3, earlier_interruptions={2: 1})
    )
    assert stopped.disposition == c.AUTO_RESUMABLE and stopped.reasons == ()
    # The same cut-off in an interrupted run, after one earlier interruption, is the bound.
    cut = classify(facts(step(1), step(2, "dispatched", "replay"), chain_length=3, earlier_interruptions={2: 1}))
    assert cut.disposition == c.EXHAUSTED


def test_an_earlier_interruption_of_another_step_does_not_exhaust():
    d = classify(facts(step(1), step(2), step(3, "dispatched"), chain_length=2, earlier_interruptions={2: 1}))
    assert d.disposition == c.AUTO_RESUMABLE


def test_a_step_interrupted_before_that_was_since_completed_does_not_exhaust():
    d = classify(facts(step(1), step(2), chain_length=2, earlier_interruptions={2: 1}))
    assert d.disposition == c.AUTO_RESUMABLE


def test_a_chain_of_32_runs_is_exhausted():
    d = classify(facts(step(1), step(2, "planned"), chain_length=32))
    assert d.disposition == c.EXHAUSTED
    r = reason(d, "chain_exhausted")
    assert "32" in r.detail


def test_a_chain_of_31_runs_may_still_continue():
    assert classify(facts(step(1), step(2, "planned"), chain_length=31)).disposition == c.AUTO_RESUMABLE


def test_a_run_whose_recovery_is_disabled_needs_a_decision_and_says_why():
    why = "The result of step 1 exceeded 8 MiB and could not be checkpointed."
    d = classify(facts(step(1, has_result=False), step(2, "planned"), recovery_disabled=why))
    assert d.disposition == c.NEEDS_DECISION
    assert [r.as_dict() for r in d.reasons] == [{"code": "checkpoint_too_large", "detail": why}]


def test_blocking_reasons_are_specific_never_one_generic_error():
    d = classify(
        facts(
            step(1, "dispatched", "notify", tool="file_write", args={"path": "a"}, dispatched_at=at(1)),
            step(2, "planned", "notify", tool="file_write", args={"path": "b"}),
        )
    )
    assert d.disposition == c.NEEDS_DECISION
    assert [(r.code, r.seq) for r in d.reasons] == [("unknown_outcome", 1)]
    detail = d.reasons[0].detail
    assert "file_write with path “a”" in detail and '{"' not in detail and at(1).isoformat() not in detail


# --- properties -------------------------------------------------------------------------------

PHASES = [*c.PHASES, "bogus"]
MODES = [*c.MODES, "bogus"]


@st.composite
def runs(draw):
    n = draw(st.integers(min_value=0, max_value=8))
    steps = []
    for seq in range(1, n + 1):
        phase = draw(st.sampled_from(PHASES))
        mode = draw(st.sampled_from(MODES))
        dispatched = None if phase == "planned" else draw(st.sampled_from([at(seq * 10), at(seq * 10), None]))
        completed = at(seq * 10 + 1) if phase in ("completed", "failed") else None
        steps.append(
            StepFacts(
                seq=seq,
                tool=TOOLS.get(mode, "file_read"),
                args=draw(st.sampled_from([{}, {"path": "p"}, ["x"]])),
                phase=phase,
                recovery_mode=mode,
                has_result=draw(st.booleans()),
                result_readable=draw(st.sampled_from([True, True, True, False])),
                dispatched_at=dispatched,
                completed_at=completed,
            )
        )
    earlier = draw(st.dictionaries(st.integers(1, 8), st.integers(0, 2), max_size=3))
    return RunFacts(
        run_id=1,
        status=draw(st.sampled_from(["interrupted", "stopped"])),
        plan={"steps": [{"tool": s.tool, "args": {}} for s in steps]},
        steps=tuple(steps),
        chain_length=draw(st.integers(1, 33)),
        earlier_interruptions=earlier,
    )


@settings(max_examples=300, deadline=None, database=None)
@given(runs())
def test_an_unknown_outcome_is_never_classified_replayable_and_auto_resume_means_every_step_is_safe(facts_):
    d = classify(facts_)
    by_seq = {s.seq: s for s in facts_.steps}
    for v in d.steps:
        s = by_seq[v.seq]
        if v.verdict in (c.REPLAY, c.NOT_DISPATCHED, c.DROP):
            assert not (s.recovery_mode == "notify" and s.phase == "dispatched"), (s, v)
        if s.recovery_mode == "notify" and s.phase == "dispatched":
            assert v.verdict in (c.UNKNOWN_OUTCOME, c.CORRUPT), (s, v)
    if d.disposition == c.AUTO_RESUMABLE:
        assert not {v.verdict for v in d.steps} & {c.UNKNOWN_OUTCOME, c.CORRUPT}
        assert all(v.reason != "failed" for v in d.steps)
        assert d.reasons == ()
    else:
        assert d.reasons, "a blocking disposition always carries its reasons"
