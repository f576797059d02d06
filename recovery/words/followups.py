"""Follow-ups in words (DESIGN §7): what a follow-up waits for, why it was refused, its badge."""

from recovery.words.bounds import bound_hold, exhaustion_words
from recovery.words.lines import At, Line
from recovery.words.vocabulary import GATES, cause
from tasks.batches import NESTED_BASE


def followup_wait_text(wait) -> str:
    """Why the task's waiting follow-ups wait now, naming the fact that ends the wait.

    (recovery.actions.followups.Wait)
    """
    k = wait.kind
    if k == "hold":
        h = wait.hold
        return f"Waiting: {GATES.get(h.gate, h.gate)} — {h.detail} Lifted by {h.lifted_by}."
    if k == "workspace":
        return f"Waiting: workspace hold — {wait.hold.detail} Lifted by {wait.hold.lifted_by}."
    if k == "run_stopping":
        return f"Waiting for run #{wait.run} to confirm it stopped; the task's next run then carries it."
    if k == "run_queued":
        return f"Waiting for run #{wait.run} to start; it carries this follow-up when a worker starts it."
    if k == "run_running":
        return f"Waiting for run #{wait.run} to finish or be stopped; the task's next run then carries it."
    if k == "action_retrying":
        return (
            f"Waiting for recovery action #{wait.action.pk}'s continuation to start; it carries this follow-up "
            "when a worker starts it."
        )
    if k == "action_open":
        return f"Waiting on recovery action #{wait.action.pk}: it needs a decision first."
    if k == "action_exhausted":
        hold = bound_hold(wait.action)
        return f"Waiting on recovery action #{wait.action.pk}: it is exhausted. Lifted by {hold.lifted_by}."
    if k == "admission":
        if wait.run is None:
            return "Waiting for the supervisor's next pass: it queues the task's plan again, which carries it."
        return (
            f"Waiting for the supervisor's next pass: it admits a continuation of run #{wait.run} that carries "
            "it, through every gate."
        )
    return _blocked_text(wait)


def _blocked_text(wait) -> str:
    """A follow-up that waits on a person settling a question about run #N first."""
    b, run = wait.blocked, wait.run
    if b.kind == "gate":
        return f"Waiting: {GATES.get(b.hold.gate, b.hold.gate)} — {b.hold.detail} Lifted by {b.hold.lifted_by}."
    if b.kind == "unknown_outcome":
        what = f"item {b.seq % NESTED_BASE} of step {b.seq // NESTED_BASE}" if b.seq >= NESTED_BASE else f"step {b.seq}"
        head = f"Waiting: {what} has an unknown outcome that nobody has decided."
        if wait.cancelled is None:
            return f"{head} The supervisor opens its decision on its next pass."
        return (
            f"{head} An operator opens its decision with Continue now, or starts over, or closes the task "
            f"(recovery action #{wait.cancelled.pk} was cancelled after this follow-up was written)."
        )
    if b.kind == "exhausted":
        words = exhaustion_words(b.recorded) if b.recorded is not None else _diagnosis_bound(b)
        if wait.cancelled is None:
            return f"Waiting: {words} The supervisor opens its recovery for an admin on its next pass."
        return (
            f"Waiting: {words} Recovery action #{wait.cancelled.pk} was cancelled after this follow-up was "
            "written: an operator opens it again for an admin with Continue now, or starts over, or closes the task."
        )
    why = b.detail or "its checkpoint contradicts itself"
    if wait.cancelled is None:
        return (
            f"Waiting: run #{run} cannot be continued ({why.rstrip('.')}). The supervisor opens a recovery action "
            "on its next pass."
        )
    return (
        f"Waiting: run #{run} cannot be continued ({why.rstrip('.')}). An operator may Start over (its first run "
        "carries this follow-up) or Close the task."
    )


def _diagnosis_bound(blocked) -> str:
    reasons = blocked.diagnosis.reasons if blocked.diagnosis is not None else ()
    seqs = [r.seq for r in reasons if r.code == "interrupted_twice" and r.seq]
    if seqs:
        steps = " and ".join(
            f"item {s % NESTED_BASE} of step {s // NESTED_BASE}" if s >= NESTED_BASE else f"step {s}" for s in seqs
        )
        return f"{steps.capitalize()} was interrupted twice in this chain, so only an admin's one more attempt runs it."
    return cause(blocked.exhaustion)


def followup_refused_text(detail: str) -> str:
    """The supervisor tried to admit a follow-up's continuation and was refused (a race, or validation)."""
    return f"Waiting: {detail or 'another admission is under way'} The supervisor tries again on its next pass."


FOLLOWUP_BADGES = {
    "waiting": "Waiting",
    "admitted": "Admitted to run #{run}",
    "delivered": "Handed to run #{run}",
    "read": "Read in run #{run}",
    "not_delivered": "Not delivered",
}


def followup_line(message, *, wait_text: str = "", closed: bool = False) -> tuple[str, Line | None]:
    """A follow-up's badge and its one sentence: where it is, only as far as saved facts go.

    "read by the agent in run #N" only once run #N acknowledged it; handed over at a claim, it is not read yet.
    """
    badge = FOLLOWUP_BADGES.get(message.status, message.status).format(run=message.run_id)
    status = message.status
    if status == "waiting":
        return badge, (wait_text or message.waiting_reason,)
    if status == "admitted":
        return badge, (f"Run #{message.run_id} is queued; it carries this follow-up when a worker starts it.",)
    if status == "delivered":
        return badge, (f"Handed to run #{message.run_id} when it started; its worker has not acknowledged reading it.",)
    if status == "read":
        return badge, (f"Read by the agent in run #{message.run_id} ", At(message.read_at), ".")
    if status == "not_delivered":
        why = message.waiting_reason or "Not delivered: the task was closed."
        if closed:
            return badge, (why,)
        return badge, (f"{why} The task is open again: an operator may deliver it with Deliver follow-ups.",)
    return badge, None


def followups_row_text(waiting: int, not_delivered: int) -> str:
    """What a board row says of a task's follow-ups that have not reached a run (never "Nothing is scheduled")."""
    if waiting:
        n = "1 follow-up waits" if waiting == 1 else f"{waiting} follow-ups wait"
        return f"{n} to be delivered: the task's next run carries {'it' if waiting == 1 else 'them'}."
    if not_delivered:
        n = "1 follow-up was" if not_delivered == 1 else f"{not_delivered} follow-ups were"
        them = "it" if not_delivered == 1 else "them"
        return f"{n} not delivered (the task was closed); an operator may deliver {them} with Deliver follow-ups."
    return ""
