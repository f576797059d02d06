"""Pure: the facts of a task and an action in, the first closed gate out.

Evaluated at the moment of every admission (a retry, a decision, an automatic
continuation), never only when a card was drawn.
"""

from dataclasses import dataclass

from recovery.rules.breaker import BreakerFacts
from tasks.holds import Hold, TaskFacts, task_hold

CHAIN_MAX_RUNS = 32
# Exhaustions that bound a step's attempts: only an admin's grant admits one more (`overdue` is a deadline, not a
# bound). Continue now, a follow-up and bulk continue are refused by them (gate `attempts_exhausted`).
BOUNDS = ("interrupted_twice", "attempts_used", "chain_exhausted")


@dataclass(frozen=True)
class AdmissionFacts:
    task: TaskFacts
    current_owner: str
    original_owner: str | None = None
    source_lease_live: bool = False
    source_run_id: int | None = None
    attempts: int = 0
    max_attempts: int | None = None
    chain_length: int = 1
    # A live workspace action of the task (its id and kind): it holds every continuation.
    workspace_action: int | None = None
    workspace_kind: str = ""
    # A recovery breaker in force on the task's agent (recovery.rules.breaker): it holds every continuation.
    breaker: BreakerFacts | None = None


def workspace_hold(action_id: int, kind: str) -> Hold:
    """The workspace hold: what holds, and the admin's repair control that lifts it."""
    if kind == "workspace_export":
        return Hold(
            "workspace_hold",
            f"Recovery action #{action_id}: copying the workspace to its export destination failed.",
            f"an admin, with Retry export on recovery action #{action_id}",
        )
    return Hold(
        "workspace_hold",
        f"Recovery action #{action_id}: the workspace differs from what its checkpoints recorded.",
        f"an admin, with Reconcile or Isolated reissue on recovery action #{action_id}",
    )


def first_closed_gate(facts: AdmissionFacts) -> Hold | None:
    hold = task_hold(facts.task)
    if hold is not None:
        return hold
    if facts.workspace_action is not None:
        return workspace_hold(facts.workspace_action, facts.workspace_kind)
    if facts.original_owner is not None and facts.current_owner != facts.original_owner:
        return Hold(
            "owner_changed",
            f"The task moved from {facts.original_owner} to {facts.current_owner} after this action opened.",
            f"an operator: reassign the task back to {facts.original_owner}, or cancel this action and use "
            "Continue now under the new owner",
        )
    if facts.source_lease_live:
        return Hold(
            "lease_live",
            f"Run #{facts.source_run_id} still holds a live lease: its worker may still be running it.",
            "nobody: it ends when the worker finishes or its lease lapses",
        )
    if facts.max_attempts is not None and facts.attempts >= facts.max_attempts:
        return Hold(
            "attempts_exhausted",
            f"All {facts.max_attempts} attempts are used.",
            "an admin, with Grant one more attempt",
        )
    if facts.chain_length >= CHAIN_MAX_RUNS:
        return Hold(
            "chain_exhausted",
            f"This chain already holds {facts.chain_length} runs (verified stops not counted), the most it may.",
            "nobody: start over or close the task",
        )
    if facts.breaker is not None:
        return Hold(
            "breaker_open",
            f"{facts.breaker.sentence()} (breaker #{facts.breaker.breaker_id})",
            f"an admin, with Close on breaker #{facts.breaker.breaker_id}"
            + ("" if facts.breaker.state == "half_open" else ", or its cool-off"),
        )
    return None
