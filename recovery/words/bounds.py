"""An exhausted bound in words: why a task is not retried again, and the gate it is to Continue now."""

from recovery.words.vocabulary import cause
from tasks.batches import NESTED_BASE


def exhaustion_words(action) -> str:
    reasons = (action.evidence or {}).get("reasons") or []
    seqs = [r.get("seq") for r in reasons if r.get("code") == "interrupted_twice" and r.get("seq")]
    if action.exhaustion == "interrupted_twice" and seqs:
        steps = " and ".join(
            f"item {s % NESTED_BASE} of step {s // NESTED_BASE}" if s >= NESTED_BASE else f"step {s}" for s in seqs
        )
        return f"{steps.capitalize()} was interrupted twice in this chain, so it is not retried automatically again."
    if action.exhaustion == "chain_exhausted":
        return "This task has been continued the most times a chain may (32 runs)."
    if action.exhaustion == "attempts_used":
        return f"All {action.max_attempts} attempts were used and the run still did not continue."
    if action.exhaustion == "overdue":
        return "Nobody acted on it before it was due."
    return cause(action.cause)


def bound_hold(action):
    """The gate an exhausted bound is to Continue now (and bulk continue), and who lifts it: the grant its card
    names, on that action. Never "ask again": repeating a request does not get past a bound."""
    from tasks.holds import Hold

    exhausted = exhaustion_words(action)
    if action.exhaustion == "chain_exhausted":
        return Hold(
            "chain_exhausted",
            f"{exhausted} Continue now cannot add a run to it (recovery action #{action.pk}).",
            "nobody: start over or close the task",
        )
    return Hold(
        "attempts_exhausted",
        f"{exhausted} Continue now does not get past that bound: recovery action #{action.pk} waits for an admin.",
        f"an admin, with Grant one more attempt on recovery action #{action.pk}",
    )
