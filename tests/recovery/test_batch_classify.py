"""classify() of batches (foreach) item by item, the batch wording, and "recovery unavailable". Pure."""

from recovery.rules import batches
from recovery.rules import classify as c
from recovery.rules.classify import classify
from tasks.batches import item_args, parse_batch
from tests.recovery.facts import facts, reason, step

READ = {"tool": "file_read", "args": {"path": "{{item}}.txt"}}
WRITE = {"tool": "file_write", "args": {"path": "{{item}}.txt", "content": "row {{item}}"}}
ITEMS = ["a", "b", "c", "d", "e"]
ABC, AB = ["a", "b", "c"], ["a", "b"]


def batch_plan(do=READ, items=ITEMS, *rest) -> dict:
    return {"steps": [{"tool": "foreach", "args": {"items": items, "do": do}}, *rest]}


def item(position, phase="completed", mode="replay", *, do=READ, items=ITEMS, parent=1, **extra):
    batch = parse_batch({"items": items, "do": do})
    return step(
        parent * 100_000 + position,
        phase,
        mode,
        tool=batch.tool,
        args=item_args(batch, position),
        parent_seq=parent,
        **extra,
    )


def foreach(phase="dispatched", mode="notify", *, do=READ, items=ITEMS, seq=1, **extra):
    return step(seq, phase, mode, tool="foreach", args={"items": items, "do": do}, **extra)


def the(diagnosis, seq):
    return next(v for v in diagnosis.steps if v.seq == seq)


def test_a_batch_cut_off_during_item_3_resumes_reusing_items_1_and_2():
    d = classify(facts(foreach(), item(1), item(2), item(3, "dispatched"), plan=batch_plan()))
    assert d.disposition == c.AUTO_RESUMABLE and d.reasons == ()
    v = the(d, 1)
    assert (v.verdict, v.reason) == (c.REPLAY, "batch_resumes")
    assert v.detail == "The batch resumes: items 1–2 reused, item 3 runs again (replay), items 4–5 not started."
    assert [the(d, s).verdict for s in (100_001, 100_002, 100_003)] == [c.REUSE, c.REUSE, c.REPLAY]


def test_an_item_of_a_notify_tool_cut_off_after_dispatch_is_a_decision_about_that_item():
    d = classify(
        facts(foreach(do=WRITE), item(1, do=WRITE), item(2, "dispatched", "notify", do=WRITE), plan=batch_plan(WRITE))
    )
    assert d.disposition == c.NEEDS_DECISION
    r = reason(d, "unknown_outcome")
    assert r.seq == 100_002  # the item, not the batch
    assert "Item 2 of the batch, file_write" in r.detail and "with path “b.txt”, content “row b”" in r.detail
    assert "item 1 reused, item 2 may or may not have happened (unknown outcome), items 3–5 not started" in r.detail
    assert the(d, 1).verdict == c.UNKNOWN_OUTCOME


def test_a_saved_item_failure_stays_failed_and_does_not_stop_the_resume():
    d = classify(
        facts(
            foreach(),
            item(1, "failed", error="no such file"),
            item(2),
            item(3, "dispatched"),
            plan=batch_plan(),
        )
    )
    assert d.disposition == c.AUTO_RESUMABLE
    assert the(d, 1).detail.startswith(
        "The batch resumes: item 1 failed (the saved failure is kept; not retried), item 2 reused, item 3 runs again"
    )
    assert (the(d, 100_001).verdict, the(d, 100_001).reason) == (c.REUSE, "failed")


def test_an_item_whose_mode_forgets_it_is_dropped_and_an_item_planned_but_not_dispatched_never_started():
    d = classify(
        facts(
            foreach(items=ABC),
            item(1, items=ABC),
            item(2, "dispatched", "forget", items=ABC),
            plan=batch_plan(items=ABC),
        )
    )
    assert d.disposition == c.AUTO_RESUMABLE
    assert "item 2 dropped (its recovery mode forgets it), item 3 not started" in the(d, 1).detail
    d = classify(facts(foreach(items=AB), item(1, items=AB), item(2, "planned", items=AB), plan=batch_plan(items=AB)))
    assert "item 1 reused, item 2 not started" in the(d, 1).detail


def test_items_an_earlier_continuation_dropped_are_said_dropped_not_unstarted():
    d = classify(facts(foreach(items=ABC), item(1, reused=True), plan=batch_plan(items=ABC), dropped=(100_002,)))
    assert "item 1 reused, item 2 dropped (its recovery mode forgets it), item 3 not started" in the(d, 1).detail


def test_progress_across_runs_is_not_a_repeat_but_the_same_item_cut_off_twice_is():
    cut = facts(foreach(), item(1), item(2), item(3, "dispatched"), plan=batch_plan())
    # The batch was cut off in the earlier run too, at item 1: progress since, so it resumes.
    again = c.RunFacts(**{**cut.__dict__, "earlier_interruptions": {1: 1, 100_001: 1}, "chain_length": 2})
    assert classify(again).disposition == c.AUTO_RESUMABLE
    twice = c.RunFacts(**{**cut.__dict__, "earlier_interruptions": {1: 1, 100_003: 1}, "chain_length": 2})
    d = classify(twice)
    assert d.disposition == c.EXHAUSTED
    r = reason(d, "interrupted_twice")
    assert r.seq == 100_003 and r.detail.startswith("Item 3 of step 1 (file_read)")


def test_an_item_that_is_not_what_its_batch_asks_for_is_a_contradiction():
    wrong = step(100_002, "completed", tool="file_read", args={"path": "zzz.txt"}, parent_seq=1)
    d = classify(facts(foreach(), item(1), wrong, plan=batch_plan()))
    assert d.disposition == c.CORRUPT
    assert reason(d, "item_mismatch").seq == 100_002
    beyond = item(6, items=[*ITEMS, "f"])
    d = classify(facts(foreach(), item(1), beyond, plan=batch_plan()))
    assert reason(d, "item_not_in_batch").seq == 100_006


def test_reused_items_wait_for_their_batch_to_be_planned_again():
    # A continuation that crashed before it planned the batch again: its carried items are not orphans.
    d = classify(facts(item(1, reused=True), item(2, reused=True), plan=batch_plan()))
    assert d.disposition == c.AUTO_RESUMABLE


def test_a_foreach_nested_in_a_subagent_is_one_call_retried_as_a_whole():
    inner = {"items": ["x", "y"], "do": READ}
    sub = step(1, "dispatched", "notify", tool="subagent", args={"agent": "scout", "input": {"steps": []}})
    plan = {"steps": [{"tool": "subagent", "args": sub.args}]}
    nested_notify = step(100_001, "dispatched", "notify", tool="foreach", args=inner, parent_seq=1)
    d = classify(facts(sub, nested_notify, plan=plan))
    assert d.disposition == c.NEEDS_DECISION and the(d, 1).verdict == c.UNKNOWN_OUTCOME
    assert "nested foreach" in the(d, 1).detail
    nested_replay = step(100_001, "dispatched", "replay", tool="foreach", args=inner, parent_seq=1)
    d = classify(facts(sub, nested_replay, plan=plan))
    assert d.disposition == c.AUTO_RESUMABLE
    assert the(d, 1).reason == "subagent_resumes" and the(d, 100_001).verdict == c.REPLAY  # the whole foreach


def test_a_top_level_foreach_whose_mode_is_forget_is_dropped_whole():
    d = classify(facts(foreach(mode="forget"), item(1), plan=batch_plan()))
    assert the(d, 1).verdict == c.DROP


# --- wording -------------------------------------------------------------------------------


def test_the_batch_sentence_groups_neighbouring_items():
    s = batches
    assert s.batch_summary([s.REUSED, s.REUSED, s.REPLAY, s.NOT_STARTED, s.NOT_STARTED]) == (
        "items 1–2 reused, item 3 runs again (replay), items 4–5 not started"
    )
    assert s.batch_summary([s.FAILED]) == "item 1 failed (the saved failure is kept; not retried)"
    assert s.batch_summary([]) == "no items"
    assert s.item_states(4, {1: s.REUSED, 3: s.UNKNOWN_OUTCOME}, dropped=[2]) == [
        s.REUSED,
        s.DROPPED,
        s.UNKNOWN_OUTCOME,
        s.NOT_STARTED,
    ]
    assert s.item_state("corrupt") == s.UNKNOWN_OUTCOME  # nothing unknown is claimed safe


# --- recovery unavailable ----------------------------------------------------------------------


KNOWN = frozenset({"file_read", "file_write", "sleep", "foreach", "subagent"})


def test_a_tool_the_run_used_that_the_worker_no_longer_knows_makes_recovery_unavailable():
    scrape = {"tool": "scrape_v1", "args": {"url": "x"}}
    plan = {"steps": [scrape, {"tool": "file_read", "args": {"path": "f2.txt"}}, scrape]}
    d = classify(
        facts(step(1, tool="scrape_v1", args={"url": "x"}), step(2, "dispatched"), plan=plan, known_tools=KNOWN)
    )
    assert d.disposition == c.NEEDS_DECISION
    r = reason(d, "tool_unknown")
    assert r.seq == 3 and "scrape_v1" in r.detail and "tool set changed since the run" in r.detail
    assert "tool_unknown" in c.UNAVAILABLE


def test_a_tool_that_never_ran_is_not_claimed_to_have_changed():
    # No saved step proves the worker ever knew it: the continuation fails it as the run would have.
    plan = {"steps": [{"tool": "file_read", "args": {"path": "f1.txt"}}, {"tool": "custom_tool", "args": {}}]}
    d = classify(facts(step(1, "dispatched"), plan=plan, known_tools=KNOWN))
    assert d.disposition == c.AUTO_RESUMABLE


def test_a_batch_whose_item_tool_is_gone_is_unavailable_but_a_reused_step_needs_no_tool():
    gone = {"tool": "gone", "args": {}}
    d = classify(
        facts(
            foreach(do=gone), item(1, do=gone), item(2, "dispatched", do=gone), plan=batch_plan(gone), known_tools=KNOWN
        )
    )
    assert reason(d, "tool_unknown").detail.startswith("Each item of step 1 calls gone")
    plan = {"steps": [{"tool": "old_tool", "args": {"path": "f1.txt"}}, {"tool": "sleep", "args": {}}]}
    d = classify(facts(step(1, tool="old_tool"), step(2, "dispatched", tool="sleep"), plan=plan, known_tools=KNOWN))
    assert d.disposition == c.AUTO_RESUMABLE


def test_a_subagent_whose_agent_no_longer_exists_makes_recovery_unavailable():
    sub = step(1, "dispatched", "notify", tool="subagent", args={"agent": "scout", "input": {"steps": []}})
    d = classify(facts(sub, known_tools=KNOWN, agents=frozenset({"builder"})))
    r = reason(d, "agent_missing")
    assert r.seq == 1 and "scout" in r.detail and d.disposition == c.NEEDS_DECISION


def test_purged_checkpoints_are_said_before_anything_else():
    d = classify(facts(step(1, "dispatched"), checkpoint_purged="Purged after 30 days."))
    assert [r.as_dict() for r in d.reasons] == [{"code": "checkpoint_purged", "detail": "Purged after 30 days."}]
    assert d.disposition == c.NEEDS_DECISION
