"""Pure: what one bulk action would do to one task, from facts read for it. No ORM here.

The preview calls `verdict` to say what would be refused and why; execution
calls it again on facts read at that moment, and compares `seen` with what the
preview saw: an item that changed in between is skipped, never acted on. The
services each item goes through re-check their own gates and versions too;
this module only predicts them (and says why in the same reason codes).
"""

import hashlib
import json
from dataclasses import dataclass

from recovery.rules import classify as c
from recovery.rules.breaker import BreakerFacts
from recovery.rules.classify import WORKSPACE_KINDS
from recovery.rules.gates import BOUNDS, AdmissionFacts, first_closed_gate
from tasks.holds import Hold, TaskFacts, task_hold

ACTIONS = ("retry", "cancel", "pause", "resume", "continue", "decide")
OUTCOMES = ("performed", "not_performed", "unresolved", "agent_verifies")  # the last: agent runs only
LIVE_RUN = ("queued", "running", "stopping")
CLOSED = ("done", "cancelled")


@dataclass(frozen=True)
class ActionFacts:
    """A live recovery action of the task, as the gates need it."""

    id: int
    kind: str
    status: str
    version: int
    cause: str
    original_owner: str
    attempts: int
    max_attempts: int
    source_lease_live: bool = False
    exhaustion: str = ""  # why an exhausted action is exhausted: a bound, or its due time
    run_kind: str = "plan"  # the kind of the action's run: only an agent run's agent can verify a call itself


@dataclass(frozen=True)
class ItemFacts:
    task: TaskFacts
    state: str  # the one vocabulary of task states (recovery.words.task.task_state)
    owner: str  # the task's agent now
    run_id: int | None  # the latest run
    run_status: str
    actions: tuple[ActionFacts, ...] = ()  # live actions, newest first
    breaker: BreakerFacts | None = None  # a recovery breaker in force on the task's agent: it holds continuations


@dataclass(frozen=True)
class Params:
    outcome: str = ""
    note: str = ""
    accept_duplicate_risk: bool = False


@dataclass(frozen=True)
class Verdict:
    """The action the item acts on (if any), or why it would be refused ("" = it would apply)."""

    action: ActionFacts | None = None
    refusal: str = ""
    detail: str = ""

    @property
    def applies(self) -> bool:
        return not self.refusal


def _gate(hold: Hold | None) -> Verdict | None:
    return Verdict(refusal=hold.gate, detail=f"{hold.detail} Lifted by {hold.lifted_by}.") if hold else None


def _admission_gate(facts: ItemFacts, action: ActionFacts) -> Hold | None:
    workspace = next((a for a in facts.actions if a.kind in WORKSPACE_KINDS and a.id != action.id), None)
    return first_closed_gate(
        AdmissionFacts(
            task=facts.task,
            current_owner=facts.owner,
            original_owner=action.original_owner,
            source_lease_live=action.source_lease_live,
            attempts=action.attempts,
            max_attempts=action.max_attempts,
            workspace_action=workspace.id if workspace else None,
            workspace_kind=workspace.kind if workspace else "",
            breaker=facts.breaker,
        )
    )


def _waiting(facts: ItemFacts) -> list[ActionFacts]:
    return [a for a in facts.actions if a.status in ("open", "exhausted")]


def verdict(action: str, params: Params, facts: ItemFacts) -> Verdict:
    """What `action` would do to this task now: its target action, or the first reason it would be refused."""
    if action == "pause":
        if facts.task.status in CLOSED:
            return Verdict(refusal="task_closed")
        return Verdict(refusal="already_paused") if facts.task.paused else Verdict()
    if action == "resume":
        return Verdict() if facts.task.paused else Verdict(refusal="not_paused")
    if action == "continue":
        return _continue(facts)
    if action == "cancel":
        live = _waiting(facts) or list(facts.actions)
        return Verdict(action=live[0]) if live else Verdict(refusal="no_live_action")
    if action == "retry":
        return _retry(params, facts)
    if action == "decide":
        return _decide(params, facts)
    raise ValueError(f"unknown bulk action {action!r}")


def _continue(facts: ItemFacts) -> Verdict:
    if facts.task.status in CLOSED:
        return _gate(task_hold(facts.task))
    workspace = next((a for a in facts.actions if a.kind in WORKSPACE_KINDS), None)
    if workspace is not None:
        return Verdict(refusal="workspace_hold", detail=f"Recovery action #{workspace.id} holds the workspace.")
    # A bound (not a due time) holds it: only the admin's grant on that action gets past it (recovery.actions.controls).
    bound = next((a for a in facts.actions if a.status == "exhausted" and a.exhaustion in BOUNDS), None)
    if bound is not None:
        gate = "chain_exhausted" if bound.exhaustion == "chain_exhausted" else "attempts_exhausted"
        return Verdict(refusal=gate, detail=f"Recovery action #{bound.id} is exhausted: it waits for an admin.")
    if facts.actions:
        return Verdict(refusal="needs_decision", detail=f"Recovery action #{facts.actions[0].id} decides it.")
    if facts.run_id is None or facts.run_status == "succeeded":
        return Verdict(refusal="nothing_to_continue")
    if facts.run_status in LIVE_RUN:
        return Verdict(refusal="run_live")
    if facts.breaker is not None:
        b = facts.breaker
        return Verdict(
            refusal="breaker_open",
            detail=f"Recovery breaker #{b.breaker_id} paused recovery of {b.agent}'s tasks; an admin closes it.",
        )
    return _gate(task_hold(facts.task)) or Verdict()


def _retry(params: Params, facts: ItemFacts) -> Verdict:
    waiting = _waiting(facts)
    candidates = [a for a in waiting if a.kind not in WORKSPACE_KINDS]
    if not candidates:
        return Verdict(refusal="workspace_action" if waiting else "no_open_action")
    target = candidates[0]
    if target.status == "exhausted":
        return Verdict(action=target, refusal="exhausted")
    if target.cause in c.NOT_RECOVERABLE:
        return Verdict(action=target, refusal="recovery_unavailable")
    return _admission(target, facts, params, reruns_unknown=target.kind == "unknown_outcome")


def _decide(params: Params, facts: ItemFacts) -> Verdict:
    target = next((a for a in facts.actions if a.kind == "unknown_outcome" and a.status == "open"), None)
    if target is None:
        return Verdict(refusal="no_unknown_outcome")
    if params.outcome == "unresolved":
        return Verdict(action=target)
    if params.outcome == "agent_verifies" and target.run_kind != "agent":
        return Verdict(action=target, refusal="not_agent_run")
    return _admission(target, facts, params, reruns_unknown=params.outcome == "not_performed")


def _admission(target: ActionFacts, facts: ItemFacts, params: Params, *, reruns_unknown: bool) -> Verdict:
    """A continuation's admission: the consent a rerun of an unknown outcome needs, then every gate."""
    if reruns_unknown and not params.accept_duplicate_risk:
        return Verdict(action=target, refusal="duplicate_risk_not_accepted")
    gate = _gate(_admission_gate(facts, target))
    if gate is not None:
        return Verdict(action=target, refusal=gate.refusal, detail=gate.detail)
    return Verdict(action=target)


# --- what the preview saw ----------------------------------------------------------------

SEEN_FIELDS = ("state", "paused", "run", "run_status", "action", "action_version", "action_status")


def seen(facts: ItemFacts, v: Verdict) -> dict:
    """The facts an item is frozen with. A step checkpointed by a running run is not a change; a new state,
    a pause, another run or a changed target action is."""
    target = v.action
    return {
        "state": facts.state,
        "paused": facts.task.paused,
        "run": facts.run_id,
        "run_status": facts.run_status,
        "action": target.id if target else None,
        "action_version": target.version if target else None,
        "action_status": target.status if target else None,
    }


def changes(then: dict, now: dict) -> list[tuple[str, object, object]]:
    """(field, at the preview, now) for every frozen fact that differs."""
    return [(f, then.get(f), now.get(f)) for f in SEEN_FIELDS if then.get(f) != now.get(f)]


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


class ScopeHash:
    """sha256 over the action, its parameters and every frozen item in scope order, fed one item at a time."""

    def __init__(self, action: str, params: dict):
        self._h = hashlib.sha256(_canonical({"action": action, "params": params}))

    def add(self, *, task: int, action: int | None, version: int | None, seen: dict) -> None:
        self._h.update(b"\n" + _canonical([task, action, version, seen]))

    def hexdigest(self) -> str:
        return self._h.hexdigest()
