"""What the screen may say (DESIGN §6a): every user-facing phrase, derived from saved facts here.

Pages, card responses, live pushes and the API's `next_action` all call these
functions; templates only lay out what they return. Pure: the callers pass
loaded rows (runs, actions, attempts, steps) and the facts read alongside them
(the current gate, the agent's auto-resume switch); nothing here queries.

A phrase is a `Line`: a tuple of plain text, `At` (a moment, which a page shows
as relative text inside `<time>` and the API as an absolute time) and `Said`
(a person's own words, shown quoted). Words claim only what the facts show:
an acknowledgement is not a resumption, a queued run is not a continuation,
a person's statement is not a saved result.
"""

import json
from dataclasses import dataclass, field
from datetime import datetime

from recovery import words
from recovery.rules import classify as c
from tasks.batches import NESTED_BASE
from tasks.workspace import wire


@dataclass(frozen=True)
class At:
    when: datetime


@dataclass(frozen=True)
class Said:
    text: str


Part = str | At | Said
Line = tuple[Part, ...]


def plain(line: Line | None) -> str:
    """A line as plain text (API, logs, tests): moments as absolute UTC times, words in quotes."""
    if not line:
        return ""
    out = []
    for part in line:
        if isinstance(part, At):
            out.append(part.when.strftime("%Y-%m-%d %H:%M UTC"))
        elif isinstance(part, Said):
            out.append(f"“{part.text}”")
        else:
            out.append(part)
    return "".join(out)


def _said(text: str) -> tuple:
    return (": ", Said(text)) if text else ()


# --- vocabulary -------------------------------------------------------------------

TASK_STATES = {
    "needs_decision": "Needs decision",
    "exhausted": "Exhausted",
    "blocked": "Blocked",
    "running": "Running",
    "stopping": "Stopping",
    "queued": "Queued",
    "done": "Done",
    "cancelled": "Cancelled",
    "idle": "Idle",
}

RUN_STATUSES = {
    "queued": "Queued",
    "running": "Running",
    "stopping": "Stopping",
    "succeeded": "Succeeded",
    "failed": "Failed",
    "stopped": "Stopped",
    "interrupted": "Interrupted",
    "cancelled": "Cancelled",
}

RUN_ENDED = {
    "succeeded": "it succeeded",
    "failed": "it failed",
    "interrupted": "it was interrupted",
    "stopped": "it was stopped",
    "cancelled": "it was cancelled before it started",
}

RUN_STATUS_PHRASES = {
    "queued": "is queued",
    "running": "is running",
    "stopping": "is stopping",
    "succeeded": "succeeded",
    "failed": "failed",
    "stopped": "was stopped",
    "interrupted": "was interrupted",
    "cancelled": "was cancelled",
}


def run_status_phrase(status: str) -> str:
    """ "Run #25 succeeded", "Run #25 was stopped": a run's status as the predicate of a sentence."""
    return RUN_STATUS_PHRASES.get(status, f"is {status}")


CAUSES = {
    "unknown_outcome": "A step was cut off after it started and before its result was saved: it may or may not "
    "have happened.",
    "interrupted_twice": "The same step was interrupted twice in this chain, so it is not retried automatically again.",
    "chain_exhausted": "This task has been continued the most times a chain may.",
    "corrupt_checkpoint": "The saved checkpoint contradicts itself, so nothing of it can be replayed safely.",
    "checkpoint_too_large": "A step's result was larger than 8 MiB and could not be saved, so recovery is off for "
    "this run.",
    "checkpoint_purged": "This run's checkpoint was purged after the retention period, so nothing of it can be reused.",
    "agent_missing": "An agent the rest of this run needs no longer exists, so the run cannot be continued.",
    "tool_unknown": "The rest of this run calls a tool it used before that the worker no longer knows (the tool set "
    "changed since the run), so the run cannot be continued.",
    "diverged": "On replay the agent asked for another call than the one saved at this step, so nothing more was "
    "run: the saved results would answer other questions.",
    "auto_resume_off": "The run was interrupted and everything unfinished is safe to run again, but this agent waits "
    "for an operator (auto-resume is off).",
    "step_failed": "A step failed before the worker could finish the run.",
    "lease_lapsed": "The worker stopped renewing its lease, so the run was marked interrupted.",
    "needs_decision": "The run needs a person to decide how to continue.",
    "workspace_validation_failed": "The workspace no longer matches what the checkpoints recorded, so the "
    "continuation was not admitted: files changed, appeared or disappeared on disk after the steps that wrote them.",
    "export_failed": "The run succeeded, but copying its workspace to the export destination failed.",
}

GATES = {
    "task_paused": "the task is paused",
    "ancestor_paused": "a parent task is paused",
    "budget_exhausted": "the task's budget is used up",
    "dependency_open": "a task it depends on is not done",
    "task_closed": "the task is closed",
    "owner_changed": "the task has a new owner since this action opened",
    "lease_live": "the original run still holds a live lease",
    "attempts_exhausted": "every attempt is used",
    "chain_exhausted": "the chain has reached its maximum length",
    "workspace_hold": "workspace hold",
}

OWNERS = {"role:operator": "operators", "role:admin": "admins"}

DECIDED = {
    "performed": "it happened",
    "not_performed": "it did not happen",
    "unresolved": "unresolved",
    "agent_verifies": "the agent verifies it",
}


def step_where(seq, evidence: dict) -> str:
    """ "step 3", or "item 2 of step 1" for a batch item (the action's evidence says which)."""
    if evidence.get("item") and evidence.get("parent_seq"):
        return f"item {evidence['item']} of step {evidence['parent_seq']}"
    return f"step {seq}"


def cause(code: str) -> str:
    return CAUSES.get(code, code.replace("_", " ").capitalize() + ".")


def reason_items(reasons) -> list[dict]:
    """A diagnosis' reasons (Reason objects or their saved dicts) as sentences, each with its code for a `title`:
    "Step 2: …", never "`interrupted_twice` · step 2"."""
    items = []
    for r in reasons or ():
        get = r.get if isinstance(r, dict) else lambda k, r=r: getattr(r, k, None)
        code = get("code") or ""
        seq = get("seq") if isinstance(get("seq"), int) else None
        items.append({"code": code, "text": words.reason_text(code, get("detail") or "", seq)})
    return items


def owner(value: str) -> str:
    """`role:admin` → "admins", `user:ada` → "ada", `agent:fixer` → "fixer"."""
    if not value:
        return ""
    return OWNERS.get(value, value.split(":", 1)[-1])


def gate_line(hold) -> Line | None:
    """A closed gate as the card says it: which gate, the fact, and who lifts it."""
    if hold is None:
        return None
    return (f"Held: {GATES.get(hold.gate, hold.gate)} — {hold.detail} Lifted by {hold.lifted_by}.",)


def controls_summary(*, closed: bool, can_admin: bool) -> str:
    """Pure: the heading of the task header's further controls, naming only those this person is shown."""
    names = ["Reopen", "dependencies"] if closed else ["Change owner", "close", "dependencies"]
    if can_admin:
        names.append("budget")
    return ", ".join(names)


# --- task state ---------------------------------------------------------------------


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
                *_said(task.close_reason),
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
            return _exhaustion_words(lead)
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
            return "2 of 2 used", _exhaustion_words(lead)
        if lead.status == "exhausted" and lead.exhaustion == "chain_exhausted":
            n = c.CHAIN_MAX_RUNS
            return f"{n} of {n} runs", _exhaustion_words(lead)
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


# --- recovery actions -----------------------------------------------------------------


@dataclass
class ActionView:
    badge: str
    tone: str
    title: str
    cause: str
    progress: list[Line] = field(default_factory=list)
    decision: Line | None = None
    gate: Line | None = None
    next: Line | None = None
    closed: Line | None = None
    attempts: str | None = None
    due: At | None = None
    controls: frozenset = frozenset()
    # What each repair control will do, restated in its confirmation (workspace actions).
    confirm: dict = field(default_factory=dict)
    # The repair task and its return owner (workspace actions).
    repair_task: Line | None = None
    files: list = field(default_factory=list)
    # The latest repair's files, each with what was done and its hashes before and after.
    result_rows: list = field(default_factory=list)

    @property
    def next_text(self) -> str:
        return plain(self.next)


def _exhaustion_words(action) -> str:
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

    exhausted = _exhaustion_words(action)
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


def _decision_line(action) -> Line | None:
    if not action.decision:
        return None
    if action.decision == "unresolved":
        return ("Unresolved — ", action.decided_by, ", ", At(action.decided_at), *_said(action.decision_note))
    return None


def _progress(action, attempt, run, *, run_hold=None) -> list[Line]:
    """Where the latest attempt stands, told only as far as the evidence goes."""
    if attempt is None:
        return []
    lines: list[Line] = []
    seq = action.seq
    evidence = action.evidence or {}
    told = {"seq": seq, "tool": evidence.get("tool"), "args": evidence.get("args")}
    queued = run is not None and run.started_at is None and run.status == "queued"
    if attempt.decision == "agent_verifies":
        by_setting = not action.decided_by
        head = (
            (f"Handed to the agent by its setting ({SETTING_WORDS}) ",)
            if by_setting
            else (f"Handed to the agent to verify by {attempt.requested_by} ",)
        )
        head = (*head, At(attempt.requested_at), *((": ", Said(attempt.note)) if attempt.note else ()), ".")
        if queued:
            head = (*head, f" Run #{run.pk} queued — step {seq} does not run again by itself; the agent checks it.")
        lines.append(head)
        lines.append(("The model is told: ", Said(notice_text({**told, "decision": "agent_verifies"}))))
    elif attempt.decision in ("performed", "not_performed"):
        risk = "; duplicate risk accepted" if attempt.accepted_duplicate_risk else ""
        head = (
            f"Decision recorded: {DECIDED[attempt.decision]} (",
            attempt.requested_by,
            ", ",
            At(attempt.requested_at),
            *((": ", Said(attempt.note)) if attempt.note else ()),
            f"{risk}).",
        )
        if run is not None and run.started_at is None and run.status == "queued":
            effect = "will not run again" if attempt.decision == "performed" else "will run again"
            lines.append((*head, f" Run #{run.pk} queued — step {seq} {effect}."))
        else:
            lines.append(head)
        if attempt.decision == "performed" and getattr(action.run, "kind", "plan") == "agent":
            note = {**told, "decision": "performed", "decided_by": attempt.requested_by, "note": attempt.note}
            lines.append(("The model is told: ", Said(notice_text(note))))
    elif attempt.outcome != "rejected":
        if run is not None and run.started_at is None and run.status == "queued":
            lines.append(
                (
                    f"Retry requested by {attempt.requested_by} ",
                    At(attempt.requested_at),
                    f" — run #{run.pk} queued; ",
                    "nothing has resumed yet.",
                )
            )
        elif run is not None and run.started_at is None:
            pass  # ended before it started: the rejection below says so
        else:
            lines.append((f"Retry requested by {attempt.requested_by} ", At(attempt.requested_at), "."))
    if attempt.outcome == "rejected":
        lines.append(
            (
                f"Attempt {attempt.number} was not admitted: {attempt.rejected_detail or 'it never started'}".rstrip(
                    "."
                )
                + ".",
            )
        )
    elif run is not None and run.started_at is not None:
        if run.status in ("running", "stopping"):
            lines.append((f"Continuing in run #{run.pk} since ", At(run.started_at), "."))
        else:
            lines.append((f"Continued in run #{run.pk} — {RUN_ENDED.get(run.status, run.status)}.",))
    elif run is not None and run.status == "queued" and run_hold is not None:
        lines.append(
            (
                f"Run #{run.pk} cannot start yet: {GATES.get(run_hold.gate, run_hold.gate)} — ",
                f"{run_hold.detail} Lifted by {run_hold.lifted_by}.",
            )
        )
    return lines


def action_view(
    action,
    *,
    attempts: list,
    runs: dict,
    gate=None,
    run_hold=None,
    can_operate: bool = False,
    can_admin: bool = False,
    repairs: list | tuple = (),
    repair_task=None,
) -> ActionView:
    """Everything an action card (and the API's `next_action`) says.

    `attempts` are the action's attempts oldest first; `runs` maps the ids of
    their continuation runs to loaded runs; `gate` is the gate that would
    refuse an admission now (for a live action); `run_hold` a hold that keeps a
    queued continuation from starting. A workspace action takes its `repairs`
    (oldest first) and its `repair_task` (a loaded task, or None).
    """
    if action.kind in WORKSPACE_KINDS:
        return workspace_action_view(
            action, repairs=list(repairs), repair_task=repair_task, can_admin=can_admin, can_operate=can_operate
        )
    unknown = action.kind == "unknown_outcome"
    evidence = action.evidence or {}
    latest = attempts[-1] if attempts else None
    run = runs.get(latest.continuation_run_id) if latest is not None else None
    tool = evidence.get("tool")
    diverged = action.kind == "diverged"
    if unknown and tool:
        title = f"Unknown outcome — {tool}, {step_where(action.seq, evidence)}"
    elif diverged:
        title = f"Replay diverged at step {evidence.get('seq') or action.seq}"
    elif action.kind in ("workspace_validation", "workspace_export"):
        title = "Workspace changed" if action.kind == "workspace_validation" else "Export failed"
    elif action.status == "exhausted":
        title = "Recovery exhausted"
    else:
        title = f"Recovery of run #{action.run_id}"

    view = ActionView(badge="", tone="", title=title, cause=cause(action.cause))
    view.progress = _progress(action, latest, run, run_hold=run_hold)
    view.decision = _decision_line(action)
    status = action.status

    if status == "open":
        view.badge, view.tone = "Needs decision", "attention"
        view.gate = gate_line(gate)
        view.due = At(action.due_at) if action.due_at else None
        # Attempts bound an action only where an attempt can be admitted: not where recovery is unavailable.
        if (action.attempts or action.kind == "continuation") and action.cause not in c.NOT_RECOVERABLE:
            view.attempts = f"{action.attempts} of {action.max_attempts} attempts used"
        if unknown:
            view.next = (
                f"Check whether {tool or 'the operation'} ({step_where(action.seq, evidence)}) happened, then record "
                "what you found.",
            )
        elif diverged:
            view.next = (
                f"Run #{action.run_id} cannot be continued on this path: Start over (a fresh run from the beginning "
                "that reuses nothing), or cancel this action.",
            )
        elif action.cause in c.UNAVAILABLE:
            view.next = (
                f"Recovery of run #{action.run_id} is unavailable: Start over (a fresh run from the beginning that "
                "reuses nothing), or cancel this action.",
            )
        elif action.cause in c.NOT_RECOVERABLE:
            view.next = (
                "Nothing of run #",
                str(action.run_id),
                " can be reused: cancel this action, then Start over or Close the task.",
            )
        elif action.cause == "auto_resume_off":
            view.next = (
                "Safe to continue — this agent waits for an operator (auto-resume is off). Retry continues "
                "it in a new run.",
            )
        elif action.cause == "step_failed":
            view.next = ("Retry runs the failed step again in a new run; or cancel this action.",)
        else:
            view.next = ("Retry continues it in a new run; or cancel this action.",)
        if gate is not None:
            view.next = (
                (f"First {gate.lifted_by}.",)
                if not gate.lifted_by.startswith("nobody")
                else (f"Wait: {gate.lifted_by}.",)
            )
        controls = set()
        if can_operate:
            controls.add("cancel")
            if unknown:
                controls.add("decide")
                if getattr(action.run, "kind", "plan") == "agent":
                    controls.add("agent_verifies")
            elif diverged:
                controls.add("start_over")
            elif action.cause not in c.NOT_RECOVERABLE:
                controls.add("retry")
        view.controls = frozenset(controls)
    elif status == "retrying":
        decided = latest is not None and latest.decision in ("performed", "not_performed")
        handed = latest is not None and latest.decision == "agent_verifies"
        badge = "Handed to the agent" if handed else "Decision recorded" if decided else "Retry requested"
        view.badge, view.tone = badge, "pending"
        if action.kind == "continuation":
            view.attempts = f"{action.attempts} of {action.max_attempts} attempts used"
        if run is not None and run_hold is not None:
            view.next = (f"Run #{run.pk} starts once {run_hold.lifted_by.split(',')[0]} lifts the hold.",)
        elif run is not None:
            view.next = (f"Nothing to do: a worker starts run #{run.pk} when one is free.",)
        view.controls = frozenset({"cancel"}) if can_operate else frozenset()
    elif status == "exhausted":
        view.badge, view.tone = "Exhausted", "danger"
        view.cause = _exhaustion_words(action)
        view.gate = gate_line(gate) if gate is not None and gate.gate != "attempts_exhausted" else None
        if action.exhaustion in ("attempts_used", ""):
            view.attempts = f"{action.attempts} of {action.max_attempts} attempts used"
        if action.exhaustion == "chain_exhausted":
            view.next = ("An operator cancels this action, then may Start over or Close the task.",)
            view.controls = frozenset({"cancel"}) if can_operate else frozenset()
        else:
            view.next = ("An admin may grant one more attempt, with a reason; an operator may cancel this action.",)
            controls = {"cancel"} if can_operate else set()
            if can_admin:
                controls.add("grant")
            view.controls = frozenset(controls)
    elif status == "resolved":
        if action.resolution == "continued" and run is not None:
            live = run.status in ("running", "stopping")
            view.badge, view.tone = ("Continuing", "active") if live else ("Continued", "done")
        else:
            view.badge, view.tone = "Resolved", "done"
            view.closed = ("Resolved ", At(action.closed_at), *_said(action.resolution_note), ".")
    elif status == "retired":
        view.badge, view.tone = "Retired", "muted"
        view.closed = (
            "Retired ",
            At(action.closed_at),
            f": {action.resolution_note or 'no longer current'}.",
        )
    elif status == "cancelled":
        view.badge, view.tone = "Cancelled", "muted"
        by = f" by {action.closed_by}" if action.closed_by else ""
        view.closed = (
            f"Cancelled{by} ",
            At(action.closed_at),
            f". Nothing of run #{action.run_id} will be retried by this action; the task's own controls move it on "
            "(Continue now, Start over, Close).",
        )
    return view


# --- runs and steps ---------------------------------------------------------------------


DISPOSITION_WORDS = {
    c.NEEDS_DECISION: "Needs a person's decision",
    c.CORRUPT: "The checkpoint contradicts itself; nothing of it is replayed",
    c.EXHAUSTED: "Not retried automatically again",
}


def diagnosis_line(run, diagnosis, *, auto_resume: bool, continued_by=None, refused_by=None) -> Line | None:
    """What will actually happen to an interrupted or stopped run, for this agent and this stop cause."""
    if diagnosis is None or diagnosis.disposition == c.NONE:
        return None
    reasons = "; ".join(r.detail for r in diagnosis.reasons)
    if diagnosis.disposition == c.AUTO_RESUMABLE:
        if run.status == "stopped" and run.stop_reason == "stop":
            head = "Safe to continue — it continues only when someone writes a follow-up (stopped by a person)"
        elif run.status == "stopped" and run.stop_reason in ("paused", "budget"):
            head = "Safe to continue — it continues once, by itself, when the hold lifts"
        elif run.status == "stopped":
            head = "Safe to continue — nothing continues it by itself"
        elif not auto_resume:
            head = "Safe to continue — this agent waits for an operator (auto-resume is off)"
        else:
            head = "Safe to continue automatically"
        if continued_by is not None:
            started = continued_by.started_at is not None
            head += f"; continued in run #{continued_by.pk}" if started else f"; run #{continued_by.pk} is queued"
        elif refused_by is not None:
            # Safe by its checkpoints, but its continuation was refused before it started: never "automatically".
            head = (
                f"Safe to continue by its checkpoints, but its continuation run #{refused_by.pk} was not admitted: "
                "the workspace differs from what the checkpoints recorded"
            )
        return (head + ".",)
    said = DISPOSITION_WORDS.get(diagnosis.disposition, diagnosis.disposition)
    line = f"{said}: {reasons}" if reasons else said + "."
    if continued_by is not None:
        # The question was settled: say where the run went on, never only what it once needed.
        started = continued_by.started_at is not None
        line = line.rstrip(".") + (
            f"; settled — continued in run #{continued_by.pk}."
            if started
            else f"; settled — run #{continued_by.pk} is queued."
        )
    return (line,)


@dataclass
class StepRow:
    label: str
    note: Line | None = None
    declared: bool = False  # a person's statement stands in for the step: it has no saved result


def _settled_in(step, continued_in) -> Line | None:
    """How a step of unknown outcome was settled by the continuation that carries it on (None while undecided)."""
    if continued_in is None:
        return None
    carry = continued_in.carry or {}
    queued = "" if continued_in.started_at else " (queued)"
    declared = (carry.get("declared") or {}).get(str(step.seq))
    if declared is not None:
        return (
            f"run #{continued_in.pk}{queued} does not run it again: decided it happened — "
            f"{declared.get('decided_by', 'someone')}",
            *_said(declared.get("note", "")),
        )
    why = {r.get("seq"): r.get("why") for r in carry.get("rerun", []) if isinstance(r, dict)}.get(step.seq)
    said = {
        "decided": "decided: it did not happen",
        "retry": "retry requested",
        "continue_now": "asked for with Continue now",
        "follow-up": "continued by a follow-up",
    }.get(why)
    return (f"run #{continued_in.pk}{queued} runs it again: {said}",) if said else None


def step_row(
    step, *, run, verdict=None, disposition: str | None = None, reused_run_id=None, continued_in=None
) -> StepRow:
    """The label and note of one step on a run card (`continued_in`: the continuation of this run, if any)."""
    carry = run.carry or {}
    # A batch item a person declared performed is keyed by its own (nested) seq.
    declared = (carry.get("declared") or {}).get(str(step.seq))
    if step.reused_from_id and declared is not None:
        return StepRow(
            "marked performed",
            (
                f"marked performed by {declared.get('decided_by', 'someone')}",
                *_said(declared.get("note", "")),
                " — no saved result",
            ),
            declared=True,
        )
    if step.reused_from_id:
        source = f" of run #{reused_run_id}" if reused_run_id else ""
        return StepRow("reused", (f"reused — saved result{source}",))
    rerun = {r.get("seq"): r.get("why") for r in carry.get("rerun", []) if isinstance(r, dict)}
    why = rerun.get(step.seq) if step.parent_seq is None else None
    # Said only in the run that ran it again, and only once it did.
    again = RERUN_WORDS.get(why) if step.phase in ("dispatched", "completed", "failed") else None
    if verdict is not None and disposition is not None:
        row = _verdict_row(step, verdict, disposition)
        settled = _settled_in(step, continued_in) if verdict.verdict == c.UNKNOWN_OUTCOME else None
        if settled is not None:
            row = StepRow("unknown outcome", settled)
    else:
        label = {"planned": "planned", "dispatched": "running", "completed": "completed", "failed": "failed"}
        row = StepRow(label[step.phase])
        if step.phase == "dispatched" and run.status not in ("running", "stopping"):
            row.label = "cut off"
        if step.phase == "failed":
            row.note = (f"failed: {words.error_text(step.error) or 'no detail'}",)
    if again:
        row.note = (again, "; ", *row.note) if row.note else (again,)
    return row


RERUN_WORDS = {
    "replay": "run again (replay)",
    "retry": "run again (retry requested)",
    # Continue now runs a failed step again: a person asked to continue, not for a retry of an action.
    "continue_now": "run again (asked for with Continue now)",
    "decided": "run again (decided: it did not happen)",
    "follow-up": "run again (follow-up)",
    "resumes": "resumed item by item (saved items kept)",
}


def step_mode(planned: str, now: str | None = None) -> str:
    """The recovery mode a step was planned with, and the agent's mode now where a settings change moved it since."""
    return f"planned as {planned} · now {now}" if now and now != planned else planned


def _verdict_row(step, verdict, disposition: str) -> StepRow:
    """A step of an interrupted/stopped run, in words that agree with the run's disposition."""
    v = verdict.verdict
    if v == c.REUSE:
        if step.phase == "failed":
            return StepRow("failed", (f"failed: {words.error_text(step.error) or 'no detail'} — kept as failed",))
        return StepRow("completed", ("saved result; a continuation reuses it",))
    if v == c.NOT_DISPATCHED:
        return StepRow("not started", ("planned, never dispatched: a continuation runs it",))
    if v == c.REPLAY:
        if disposition == c.EXHAUSTED:
            return StepRow("cut off", ("replay mode, but interrupted twice: not retried automatically again",))
        if verdict.reason in ("subagent_resumes", "batch_resumes"):
            return StepRow("cut off", (verdict.detail,))
        return StepRow("cut off", ("replay mode: a continuation runs it again",))
    if v == c.UNKNOWN_OUTCOME and step.tool == "foreach" and step.parent_seq is None:
        return StepRow("unknown outcome", (verdict.detail,))  # names the item and says what the batch keeps
    if v == c.UNKNOWN_OUTCOME:
        return StepRow("unknown outcome", ("may or may not have happened: a person decides",))
    if v == c.DROP:
        return StepRow("dropped", ("forget mode: a continuation does not run it",))
    return StepRow("corrupt", (verdict.detail,))


def duration(start: datetime | None, end: datetime | None) -> str:
    if not start or not end:
        return ""
    seconds = max(0.0, (end - start).total_seconds())
    if seconds < 1:
        return f"{int(seconds * 1000)} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def fresh_start_text(carry: dict | None) -> str:
    """Pure: how a fresh run is named wherever it is shown ("" for any other run). Never a recovery."""
    fresh = (carry or {}).get("fresh_start")
    if not isinstance(fresh, dict):
        return ""
    after = f" after run #{fresh['after']}" if fresh.get("after") else ""
    by = f" by {fresh['by']}" if fresh.get("by") else ""
    return f"Fresh start{by}{after}: runs the task again from the beginning and reuses nothing."


def continued_by_text(continuation) -> str:
    """Pure: how a run names the run that continues it — "continued by" only once that run has started."""
    if continuation is None:
        return ""
    if continuation.started_at is None:
        return f"continuation run #{continuation.pk} (queued)"
    return f"continued by run #{continuation.pk}"


def run_lines(run, *, auto_resume: bool = True, disposition: str | None = None) -> list[Line]:
    """The sentences under a run's badge: why it stopped or ended, in saved facts."""
    lines: list[Line] = []
    fresh = fresh_start_text(run.carry)
    if fresh:
        lines.append((fresh,))
    continued = continued_from_text(run.carry)
    if continued:
        lines.append((continued,))
    if run.status == "stopping":
        lines.append(stopping_line(run))
    stopped = stopped_line(run, auto_resume=auto_resume, disposition=disposition)
    if stopped:
        lines.append(stopped)
    if run.stop_receipt:
        by = run.stop_receipt.get("by")
        receipts = {
            "worker": "Stop verified: the worker finished with its lease.",
            "lease_lapse": "Stop verified: the worker stopped renewing its lease and it lapsed.",
            "not_started": "Stop verified: no worker had started it.",
        }
        if by in receipts:
            lines.append((receipts[by],))
    if run.status == "interrupted" and run.error_code == "lease_lapsed":
        lines.append((f"Interrupted: {run.error_detail or 'its lease lapsed.'}",))
    elif run.error_code and run.status != "stopped":
        detail = words.error_text(run.error_detail)
        lines.append((f"{run.error_code.replace('_', ' ').capitalize()}: {detail}".rstrip(": "),))
    if run.recovery_disabled:
        lines.append((f"Recovery is off for this run: {run.recovery_disabled}",))
    return lines


def carried_lines(decisions, messages) -> list[Line]:
    """What a run carried in: the decisions it acts on and the follow-ups admitted into it."""
    lines: list[Line] = []
    for d in decisions:
        lines.append(
            (
                f"Carries a decision: {DECIDED.get(d.decision, d.decision)} (",
                d.requested_by,
                ", ",
                At(d.requested_at),
                *((": ", Said(d.note)) if d.note else ()),
                ").",
            )
        )
    for m in messages:
        author = m.author.username if getattr(m, "author", None) else "someone"
        body = m.body if len(m.body) <= 200 else m.body[:199] + "…"
        state = {
            "admitted": "handed over when a worker starts it",
            "delivered": "handed over at its claim; its worker has not acknowledged reading it",
            "read": "read by the agent",
            "not_delivered": "not delivered: the task was closed before it was read",
        }.get(m.status, m.status)
        lines.append((f"Carries a follow-up from {author} (", At(m.created_at), "): ", Said(body), f" — {state}."))
    return lines


# --- agent runs (DESIGN §13) ------------------------------------------------------------------

UNKNOWN_OUTCOME_CHOICES = {"ask_person": "Ask a person", "tell_agent": "Tell the agent"}
UNKNOWN_OUTCOME_MEANS = (
    "Ask a person: the card waits for someone to decide. Tell the agent: with no person, the agent gets a notice "
    "that the call's outcome is unknown and verifies the current state before repeating it."
)
SETTING_WORDS = "unknown outcomes: tell the agent"


def call_text(tool: str, args, limit: int = 160) -> str:
    """A call as people and models read it: `file_write(path="notes.md", content="# Rep…")`, cut at `limit`."""
    import json

    parts = []
    for key, value in (args or {}).items() if isinstance(args, dict) else ():
        try:
            shown = json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError):
            shown = repr(value)
        parts.append(f"{key}={shown if len(shown) <= 60 else shown[:57] + '…'}")
    text = f"{tool}({', '.join(parts)})"
    return text if len(text) <= limit else text[: limit - 2] + "…)"


def notice_text(notice: dict) -> str:
    """The sentence an agent's model is given instead of a result (API.md, Agent runs: notices)."""
    call = call_text(notice.get("tool") or "?", notice.get("args"))
    decision = notice.get("decision")
    if decision == "performed":
        note = (notice.get("note") or "").strip()
        who = notice.get("decided_by") or "someone"
        return f"A person ({who}) recorded that this call ({call}) happened" + (f": {note}" if note else ".")
    if decision == "dropped":
        return (
            f"This call ({call}) was interrupted and dropped by its recovery mode; it may or may not have happened "
            "and it is not run again unless you ask for it anew."
        )
    return (
        f"This call ({call}) was interrupted and its outcome is unknown; verify the current state before repeating it."
    )


def notice_row(notice: dict) -> "StepRow":
    """A step the agent got a notice for, on the run page: who settled it and what the model was told."""
    decision = notice.get("decision")
    told = ("; the model was told: ", Said(notice_text(notice)))
    if decision == "performed":
        by = notice.get("decided_by") or "someone"
        return StepRow("marked performed", (f"marked performed by {by}", *_said(notice.get("note") or ""),
                                            " — no saved result", *told), declared=True)  # fmt: skip
    # (No notice is a saved result: the row shows neither a result nor a duration.)
    if decision == "dropped":
        return StepRow("dropped", ("forget mode: not run again", *told), declared=True)
    if notice.get("decided_by"):
        who = f"handed to the agent to verify by {notice['decided_by']}"
        return StepRow("agent verifies", (who, *told), declared=True)
    who = f"handed to the agent to verify by its setting ({SETTING_WORDS})"
    return StepRow("agent verifies", (who, *told), declared=True)


def catalogue_line(catalogue: dict | None, registered_at) -> Line:
    """Where an agent's tool list comes from, on its settings."""
    if catalogue is None:
        return ("Its worker has registered no tool catalogue: the built-in tools and their default modes apply.",)
    n = len(catalogue)
    return (f"{n} tool{'s' if n != 1 else ''} registered by its worker ", At(registered_at), "; model turns are "
            "always replayed.")  # fmt: skip


def usage_line(usage) -> Line | None:
    """What a run's steps cost, and what recovery reused or spent again (tokens where reported, else units)."""
    if usage is None or not (usage.spent or usage.reused):
        return None
    line = f"Spent {usage.spent:,}"
    if usage.reused:
        line += f"; reused {usage.reused:,} from earlier runs of the chain (not spent again)"
    if usage.spent_again:
        steps = " and ".join(f"step {s}" for s in usage.again_steps) or "steps"
        line += f"; {usage.spent_again:,} of it spent again on {steps}, cut off in an earlier run and run again"
    return (line + " (tokens where the steps report tokens, else units).",)


def prompt_line(run) -> Line | None:
    """An agent run's prompt, as the person wrote it."""
    prompt = (run.input or {}).get("prompt") if isinstance(run.input, dict) else None
    if not isinstance(prompt, str):
        return None
    return ("Prompt: ", Said(prompt if len(prompt) <= 2000 else prompt[:1999] + "…"))


def output_heading(run) -> str:
    return f"What the agent returned in run #{run.pk}"


def diverged_calls(evidence: dict) -> list[dict]:
    """The two calls of a diverged step, side by side: what was saved and what the agent asked for now."""
    out = []
    for side, label in (("saved", "Saved (what the earlier run called)"), ("asked", "Asked now (on replay)")):
        call = evidence.get(side) or {}
        out.append({"side": side, "label": label, "tool": call.get("tool") or "?", "args": call.get("args") or {},
                    "text": call_text(call.get("tool") or "?", call.get("args"))})  # fmt: skip
    return out


def diverged_summary(evidence: dict) -> Line:
    saved, asked = evidence.get("saved") or {}, evidence.get("asked") or {}
    seq = evidence.get("seq")
    same_tool = saved.get("tool") == asked.get("tool")
    differs = (
        "the same tool with other arguments" if same_tool else f"{asked.get('tool')} instead of {saved.get('tool')}"
    )
    return (f"At step {seq} the agent asked for {differs}. Nothing of the new path ran; the saved steps are kept.",)


# --- follow-ups (DESIGN §7) ----------------------------------------------------------------


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
        words = _exhaustion_words(b.recorded) if b.recorded is not None else _diagnosis_bound(b)
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


# --- workspaces (DESIGN §9) ----------------------------------------------------------------

WORKSPACE_KINDS = ("workspace_validation", "workspace_export")

FILE_STATUS = {
    "same": "unchanged",
    "changed": "changed on disk",
    "added": "added on disk",
    "missing": "missing on disk",
    "held": "held — not overwritten",
}

HELD_WHY = {
    "plan_changes": "the remaining plan also changes it",
    "older": "older than the recorded version",
    "link": "a symbolic link — never followed",
    "special": "not a regular file",
}

# What an entry that is not a regular file is, on a panel, a card or a held copy (tasks.workspace KINDS).
KIND_WORDS = {
    "link": "symbolic link → {link} (never followed)",
    "dir": "empty directory",
    "fifo": "FIFO (named pipe; never opened)",
    "socket": "socket (never opened)",
    "device": "device {link} (never opened)",
    "other": "not a regular file",
}

# Why a file's content was not read or not kept (WorkspaceFile.not_kept, tasks.workspace).
NOT_KEPT = {
    "large": "not kept: larger than the {keep} kept per file",
    "store_error": "not kept: the content store could not write it",
    "unreadable": "not kept: the console could not read it",
    "hash_too_large": "not read: larger than the {hash_max} the console hashes; compared by size and times",
    "hash_budget": "not read this time: the reading budget was spent; compared by size and times",
    "changed_while_read": "not read: it changed while it was being read; recorded by size and times",
    "not_read": "not read before it was recorded; recorded by size and times",
}


def path_text(path) -> str:
    """A workspace path as text: itself, or its wire form (`{"$text": …}`) for a name that is not text."""
    return path if isinstance(path, str) else json.dumps(path, ensure_ascii=False)


def _size(n: int) -> str:
    from django.template.defaultfilters import filesizeformat

    return str(filesizeformat(n)).replace("\xa0", " ")


def not_kept_text(code: str, detail: str = "") -> str:
    from tasks.workspace import hash_max, keep_limit

    text = NOT_KEPT.get(code, code.replace("_", " ")).format(keep=_size(keep_limit()), hash_max=_size(hash_max()))
    return f"{text} ({detail})" if detail else text


def side_text(side: dict | None) -> str:
    """What one side of an entry is when it is not simply a hashed file: its kind, or why its content was not
    read (a file's size and hash are drawn as they are)."""
    if not side:
        return ""
    kind = side.get("kind")
    if kind:
        link = side.get("link")
        return KIND_WORDS.get(kind, KIND_WORDS["other"]).format(link=path_text(link) if link is not None else "?")
    if side.get("hashed") is False or side.get("not_kept") in ("hash_too_large", "hash_budget"):
        return not_kept_text(side.get("not_kept") or "not_read")
    return ""


WRITERS = {
    "step": "written by step {seq} of run #{run} ({tool})",
    "decision": "step {seq} of run #{run} ({tool}), declared performed by a person",
    "reconcile": "adopted from disk by a reconcile",
    "baseline": "in the workspace when the first run started",
}

REPAIR_NAMES = {"reconcile": "Reconcile", "reissue": "Isolated reissue", "retry_export": "Retry export"}


def _files(paths: list, limit: int = 4) -> str:
    shown = ", ".join(path_text(p) for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def file_status(status: str) -> str:
    return FILE_STATUS.get(status, status)


def writer(recorded: dict | None) -> str:
    """Who wrote a recorded file, from its manifest row (as the API shows it)."""
    if not recorded:
        return "not in the manifest"
    template = WRITERS.get(recorded.get("source") or "step", "")
    if recorded.get("source") in (None, "step", "decision") and not recorded.get("seq"):
        return "recorded"
    return template.format(seq=recorded.get("seq"), run=recorded.get("run"), tool=recorded.get("tool") or "?")


def held_note(item: dict) -> str:
    why = item.get("reason", "")
    if why == "plan_changes" and item.get("seqs"):
        steps = " and ".join(f"step {s}" for s in item["seqs"])
        return f"{steps} of the remaining plan also {'changes' if len(item['seqs']) == 1 else 'change'} it"
    return HELD_WHY.get(why, why.replace("_", " "))


def _would_hold(f: dict) -> bool:
    # Links and special files are adopted as what they are; what the remaining plan changes is held.
    return bool(f.get("plan"))


def repair_line(repair) -> Line:
    """What a repair actually did (its saved result), never what was asked for."""
    r = repair.result if isinstance(repair.result, dict) else {}
    who = repair.requested_by.username if getattr(repair, "requested_by", None) else "someone"
    head = (f"{REPAIR_NAMES.get(repair.repair, repair.repair)} by {who} ", At(repair.completed_at or repair.created_at))
    n = r.get("counts") or {}
    if repair.repair == "reconcile":
        held = [h.get("path") for h in r.get("held", [])]
        tail = (
            f": {_count(n.get('checked', 0), 'file')} checked, {n.get('adopted', 0)} adopted into the manifest, "
            f"{n.get('held', 0)} held"
        )
        if held:
            tail += f" ({_files(held)}: listed, never overwritten; a copy is kept in {r.get('held_copy')})"
        return (*head, tail + ". No file on disk was changed.")
    if repair.repair == "reissue":
        return (
            *head,
            f": {_count(n.get('rebuilt', 0), 'file')} rebuilt from recorded content into {r.get('workspace')}; "
            f"the old directory {r.get('old_workspace')} is kept as it was, as a held copy "
            f"({_count(n.get('kept', 0), 'difference')} kept in it)"
            + (
                f"; {_count(n['not_remade'], 'socket or device', 'sockets or devices')} not made again (the "
                "console never makes one; its record is dropped)."
                if n.get("not_remade")
                else "."
            ),
        )
    if r.get("ok"):
        return (
            *head,
            f": {_count(n.get('copied', 0), 'file')} copied to {r.get('destination')}, {n.get('unchanged', 0)} "
            f"unchanged, {n.get('kept', 0)} replaced after keeping a copy, {n.get('skipped', 0)} skipped "
            "(links are never followed).",
        )
    return (*head, f": failed again — {words.error_text(r.get('error') or '') or 'no detail'}")


def repair_task_line(action, repair_task) -> Line | None:
    if repair_task is None:
        return None
    back = owner(action.return_owner) or "its return owner"
    if repair_task.status == "done":
        return (f"Repair task #{repair_task.pk} ({repair_task.agent.name}) is done: this action is back with {back}.",)
    if repair_task.status == "cancelled":
        return (f"Repair task #{repair_task.pk} was cancelled: this action stays with {back}.",)
    return (
        f"Repair task #{repair_task.pk} is open, owned by {repair_task.agent.name}: when it is done this action "
        f"returns to {back}.",
    )


def workspace_confirmations(action) -> dict:
    """What each repair will do, restated before it is confirmed (from the evidence; the disk is read again)."""
    e = action.evidence or {}
    files = e.get("files") or []
    if action.kind == "workspace_export":
        return {
            "retry_export": (
                f"Retry export copies every file of {e.get('workspace') or 'the workspace'} to "
                f"{e.get('destination') or 'the export destination'} again, for run #{action.run_id}. A file "
                "already there with other content is first kept as a held copy, never lost; links are never "
                "followed. Nothing in the workspace changes.",
            )
        }
    hold = [f["path"] for f in files if _would_hold(f)]
    adopt = [f["path"] for f in files if not _would_hold(f)]
    reconcile = (
        f"Reconcile reads the workspace again and, for run #{action.run_id}, adopts into the manifest the files "
        f"only a person changed ({_files(adopt) or 'none'})"
    )
    reconcile += (
        f"; it holds {_files(hold)}, which the remaining plan also changes (listed and copied, never overwritten)"
        if hold
        else ""
    )
    reconcile += ". No file on disk is changed or deleted; what changed since this card was drawn is in its result."
    return {
        "reconcile": (reconcile,),
        "reissue": (
            f"Isolated reissue builds a fresh directory from the manifest's recorded content, points the task at "
            f"it, and keeps {e.get('workspace') or 'the current directory'} exactly as it is, as a held copy linked "
            f"from the task. Run #{action.run_id}'s continuation then runs in the fresh directory; nothing is "
            "deleted.",
        ),
    }


@dataclass
class FileView:
    path: str
    status: str
    status_text: str
    recorded: dict | None
    actual: dict | None
    writer: str
    diff: str | None = None
    note: str = ""

    def __post_init__(self):
        self.path = path_text(self.path)

    @property
    def recorded_note(self) -> str:
        return side_text(self.recorded)

    @property
    def actual_note(self) -> str:
        return side_text(self.actual)

    @property
    def recorded_at(self) -> datetime | None:
        return _moment((self.recorded or {}).get("mtime"))

    @property
    def actual_at(self) -> datetime | None:
        return _moment((self.actual or {}).get("mtime"))


def _moment(value) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def repair_rows(repair) -> list[dict]:
    """The files of a repair's result: what was done to each, with the hash before and after."""
    if repair is None or not isinstance(repair.result, dict):
        return []
    r = repair.result
    rows = []

    def sha(side) -> str | None:
        return side.get("sha256") if isinstance(side, dict) else side

    for a in r.get("adopted", []):
        rows.append(
            {
                "path": path_text(a["path"]),
                "done": f"adopted ({file_status(a['status'])})",
                "before": sha(a.get("before")),
                "after": sha(a.get("after")),
            }
        )
    for h in r.get("held", []):
        rows.append(
            {
                "path": path_text(h["path"]),
                "done": f"held: {held_note(h)}",
                "before": sha(h.get("before")),
                "after": sha(h.get("after")),
            }
        )
    for b in r.get("rebuilt", []):
        rows.append(
            {
                "path": path_text(b["path"]),
                "done": "rebuilt from recorded content" if not b.get("kind") else f"made again: {side_text(b)}",
                "before": b.get("before"),
                "after": b.get("after"),
            }
        )
    for x in r.get("not_remade", []):
        rows.append(
            {"path": path_text(x["path"]), "done": f"not made again: {side_text(x)}", "before": None, "after": None}
        )
    for x in r.get("copied", []):
        rows.append(
            {"path": path_text(x["path"]), "done": "copied", "before": x.get("before"), "after": x.get("after")}
        )
    for x in r.get("kept", []):
        rows.append(
            {
                "path": path_text(x["path"]),
                "done": f"kept first, in {path_text(x.get('copy'))}",
                "before": x.get("sha256"),
                "after": x.get("sha256"),
            }
        )
    for x in r.get("skipped", []):
        rows.append(
            {
                "path": path_text(x["path"]),
                "done": "skipped: links and special files are never followed",
                "before": None,
                "after": None,
            }
        )
    return rows


def evidence_files(action) -> list[FileView]:
    e = action.evidence or {}
    out = []
    notes = {
        "not_kept": "no diff: the recorded content was not kept",
        "binary_or_large": "no diff: not text under 64 KiB",
        "link": "a symbolic link — never followed",
        "special": "not a regular file: nothing to diff",
    }
    for f in e.get("files") or []:
        plan = f.get("plan") or []
        note = notes.get(f.get("diff_note"), "")
        if f.get("verified") is False:
            why = not_kept_text((f.get("actual") or {}).get("not_kept") or "not_read")
            note = (note + "; " if note else "") + f"its times changed; content {why.split(': ', 1)[-1]}"
        if plan:
            steps = " and ".join(f"step {s}" for s in plan)
            note = (note + "; " if note else "") + f"the remaining plan changes it ({steps})"
        out.append(
            FileView(
                f["path"],
                f["status"],
                file_status(f["status"]),
                f.get("recorded"),
                f.get("actual"),
                writer(f.get("recorded")),
                f.get("diff"),
                note,
            )
        )
    return out


def workspace_action_view(action, *, repairs: list, repair_task=None, can_admin: bool, can_operate: bool):
    e = action.evidence or {}
    validation = action.kind == "workspace_validation"
    if validation:
        n = sum((e.get("counts") or {}).values()) or len(e.get("files") or [])
        title = f"Workspace changed — {_count(n, 'file differs', 'files differ')}"
    else:
        title = "Export failed"
    view = ActionView(badge="", tone="", title=title, cause=cause(action.cause))
    view.files = evidence_files(action) if validation else []
    if not validation:
        error = words.error_text(e.get("error") or "") or "no detail"
        view.progress.append((f"Copying to {e.get('destination') or '?'} failed ", At(action.created_at), f": {error}"))
    view.progress += [repair_line(r) for r in repairs]
    view.repair_task = repair_task_line(action, repair_task)
    last = repairs[-1] if repairs else None
    view.result_rows = repair_rows(last)
    status = action.status
    if status in ("open", "exhausted"):
        view.badge, view.tone = "Needs decision", "attention"
        held = (
            [h.get("path") for h in (last.result or {}).get("held", [])] if last and last.repair == "reconcile" else []
        )
        if repair_task is not None and repair_task.status not in ("done", "cancelled"):
            view.next = (
                f"Repair task #{repair_task.pk} works on it first; an admin may still confirm a repair once no run "
                "writes in the workspace.",
            )
        elif held:
            view.next = (
                f"{_files(held)} {'is' if len(held) == 1 else 'are'} held: a person and the remaining plan both "
                "change it. An admin may choose Isolated reissue (this directory is kept and linked), or put the "
                "file back by hand and Reconcile again. Continuations and follow-ups wait (workspace hold).",
            )
        elif validation:
            view.next = (
                "An admin confirms a repair: Reconcile adopts what only a person changed; Isolated reissue continues "
                "in a fresh copy of the recorded files and keeps this directory. Until then continuations and "
                "follow-ups wait (workspace hold).",
            )
        else:
            view.next = ("Fix what the error says, then an admin uses Retry export.",)
        if can_admin:
            view.controls = frozenset(
                {"reconcile", "reissue", "repair_task"} if validation else {"retry_export", "repair_task"}
            )
            view.confirm = workspace_confirmations(action)
    elif status == "resolved":
        view.badge, view.tone = "Repaired", "done"
        by = f" by {action.closed_by}" if action.closed_by else ""
        effect = {
            "reconciled": "the manifest now matches the disk; the workspace hold is lifted and the continuation "
            "goes through normal admission",
            "reissued": "the task continues in the fresh directory; the old one is kept as a held copy",
            "exported": "the workspace is copied to its export destination",
        }.get(action.resolution, action.resolution)
        view.closed = (f"{action.resolution.capitalize()}{by} ", At(action.closed_at), f": {effect}.")
    elif status == "retired":
        view.badge, view.tone = "Retired", "muted"
        view.closed = ("Retired ", At(action.closed_at), f": {action.resolution_note or 'no longer current'}.")
    elif status == "cancelled":
        view.badge, view.tone = "Cancelled", "muted"
        by = f" by {action.closed_by}" if action.closed_by else ""
        view.closed = (
            f"Cancelled{by} ",
            At(action.closed_at),
            ". No file was changed; the next continuation validates the workspace again.",
        )
    return view


@dataclass
class WorkspaceView:
    path: str
    hold: Line | None
    export: Line | None
    files: list[FileView]
    held_copies: list[dict]
    empty: str = ""
    counts: str = ""
    walk: str = ""  # what the walk did not reach (walk_note)


def _kept_note(f) -> str:
    """Why a recorded file's content was not kept, on the task's panel (from its manifest entry)."""
    row = f.row
    if row is None or row.kind != "file" or row.kept or not row.not_kept:
        return ""
    return not_kept_text(row.not_kept, row.not_kept_detail)


def walk_note(bounds: dict) -> str:
    """What a walk of a workspace did not reach, in words (recovery.workspaces.validation.walk_bounds)."""
    said = []
    walk = bounds.get("walk")
    if walk:
        last = f" after {path_text(walk['last'])}" if walk.get("last") is not None else ""
        said.append(
            f"The workspace holds more than {walk.get('limit'):,} entries: entries{last} (in path order) are "
            "neither recorded nor compared."
        )
    if bounds.get("unread"):
        said.append(
            f"{_count(bounds['unread'], 'directory', 'directories')} could not be read: nothing in them is compared."
        )
    if bounds.get("too_long"):
        said.append(f"{_count(bounds['too_long'], 'entry has', 'entries have')} a path too long to record.")
    return " ".join(said)


def step_files_note(notes: dict | None) -> str:
    """A step's completion that could not keep every file it changed, or could not read the workspace."""
    if not notes:
        return ""
    said = []
    if notes.get("error"):
        said.append(
            f"the workspace could not be read when it completed ({words.error_text(notes['error'])}); its outcome is "
            "recorded"
        )
    items = notes.get("not_kept") or []
    if items:
        n = notes.get("not_kept_count", len(items))
        listed = "; ".join(
            f"{path_text(i.get('path'))} — {not_kept_text(i.get('why', ''), i.get('detail', ''))}" for i in items[:5]
        )
        more = f"; and {n - min(5, len(items))} more" if n > min(5, len(items)) else ""
        said.append(f"{_count(n, 'file')} not kept: {listed}{more}")
    if notes.get("scan"):
        walk = notes["scan"]
        last = f" after {path_text(walk['last'])}" if walk.get("last") is not None else ""
        said.append(f"the workspace holds more than {walk.get('limit'):,} entries: entries{last} were not recorded")
    if notes.get("too_long"):
        said.append(f"{_count(notes['too_long'], 'entry has', 'entries have')} a path too long to record")
    return ". ".join(s[:1].upper() + s[1:] for s in said) + "." if said else ""


def workspace_view(state) -> WorkspaceView:
    """The task page's workspace panel: every file with its status, the hold, held copies, the last export."""
    from recovery.rules.gates import workspace_hold

    files = [
        FileView(
            wire(f.path),
            f.status,
            file_status(f.status),
            f.recorded,
            f.actual,
            writer(f.recorded),
            note=_kept_note(f),
        )
        for f in state.files
    ]
    hold = None
    if state.hold is not None:
        h = workspace_hold(state.hold.pk, state.hold.kind)
        hold = (f"Workspace hold — {h.detail} Continuations and follow-ups wait; lifted by {h.lifted_by}.",)
    export = None
    if state.export is not None:
        x = state.export
        n = (x.result or {}).get("counts") or {}
        if x.finished_at is None:
            export = (f"Exporting to {x.destination} since ", At(x.created_at), ": the copy is under way.")
        elif x.ok:
            export = (
                f"Exported to {x.destination} ",
                At(x.created_at),
                f": {n.get('copied', 0)} copied, {n.get('unchanged', 0)} unchanged.",
            )
        else:
            export = (f"Export to {x.destination} failed ", At(x.created_at), f": {words.error_text(x.error)}")
    differ = sum(1 for f in state.files if f.status not in ("same",))
    counts = f"{_count(len(state.files), 'file')}" + (
        f"; {_count(differ, 'differs', 'differ')} from the manifest" if differ else ""
    )
    copies = [
        {
            "copy": c,
            "text": {
                "reissue": "The workspace before an isolated reissue, kept as it was",
                "reconcile": "Files a reconcile held",
                "export": "Destination files an export replaced, kept first",
            }.get(c.reason, c.reason),
        }
        for c in state.held_copies
    ]
    empty = (
        ""
        if state.files
        else ("The workspace directory is missing on this server." if not state.exists else "No files yet.")
    )
    return WorkspaceView(state.path, hold, export, files, copies, empty, counts, walk_note(state.bounds))


# --- sign-in and limits (SECURITY.md) ---------------------------------------------------------------


# The console's pages for a request it cannot answer: (title, reason, what to do).
PROBLEMS = {
    404: (
        "Page not found",
        "There is no page at this address.",
        "It may have been mistyped, or what it showed is in another organization or private to someone else.",
    ),
    400: (
        "This request could not be read",
        "The address or the form it sent is malformed, so nothing was done.",
        "Nothing was changed. Go back and try again from the page; a link copied whole usually works.",
    ),
}


def lockout_text(*, failures: int, cooloff_minutes: int | None) -> str:
    """The sign-in page after too many failed attempts (django-axes). It says what happened and what lifts it."""
    wait = (
        f"Try again in {cooloff_minutes} minute{'s' if cooloff_minutes != 1 else ''}, or ask"
        if cooloff_minutes
        else "Ask"
    )
    return (
        f"Signing in is locked for this account from this address after {failures} failed attempts. "
        f"{wait} an admin of your organization to unlock it now."
    )


# --- triage at scale: board filters and bulk operations (DESIGN §12) ---------------------------

SORT_NAMES = {"recent": "Last change first", "urgency": "Most urgent first"}
AGE_NAMES = {"1h": "over an hour", "4h": "over 4 hours", "1d": "over a day", "1w": "over a week"}


def owner_option(value: str) -> str:
    """A recovery owner as the filter menu names it."""
    return OWNERS.get(value) or owner(value) or "operators"


def age_label(waiting: bool) -> str:
    """What a board row's age measures: since when it waits on a person (an action opened), or its last change."""
    return "waiting since" if waiting else "last change"


BULK_ACTIONS = {
    "retry": "Retry",
    "cancel": "Cancel the recovery action",
    "pause": "Pause",
    "resume": "Resume",
    "continue": "Continue now",
    "decide": "Decide the unknown outcome",
}
BULK_RESULTS = {"": "Not reached yet", "applied": "Applied", "skipped": "Skipped", "failed": "Failed"}
BULK_REASONS = {
    "changed_since_preview": "it changed since the preview, so it was not acted on",
    "cancelled": "not reached: the operation was cancelled first, so nothing was done to it",
    "not_visible": "you can no longer see this task",
    "no_open_action": "it has no open recovery action to retry",
    "no_live_action": "it has no live recovery action to cancel",
    "no_unknown_outcome": "it has no open unknown-outcome decision",
    "workspace_action": "its recovery action is about the workspace: an admin settles it with a repair",
    "exhausted": "its recovery action is exhausted: an admin may grant one more attempt on its card",
    "recovery_unavailable": "recovery of its run is unavailable: start over or cancel",
    "duplicate_risk_not_accepted": "it would run an operation of unknown outcome again, and the duplicate risk "
    "was not accepted",
    "not_agent_run": "its run is a scripted plan: only an agent run's agent can verify a call itself",
    "already_paused": "it is already paused",
    "not_paused": "it is not paused",
    "run_live": "a run of it is still queued or running",
    "needs_decision": "a recovery action decides how it continues",
    "nothing_to_continue": "there is nothing to continue",
    "workspace_hold": "workspace hold: the continuation was refused because the workspace differs from its "
    "checkpoints; an admin repairs it",
    "forbidden": "you no longer have the role for this",
    "error": "an unexpected error",
}


def bulk_reason(code: str) -> str:
    """Why an item was (or would be) refused, in words."""
    if code in BULK_REASONS:
        return BULK_REASONS[code]
    if code in GATES:
        return GATES[code]
    return code.replace("_", " ") if code else ""


def bulk_risk(op_action: str, params: dict) -> str:
    """The consent the preview carries, restated before anything happens."""
    if op_action == "decide" and params.get("outcome") == "not_performed":
        return "Each operation of unknown outcome runs again: if it did happen, it happens twice."
    if op_action == "retry" and params.get("accept_duplicate_risk"):
        return "An operation of unknown outcome runs again where a task has one: if it did happen, it happens twice."
    return ""


_SEEN_WORDS = {"state": "state", "run": "latest run", "run_status": "its run"}


def bulk_changes(diff) -> str:
    """What changed between the preview and now (rules.bulk.changes), as one sentence."""
    parts = []
    fields = {f for f, _, _ in diff}
    for f, then, now in diff:
        if f == "state":
            parts.append(f"it was {TASK_STATES.get(then, then)}, now {TASK_STATES.get(now, now)}")
        elif f == "paused":
            parts.append("it was paused" if now else "its pause was lifted")
        elif f == "run":
            parts.append(f"a new run #{now} exists" if now else "its run is gone")
        elif f == "run_status" and "run" not in fields:
            parts.append(f"its run became {RUN_STATUSES.get(now, now).lower()}")
        elif f == "action":
            parts.append(f"its recovery action is now #{now}" if now else "its recovery action is no longer live")
        elif f == "action_version" and "action" not in fields:
            parts.append("its recovery action changed")
    return ("Changed since the preview: " + "; ".join(dict.fromkeys(parts)) + ".") if parts else ""


def bulk_item_text(op_action: str, params: dict, item) -> str:
    """What an item's result says: what was done (as far as the item's saved facts go), or why not."""
    if item.result == "applied":
        run = f" — run #{item.run_id}" if item.run_id else ""
        if op_action == "retry":
            return f"Retry requested{run}."
        if op_action == "decide":
            decided = DECIDED.get(params.get("outcome", ""), "")
            return f"Decision recorded: {decided}{run}."
        if op_action == "cancel":
            return f"Recovery action #{item.action_id} cancelled." if item.action_id else "Recovery action cancelled."
        if op_action == "pause":
            return "Paused."
        if op_action == "resume":
            return "Pause lifted."
        return f"Continuation requested{run}."
    if not item.result:
        return ""
    words = bulk_reason(item.reason)
    text = words[:1].upper() + words[1:] + "." if words else ""
    if item.detail and item.reason != "cancelled":
        text = f"{text} {item.detail}".strip()
    return text


def bulk_predicted(code: str) -> str:
    """What the preview expects for an item."""
    return "Would be acted on." if not code else f"Would be skipped: {bulk_reason(code)}."


def bulk_title(op) -> str:
    params = op.params or {}
    name = BULK_ACTIONS.get(op.action, op.action)
    if op.action == "decide":
        name += f": {DECIDED.get(params.get('outcome', ''), '')}"
    return f"{name} · {op.count:,} task{'s' if op.count != 1 else ''}"


def bulk_status(op, counts, *, expired: bool) -> tuple[str, str]:
    """(badge, tone) of an operation."""
    if op.status == "previewed":
        return ("Preview expired", "idle") if expired else ("Preview", "decide")
    if op.status == "running":
        return "Running", "running"
    if op.status == "finished":
        return ("Finished with failures", "bad") if counts.failed else ("Finished", "ok")
    return ("Discarded", "idle") if op.started_at is None else ("Cancelled", "idle")


def bulk_line(op, counts, *, expired: bool) -> Line:
    """Where an operation stands, only as far as its items' saved results go."""
    reached, total = counts.reached, counts.total
    if op.status == "previewed":
        if expired:
            return ("This preview expired ", At(op.expires_at), " — nothing was done. Preview again.")
        return ("Preview — nothing has been done yet. Confirm before it expires ", At(op.expires_at), ".")
    if op.status == "running":
        if reached == 0:
            return (
                f"Started by {op.actor_name} ",
                At(op.started_at),
                ": the supervisor works through it in batches; nothing has been applied yet.",
            )
        return (f"Running — {reached:,} of {total:,} reached.",)
    if op.status == "finished":
        return ("Finished ", At(op.finished_at), f" — all {total:,} reached.")
    if op.started_at is None:
        return (f"Discarded by {op.cancelled_by} ", At(op.finished_at), " — nothing was done.")
    return (
        f"Cancelled by {op.cancelled_by} ",
        At(op.finished_at),
        f" — {reached:,} of {total:,} were reached before it stopped; the other {counts.untouched:,} were not touched.",
    )


def bulk_counts_text(counts) -> str:
    """Where the items stand; "skipped" counts those judged and refused, not those a cancel never reached."""
    text = f"{counts.applied:,} applied · {counts.skipped - counts.untouched:,} skipped · {counts.failed:,} failed"
    return text + (f" · {counts.untouched:,} not reached" if counts.untouched else "")


FILTER_NAMES = {
    "state": "state",
    "q": "search",
    "agent": "agent",
    "owner": "recovery owner",
    "tool": "tool",
    "age": "waiting",
    "sort": "order",
}


def _filter_value(key: str, value: str) -> str:
    if key == "state":
        views = {"active": "running or stopping", "follow_through": "needs follow-through"}
        return views.get(value) or TASK_STATES.get(value, value)
    if key == "age":
        return AGE_NAMES.get(value, value)
    if key == "owner":
        return owner_option(value)
    return value


def bulk_selection(selection: dict) -> str:
    """How the scope was chosen, as the preview froze it."""
    if "filter" in (selection or {}):
        f = selection["filter"] or {}
        shown = {k: v for k, v in f.items() if k != "sort"}
        if not shown:
            return "Every task you could see when the preview was made."
        said = "; ".join(f"{FILTER_NAMES.get(k, k)} {_filter_value(k, v)}" for k, v in sorted(shown.items()))
        return f"Every task that matched the filter when the preview was made ({said}); later matches are not in it."
    n = (selection or {}).get("ids", 0)
    return f"{n:,} task{'s' if n != 1 else ''} chosen by hand."


# --- notifications and decision deadlines (issue 25, parts 3 and 4) ---------------------------------

NOTICE_NAMES = {
    "decision_waiting": "A decision is waiting",
    "exhausted": "Recovery used up its attempts",
    "repair_waiting": "A workspace repair waits for an admin",
    "breaker_opened": "Automatic recovery was paused (a breaker opened)",
    "deadline_passed": "A decision waited past its deadline",
}
DESTINATION_KINDS = {"webhook": "Signed webhook", "apprise": "Apprise (chat, mail)"}
DELIVERY_STATUSES = {
    "pending": "Waiting to be sent",
    "delivered": "Delivered",
    "failed": "Failed; it will be tried again",
    "given_up": "Given up",
}
OVERDUE_BADGE = "overdue"


def seconds_text(seconds: int) -> str:
    """A whole span in its largest unit: "4 hours", "90 minutes", "1 day"."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def overdue_text(deadline_seconds: int) -> str:
    """What the overdue badge means; the deadline decides nothing."""
    return f"Waiting longer than the {seconds_text(deadline_seconds)} deadline; it still waits for a person."


def notice_message(notice: str, *, task_id, title: str, url: str) -> tuple[str, str]:
    """A chat or mail notice (Apprise): its title and body."""
    head = NOTICE_NAMES.get(notice, notice)
    what = f"task #{task_id} “{title}”" if task_id else f"“{title}”"
    return f"Recovery console: {head.lower()}", f"{head}: {what}. {url}"


def destination_state(destination) -> str:
    """A destination's line on the settings page: on, off, or failing (and why)."""
    if destination.failing_since is not None:
        n = destination.failures
        error = f" The last error: {destination.last_error}" if destination.last_error else ""
        return (
            f"Failing: {n} deliver{'ies' if n != 1 else 'y'} in a row were given up, so it gets no new notices "
            f"until an admin turns it on again.{error}"
        )
    if not destination.enabled:
        return "Off: it gets no new notices."
    if destination.failures:
        return f"On; the last {destination.failures} given up. The last error: {destination.last_error}"
    return "On."


def delivery_try_text(attempt: dict) -> str:
    """One try of a delivery: the HTTP status it got, or the error that stopped it."""
    status = attempt.get("status")
    if attempt.get("error"):
        return f"HTTP {status}: {attempt['error']}" if status else attempt["error"]
    return f"HTTP {status}" if status else "Sent"


# --- the recovery breaker (DESIGN §14; recovery.rules.breaker composes the breaker's own sentence) ----------

BREAKER_STATES = {"open": "Open", "half_open": "Half-open: one trial continuation", "closed": "Closed"}


def breaker_held_line(run_id: int, breaker_id: int) -> Line:
    """A run the breaker holds: it is not continued automatically until the breaker closes."""
    return (
        f"Run #{run_id} waits: recovery breaker #{breaker_id} paused automatic recovery of this agent. The "
        "supervisor continues it on its first pass after the breaker closes (an admin closes it with a reason; "
        "after its cool-off one trial continuation may close it).",
    )


def breaker_closed_text(breaker) -> str:
    """Who closed a breaker and why, from its saved row."""
    if breaker.state != "closed":
        return ""
    return f"Closed by {breaker.closed_by}: {breaker.reason}"


def breaker_tasks_text(n: int) -> str:
    return "No task it counted is visible to you." if n == 0 else _count(n, "task it counted", "tasks it counted")


def breaker_notice_title(agent: str, signature: str) -> str:
    """A breaker-opened notice's title (it names no task): whose automatic recovery paused, and on what failure."""
    return f"Automatic recovery paused for {agent or 'an agent'}: {signature or 'the same failure'}"


# --- Continue from step k (recovery/actions/continue_from.py) ---------------------------------------------------
# Pure words over the run's `carry["continued_from"]` and the preview: what was reused, what runs again, and the
# consent a person gave. Never "recovered" or "resumed": the new run is a new chain that reuses a saved prefix.


def step_span(seqs) -> str:
    """ "step 4", "steps 1-3", "steps 1-2 and 5" (consecutive runs joined by an en dash)."""
    seqs = sorted(set(seqs))
    if not seqs:
        return "no step"
    parts, start = [], 0
    for i in range(1, len(seqs) + 1):
        if i == len(seqs) or seqs[i] != seqs[i - 1] + 1:
            first, last = seqs[start], seqs[i - 1]
            parts.append(str(first) if first == last else f"{first}\N{EN DASH}{last}")
            start = i
    joined = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    single = len(seqs) == 1
    return f"step{'' if single else 's'} {joined}"


def continued_from_text(carry: dict | None) -> str:
    """How a run started by Continue from step k is named wherever it is shown ("" for any other run), e.g.
    "Continuing from step 4 in run #12 (by olive): steps 1-3 reused, steps 4-5 run again" (with en dashes)."""
    cont = (carry or {}).get("continued_from")
    if not isinstance(cont, dict) or not cont.get("seq"):
        return ""
    by = f" (by {cont['by']})" if cont.get("by") else ""
    reused = cont.get("reused") or []
    again = cont.get("runs_again") or []
    said_reused = f"{step_span(reused)} reused" if reused else "nothing reused"
    said_again = f"{step_span(again)} {'runs' if len(again) == 1 else 'run'} again" if again else "nothing runs again"
    text = f"Continuing from step {cont['seq']} in run #{cont.get('run')}{by}: {said_reused}, {said_again}."
    if cont.get("accepted_duplicate_risk"):
        text += f" Duplicate risk accepted: {cont.get('reason') or 'no reason given'}."
    return text


def continue_from_preview_lines(preview, *, task_status: str = "") -> dict:
    """The preview's sentences (a `recovery.actions.continue_from.Preview`); a done task is reopened by it."""
    risky = preview.side_effects
    again = [s["seq"] for s in preview.runs_again]
    return {
        "title": f"Continue task #{preview.task} from step {preview.seq} of run #{preview.run}",
        "reused": (
            f"Reused from run #{preview.run}: {step_span(preview.reused)}, their saved results; they do not run again."
            if preview.reused
            else "Nothing is reused: every saved step runs again, as in Start over."
        ),
        "runs_again": f"Runs again, fresh: {step_span(again)}.",
        "risk": (
            f"{step_span([s['seq'] for s in risky]).capitalize()} may act outside again (recovery mode notify): "
            "what they did in the saved run may happen twice."
            if risky
            else "None of the steps that run again may act outside (no notify-mode step): no consent is needed."
        ),
        "note": "A new run of the task, not a recovery: the runs before it are no longer recovered."
        + (" The task is done: continuing reopens it." if task_status == "done" else ""),
    }


def continue_from_split_text(seq) -> str:
    """Under a diverged replay: what Continue from the split step does (its preview names every call first)."""
    if not isinstance(seq, int) or seq < 1:
        return ""
    before = f"reuses {step_span(range(1, seq))}" if seq > 1 else "reuses nothing"
    return (
        f"A new run that {before} and lets the agent take step {seq} onward fresh; "
        "the preview lists what runs again first."
    )


# --- recovery limits per organization (h25org; recovery/limits.py, console/limits_views.py) ----------------------

# field: (label, unit, what it does)
LIMIT_FIELDS = {
    "breaker_tasks": (
        "Breaker threshold",
        "tasks",
        "The breaker of an agent and failure opens when more distinct tasks than this failed the same way "
        "within the window.",
    ),
    "breaker_window_seconds": ("Breaker window", "seconds", "How far back the breaker counts failed tasks."),
    "breaker_cooloff_seconds": (
        "Breaker cool-off",
        "seconds",
        "How long an open breaker holds automatic continuations before it lets one trial continuation run.",
    ),
    "decision_deadline_seconds": (
        "Decision deadline",
        "seconds",
        "How long a decision may wait before it is marked overdue and the deadline notice is sent. "
        "It decides nothing: the decision still waits for a person.",
    ),
}


def limit_default_text(field: str, value: int) -> str:
    """Under a limit's field: the deployment's default, used while the field is blank."""
    if field == "breaker_tasks":
        return f"Blank: the deployment's default, {value} task{'s' if value != 1 else ''}."
    return f"Blank: the deployment's default, {seconds_text(value)}."


def limits_saved_text(changed: int) -> str:
    return "Recovery limits saved." if changed else "Nothing changed: the recovery limits are as they were."


def limit_invalid_text(field: str, low: int, high: int) -> str:
    """A limit refused: which, and what it accepts."""
    label, unit, _ = LIMIT_FIELDS[field]
    return f"{label}: a whole number of {unit} from {low} to {high}, or blank for the deployment's default."


def continued_later_text(later) -> str:
    """On a run's page: the run a person started later by Continue from step k of it ("" for none), e.g.
    "Continued from step 4 in run #13" (its step and its number, from the later run's saved carry)."""
    cont = ((getattr(later, "carry", None) or {}) if later is not None else {}).get("continued_from")
    if not isinstance(cont, dict) or not cont.get("seq"):
        return ""
    return f"Continued from step {cont['seq']} in run #{later.pk}"
