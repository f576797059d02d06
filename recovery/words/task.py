"""A task's state in words: its state, the lines under its title, a board row's why and attempts."""

from dataclasses import dataclass

from recovery.rules import classify as c
from recovery.words.bounds import exhaustion_words
from recovery.words.breakers import breaker_held_line
from recovery.words.followups import followups_row_text
from recovery.words.lines import At, Line, plain, said_part
from recovery.words.vocabulary import RUN_ENDED, TASK_STATES, cause, gate_line, step_where


def task_state(task, current_run, actions) -> str:
    """The one vocabulary of task states, used by board, inbox, header and API alike."""
    if task.status == "cancelled":
        return task.status
    # A done task can still have a live action (its export failed): it waits on a person, so it says so.
    live = [a for a in actions if a.status in ("open", "retrying", "exhausted")]
    if any(a.status == "exhausted" for a in live):
        return "exhausted"
    if any(a.status == "open" for a in live):
        return "needs_decision"
    if task.status == "done":
        return task.status
    if current_run is not None and current_run.status == "stopping":
        return "stopping"
    if current_run is not None and current_run.status == "running":
        return "running"
    if task.paused or task.budget_exhausted or getattr(task, "has_open_dependency", False):
        return "blocked"
    if current_run is not None and current_run.status == "queued":
        return "queued"
    return "idle"


@dataclass
class TaskView:
    state: str
    state_text: str
    why: Line | None = None


def stopping_line(run) -> Line:
    by = run.stop_requested_by or "someone"
    asked = (
        ("Stopping — asked by ", by, " ", At(run.stop_requested_at))
        if run.stop_requested_at
        else (
            "Stopping — asked by ",
            by,
        )
    )
    reason = {"paused": " (the task was paused)", "budget": " (the budget is used up)", "closed": " (closing the task)"}
    tail = ("; the worker stops at its next step",)
    if run.lease_expires_at:
        tail += (" or its lease lapses ", At(run.lease_expires_at))
    return (*asked, reason.get(run.stop_reason, ""), *tail, ".")


def stopped_line(run, *, auto_resume: bool = True, disposition: str | None = None) -> Line | None:
    """Why a stopped run stopped, and what continues it — never "automatically" for a person's Stop.

    A run stopped by a pause or the budget "continues once when the hold lifts" only where its
    checkpoints allow that (`disposition`, when known): otherwise a person decides first.
    """
    if run.status != "stopped":
        return None
    by = run.stop_requested_by or "someone"
    when = (" ", At(run.stop_requested_at)) if run.stop_requested_at else ()
    if run.stop_reason == "stop":
        return ("Stopped by ", by, *when, ": continues when someone writes a follow-up.")
    held = disposition not in (None, c.AUTO_RESUMABLE, c.NONE)
    if run.stop_reason == "paused":
        if held:
            return ("Stopped because the task was paused", *when, HELD_AFTER_HOLD)
        return ("Stopped because the task was paused", *when, ": continues once when the pause lifts.")
    if run.stop_reason == "budget":
        if held:
            return ("Stopped at the budget limit", *when, HELD_AFTER_HOLD)
        return ("Stopped at the budget limit", *when, ": continues once when an admin raises or removes it.")
    if run.stop_reason == "closed":
        return ("Stopped by ", by, " closing the task", *when, ".")
    return ("Stopped", *when, ".")


HELD_AFTER_HOLD = ": when the hold lifts it does not continue by itself — its checkpoint needs a person first (below)."


def task_view(task, current_run, actions, *, hold=None, last_run=None, followup_wait: str = "") -> TaskView:
    """The header's state and the one sentence that says why."""
    state = task_state(task, current_run, actions)
    view = TaskView(state, TASK_STATES[state])
    if state in ("done", "cancelled"):
        if task.closed_by:
            view.why = (
                f"Closed as {state} by {task.closed_by} ",
                At(task.closed_at),
                *said_part(task.close_reason),
                ".",
            )
        elif state == "done" and last_run is not None and last_run.status == "succeeded":
            view.why = (f"Done: run #{last_run.pk} succeeded ", At(last_run.finished_at), ".")
    elif state == "stopping" and current_run is not None:
        view.why = stopping_line(current_run)
    elif state == "running" and current_run is not None:
        view.why = (f"Run #{current_run.pk} running since ", At(current_run.started_at), ".")
    elif state == "blocked" and hold is not None:
        view.why = gate_line(hold)
    elif state == "queued" and current_run is not None:
        view.why = (f"Run #{current_run.pk} queued ", At(current_run.created_at), ": waiting for a worker to start it.")
        if hold is not None:
            view.why = gate_line(hold)
    elif state in ("needs_decision", "exhausted"):
        lead = next((a for a in actions if a.status in ("open", "exhausted")), None)
        if task.status == "done" and last_run is not None and last_run.status == "succeeded":
            export = f"; exporting its workspace failed — recovery action #{lead.pk} waits for an admin" if lead else ""
            view.why = (f"Run #{last_run.pk} succeeded ", At(last_run.finished_at), f"{export}.")
        elif lead is not None:
            view.why = (f"Recovery action #{lead.pk}: {cause(lead.cause)}",)
    elif state == "idle" and last_run is not None:
        view.why = idle_line(last_run, hold=hold, task=task, followup_wait=followup_wait)
    return view


def _awaiting_line(task) -> Line | None:
    """The supervisor takes the task's run up on its next pass (after a Resume, a raised budget, a repair)."""
    run_id = getattr(task, "awaiting_run_id", None)
    if not run_id:
        return None
    if getattr(task, "breaker_held", None):
        return breaker_held_line(run_id, task.breaker_held)
    return (
        f"Run #{run_id} is taken up by the supervisor on its next pass: it continues it once if its checkpoints "
        "allow, or opens a recovery action that says why.",
    )


def row_why(task, state: str, lead, current_run) -> str:
    """The one line a board row gives for its state: why it waits, and on what."""
    if lead is not None:
        evidence = lead.evidence or {}
        if lead.status == "exhausted":
            return exhaustion_words(lead)
        if lead.kind == "unknown_outcome" and evidence.get("tool") and lead.status == "open":
            return f"Unknown outcome: {evidence['tool']}, {step_where(lead.seq, evidence)}."
        if lead.status == "open":
            return cause(lead.cause)
    if state == "stopping" and current_run is not None:
        return f"Run #{current_run.pk} is stopping."
    if state == "blocked":
        if task.paused:
            return "Paused."
        if task.budget_exhausted:
            return f"Budget used up ({task.budget_used} of {task.budget_limit})."
        if getattr(task, "has_open_dependency", False):
            return "Waits on a task that is not done."
    if state == "idle" and current_run is not None:
        followups = followups_row_text(getattr(task, "followups_waiting", 0), getattr(task, "followups_undelivered", 0))
        if getattr(task, "followups_waiting", 0):
            return followups
        awaiting = _awaiting_line(task)
        if awaiting is not None:
            return plain(awaiting)
        if current_run.status == "stopped" and current_run.stop_reason == "stop":
            return f"Stopped by {current_run.stop_requested_by or 'someone'}: waits for a follow-up."
        if followups:
            return followups
        ended = RUN_ENDED.get(current_run.status, current_run.status)
        return f"Nothing is scheduled: run #{current_run.pk} ended ({ended})."
    return ""


def row_attempts(lead, current_run) -> tuple[str, str]:
    """The board's Attempts cell and its title: what the chain has used of the bound that holds it now.

    An action's own bound where one waits (an exhausted chain says the bound it reached), else the run's place
    in its chain; "—" only for a task that never ran.
    """
    if lead is not None:
        if lead.status == "exhausted" and lead.exhaustion == "interrupted_twice":
            return "2 of 2 used", exhaustion_words(lead)
        if lead.status == "exhausted" and lead.exhaustion == "chain_exhausted":
            n = c.CHAIN_MAX_RUNS
            return f"{n} of {n} runs", exhaustion_words(lead)
        bounded = lead.cause not in c.NOT_RECOVERABLE and lead.kind not in ("workspace_validation", "workspace_export")
        if bounded and lead.status in ("open", "retrying", "exhausted"):
            text = f"{lead.attempts} of {lead.max_attempts} used"
            return text, f"{lead.attempts} of the {lead.max_attempts} attempts recovery action #{lead.pk} allows."
    if current_run is None:
        return "—", "The task has not run yet."
    n = getattr(current_run, "attempt", 1) or 1
    if n == 1:
        return "first run", f"Run #{current_run.pk} is the first run of its chain."
    return (
        f"run {n} of its chain",
        f"Run #{current_run.pk} is run {n} of its chain; a chain holds at most {c.CHAIN_MAX_RUNS} runs "
        "(verified stops not counted).",
    )


def idle_line(last_run, *, hold=None, task=None, followup_wait: str = "") -> Line:
    """A task with nothing scheduled says why, and what moves it on (never nothing at all).

    "Nothing is scheduled" only where nothing is: not while a follow-up waits (its wait names what ends
    it), nor while the supervisor is about to take the last run up (after a Resume, a repair).
    """
    waiting = getattr(task, "followups_waiting", 0) if task is not None else 0
    if waiting:
        n = "1 follow-up waits" if waiting == 1 else f"{waiting} follow-ups wait"
        return (f"{n} to be delivered. ", followup_wait or "The task's next run carries it.")
    awaiting = _awaiting_line(task) if task is not None else None
    if awaiting is not None:
        return awaiting
    if last_run.status == "stopped" and last_run.stop_reason == "stop":
        return stopped_line(last_run)
    if hold is not None:
        return gate_line(hold)
    ended = RUN_ENDED.get(last_run.status, last_run.status)
    undelivered = getattr(task, "followups_undelivered", 0) if task is not None else 0
    tail = f" {followups_row_text(0, undelivered)}" if undelivered else ""
    return (
        f"Nothing is scheduled: run #{last_run.pk} ended ({ended}). An operator may Continue now, Start over or "
        f"Close the task.{tail}",
    )
