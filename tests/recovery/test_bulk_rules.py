"""The pure bulk rules: what an action would do to one task, what changed since a preview, the scope's hash."""

from dataclasses import replace

import pytest

from recovery.rules.breaker import BreakerFacts
from recovery.rules.bulk import ActionFacts, ItemFacts, Params, ScopeHash, changes, seen, verdict
from tasks.holds import TaskFacts


def action(id=1, kind="unknown_outcome", status="open", version=1, cause="unknown_outcome", **extra) -> ActionFacts:
    fields = {"original_owner": "builder", "attempts": 0, "max_attempts": 2, **extra}
    return ActionFacts(id=id, kind=kind, status=status, version=version, cause=cause, **fields)


def facts(*actions, state="needs_decision", status="blocked", paused=False, run_status="interrupted", **task):
    return ItemFacts(
        task=TaskFacts(task_id=7, status=status, paused=paused, budget_limit=None, budget_used=0, **task),
        state=state,
        owner="builder",
        run_id=3,
        run_status=run_status,
        actions=tuple(actions),
    )


CONSENT = Params(accept_duplicate_risk=True)


def test_pause_and_resume():
    assert verdict("pause", Params(), facts()).applies
    assert verdict("pause", Params(), facts(paused=True)).refusal == "already_paused"
    assert verdict("pause", Params(), facts(status="done")).refusal == "task_closed"
    assert verdict("resume", Params(), facts(paused=True)).applies
    assert verdict("resume", Params(), facts()).refusal == "not_paused"


def test_continue_now_is_refused_as_the_single_click_refuses_it():
    idle = facts(state="idle", status="todo", run_status="failed")
    assert verdict("continue", Params(), idle).applies
    assert verdict("continue", Params(), facts(action())).refusal == "needs_decision"
    held = facts(action(kind="workspace_validation", cause="workspace_validation_failed"))
    assert verdict("continue", Params(), held).refusal == "workspace_hold"
    assert verdict("continue", Params(), facts(state="running", run_status="running")).refusal == "run_live"
    assert verdict("continue", Params(), facts(state="done", run_status="succeeded")).refusal == "nothing_to_continue"
    assert verdict("continue", Params(), facts(state="blocked", status="todo", paused=True)).refusal == "task_paused"
    assert verdict("continue", Params(), facts(status="cancelled")).refusal == "task_closed"
    # An exhausted bound names its gate (only an admin's grant lifts it); a due time is not a bound.
    bound = action(kind="continuation", status="exhausted", cause="interrupted_twice", exhaustion="interrupted_twice")
    assert verdict("continue", Params(), facts(bound)).refusal == "attempts_exhausted"
    overdue = action(kind="continuation", status="exhausted", cause="auto_resume_off", exhaustion="overdue")
    assert verdict("continue", Params(), facts(overdue)).refusal == "needs_decision"


def test_retry_targets_the_open_action_and_needs_consent_for_an_unknown_outcome():
    v = verdict("retry", Params(), facts(action()))
    assert v.refusal == "duplicate_risk_not_accepted" and v.action.id == 1
    assert verdict("retry", CONSENT, facts(action())).applies
    continuation = action(id=2, kind="continuation", cause="auto_resume_off")
    assert verdict("retry", Params(), facts(continuation)).applies  # nothing of unknown outcome reruns
    assert verdict("retry", CONSENT, facts(action(status="exhausted"))).refusal == "exhausted"
    assert verdict("retry", CONSENT, facts(action(cause="checkpoint_purged"))).refusal == "recovery_unavailable"
    workspace = action(kind="workspace_validation", cause="workspace_validation_failed")
    assert verdict("retry", CONSENT, facts(workspace)).refusal == "workspace_action"
    assert verdict("retry", CONSENT, facts(state="idle")).refusal == "no_open_action"


@pytest.mark.parametrize(
    "case,expected",
    [
        ({"paused": True}, "task_paused"),
        ({"paused_ancestors": (4,)}, "ancestor_paused"),
        ({"open_dependencies": (5,)}, "dependency_open"),
        ({"owner": "reviewer"}, "owner_changed"),
        ({"lease": True}, "lease_live"),
        ({"attempts": 2}, "attempts_exhausted"),
        ({"workspace": True}, "workspace_hold"),
    ],
)
def test_every_gate_of_an_admission_is_predicted(case, expected):
    target = action(source_lease_live=case.get("lease", False), attempts=case.get("attempts", 0))
    others = [action(id=9, kind="workspace_export", cause="export_failed")] if case.get("workspace") else []
    task = {k: case[k] for k in ("paused", "paused_ancestors", "open_dependencies") if k in case}
    item = facts(target, *others, **task)
    if "owner" in case:
        item = ItemFacts(item.task, item.state, case["owner"], item.run_id, item.run_status, item.actions)
    for name, params in (("retry", CONSENT), ("decide", Params(outcome="performed"))):
        v = verdict(name, params, item)
        assert v.refusal == expected and "Lifted by" in v.detail, (name, v)


def test_decide_targets_the_open_unknown_outcome_and_unresolved_needs_no_gate():
    paused = facts(action(), paused=True)
    assert verdict("decide", Params(outcome="unresolved"), paused).applies
    assert verdict("decide", Params(outcome="performed"), paused).refusal == "task_paused"
    assert verdict("decide", Params(outcome="not_performed"), facts(action())).refusal == "duplicate_risk_not_accepted"
    assert verdict("decide", Params(outcome="not_performed", accept_duplicate_risk=True), facts(action())).applies
    assert verdict("decide", Params(outcome="performed"), facts(action(kind="continuation"))).refusal == (
        "no_unknown_outcome"
    )


def test_cancel_targets_the_waiting_action_else_any_live_one():
    assert verdict("cancel", Params(), facts(action(id=4, status="retrying"), action(id=3))).action.id == 3
    assert verdict("cancel", Params(), facts(action(id=4, status="retrying"))).action.id == 4
    assert verdict("cancel", Params(), facts()).refusal == "no_live_action"


def test_what_changed_since_the_preview():
    before = facts(action())
    then = seen(before, verdict("decide", Params(outcome="performed"), before))
    decided = facts(action(status="retrying", version=2), state="queued", run_status="queued")
    now = seen(decided, verdict("decide", Params(outcome="performed"), decided))
    assert {f for f, _, _ in changes(then, now)} == {"state", "run_status", "action", "action_version", "action_status"}
    # A running run's progress is not a change; a pause is.
    assert changes(then, then) == []
    paused = facts(action(), paused=True)
    assert changes(then, seen(paused, verdict("decide", Params(outcome="performed"), paused))) == [
        ("paused", False, True)
    ]


def test_the_scope_hash_binds_the_action_its_parameters_and_every_item_in_order():
    def digest(action="pause", params=None, items=((1, None), (2, None))):
        h = ScopeHash(action, params or {})
        for task, version in items:
            h.add(task=task, action=None, version=version, seen={"state": "idle"})
        return h.hexdigest()

    assert digest() == digest() and len(digest()) == 64
    assert digest() != digest(action="resume")
    assert digest() != digest(params={"note": "x"})
    assert digest() != digest(items=((2, None), (1, None)))
    assert digest() != digest(items=((1, None), (2, 1)))


def test_a_breaker_in_force_on_the_agent_is_predicted_as_the_refusal_of_a_continuation():
    breaker = BreakerFacts(
        breaker_id=4, agent="builder", signature="http_post / lease_lapsed", tasks=11, span_seconds=60, state="open"
    )
    held = replace(facts(state="blocked"), breaker=breaker)
    assert verdict("continue", Params(), held).refusal == "breaker_open"
    decided = replace(facts(action()), breaker=breaker)
    assert verdict("decide", Params(outcome="performed"), decided).refusal == "breaker_open"
    assert verdict("pause", Params(), held).applies, "pausing is no continuation"
