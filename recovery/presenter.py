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

from dataclasses import dataclass, field
from datetime import datetime

from recovery import classify as c
from tasks.batches import NESTED_BASE


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
    "auto_resume_off": "The run was interrupted and everything unfinished is safe to run again, but this agent waits "
    "for an operator (auto-resume is off).",
    "step_failed": "A step failed before the worker could finish the run.",
    "lease_lapsed": "The worker stopped renewing its lease, so the run was marked interrupted.",
    "needs_decision": "The run needs a person to decide how to continue.",
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
}

OWNERS = {"role:operator": "operators", "role:admin": "admins"}

DECIDED = {"performed": "it happened", "not_performed": "it did not happen", "unresolved": "unresolved"}


# Recovery of the run is unavailable: what remains is Start over, Cancel (or Close).
NOT_CONTINUABLE = ("corrupt_checkpoint", *c.UNAVAILABLE)


def step_where(seq, evidence: dict) -> str:
    """ "step 3", or "item 2 of step 1" for a batch item (the action's evidence says which)."""
    if evidence.get("item") and evidence.get("parent_seq"):
        return f"item {evidence['item']} of step {evidence['parent_seq']}"
    return f"step {seq}"


def cause(code: str) -> str:
    return CAUSES.get(code, code.replace("_", " ").capitalize() + ".")


def owner(value: str) -> str:
    if not value:
        return ""
    return OWNERS.get(value, value.split(":", 1)[-1])


def gate_line(hold) -> Line | None:
    """A closed gate as the card says it: which gate, the fact, and who lifts it."""
    if hold is None:
        return None
    return (f"Held: {GATES.get(hold.gate, hold.gate)} — {hold.detail} Lifted by {hold.lifted_by}.",)


# --- task state ---------------------------------------------------------------------


def task_state(task, current_run, actions) -> str:
    """The one vocabulary of task states, used by board, inbox, header and API alike."""
    if task.status in ("cancelled", "done"):
        return task.status
    live = [a for a in actions if a.status in ("open", "retrying", "exhausted")]
    if any(a.status == "exhausted" for a in live):
        return "exhausted"
    if any(a.status == "open" for a in live):
        return "needs_decision"
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


def stopped_line(run, *, auto_resume: bool = True) -> Line | None:
    """Why a stopped run stopped, and what continues it — never "automatically" for a person's Stop."""
    if run.status != "stopped":
        return None
    by = run.stop_requested_by or "someone"
    when = (" ", At(run.stop_requested_at)) if run.stop_requested_at else ()
    if run.stop_reason == "stop":
        return ("Stopped by ", by, *when, ": continues when someone writes a follow-up.")
    if run.stop_reason == "paused":
        return ("Stopped because the task was paused", *when, ": continues once when the pause lifts.")
    if run.stop_reason == "budget":
        return ("Stopped at the budget limit", *when, ": continues once when an admin raises or removes it.")
    if run.stop_reason == "closed":
        return ("Stopped by ", by, " closing the task", *when, ".")
    return ("Stopped", *when, ".")


def task_view(task, current_run, actions, *, hold=None, last_run=None) -> TaskView:
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
        if lead is not None:
            view.why = (f"Recovery action #{lead.pk}: {cause(lead.cause)}",)
    elif state == "idle" and last_run is not None:
        view.why = idle_line(last_run, hold=hold)
    return view


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
        if current_run.status == "stopped" and current_run.stop_reason == "stop":
            return f"Stopped by {current_run.stop_requested_by or 'someone'}: waits for a follow-up."
        ended = RUN_ENDED.get(current_run.status, current_run.status)
        return f"Nothing is scheduled: run #{current_run.pk} ended ({ended})."
    return ""


def idle_line(last_run, *, hold=None) -> Line:
    """A task with nothing scheduled says why, and what moves it on (never nothing at all)."""
    if last_run.status == "stopped" and last_run.stop_reason == "stop":
        return stopped_line(last_run)
    if hold is not None:
        return gate_line(hold)
    ended = RUN_ENDED.get(last_run.status, last_run.status)
    return (
        f"Nothing is scheduled: run #{last_run.pk} ended ({ended}). An operator may Continue now, Start over or "
        "Close the task.",
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
    if attempt.decision in ("performed", "not_performed"):
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
) -> ActionView:
    """Everything an action card (and the API's `next_action`) says.

    `attempts` are the action's attempts oldest first; `runs` maps the ids of
    their continuation runs to loaded runs; `gate` is the gate that would
    refuse an admission now (for a live action); `run_hold` a hold that keeps a
    queued continuation from starting.
    """
    unknown = action.kind == "unknown_outcome"
    evidence = action.evidence or {}
    latest = attempts[-1] if attempts else None
    run = runs.get(latest.continuation_run_id) if latest is not None else None
    tool = evidence.get("tool")
    if unknown and tool:
        title = f"Unknown outcome — {tool}, {step_where(action.seq, evidence)}"
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
        if action.attempts or action.kind == "continuation":
            view.attempts = f"{action.attempts} of {action.max_attempts} attempts used"
        if unknown:
            view.next = (
                f"Check whether {tool or 'the operation'} ({step_where(action.seq, evidence)}) happened, then record "
                "what you found.",
            )
        elif action.cause in c.UNAVAILABLE:
            view.next = (
                f"Recovery of run #{action.run_id} is unavailable: Start over (a fresh run from the beginning that "
                "reuses nothing), or cancel this action.",
            )
        elif action.cause in NOT_CONTINUABLE:
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
            elif action.cause not in NOT_CONTINUABLE:
                controls.add("retry")
        view.controls = frozenset(controls)
    elif status == "retrying":
        decided = latest is not None and latest.decision in ("performed", "not_performed")
        view.badge, view.tone = ("Decision recorded" if decided else "Retry requested"), "pending"
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


def diagnosis_line(run, diagnosis, *, auto_resume: bool, continued_by=None) -> Line | None:
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
        return (head + ".",)
    words = DISPOSITION_WORDS.get(diagnosis.disposition, diagnosis.disposition)
    return (f"{words}: {reasons}" if reasons else words + ".",)


@dataclass
class StepRow:
    label: str
    note: Line | None = None
    declared: bool = False  # a person's statement stands in for the step: it has no saved result


def step_row(step, *, run, verdict=None, disposition: str | None = None, reused_run_id=None) -> StepRow:
    """The label and note of one step on a run card."""
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
    else:
        label = {"planned": "planned", "dispatched": "running", "completed": "completed", "failed": "failed"}
        row = StepRow(label[step.phase])
        if step.phase == "dispatched" and run.status not in ("running", "stopping"):
            row.label = "cut off"
        if step.phase == "failed":
            row.note = (f"failed: {step.error or 'no detail'}",)
    if again:
        row.note = (again, "; ", *row.note) if row.note else (again,)
    return row


RERUN_WORDS = {
    "replay": "run again (replay)",
    "retry": "run again (retry requested)",
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
            return StepRow("failed", (f"failed: {step.error or 'no detail'} — kept as failed",))
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


def run_lines(run, *, auto_resume: bool = True) -> list[Line]:
    """The sentences under a run's badge: why it stopped or ended, in saved facts."""
    lines: list[Line] = []
    fresh = fresh_start_text(run.carry)
    if fresh:
        lines.append((fresh,))
    if run.status == "stopping":
        lines.append(stopping_line(run))
    stopped = stopped_line(run, auto_resume=auto_resume)
    if stopped:
        lines.append(stopped)
    if run.stop_receipt:
        by = run.stop_receipt.get("by")
        words = {
            "worker": "Stop verified: the worker finished with its lease.",
            "lease_lapse": "Stop verified: the worker stopped renewing its lease and it lapsed.",
            "not_started": "Stop verified: no worker had started it.",
        }
        if by in words:
            lines.append((words[by],))
    if run.status == "interrupted" and run.error_code == "lease_lapsed":
        lines.append((f"Interrupted: {run.error_detail or 'its lease lapsed.'}",))
    elif run.error_code and run.status != "stopped":
        lines.append((f"{run.error_code.replace('_', ' ').capitalize()}: {run.error_detail}".rstrip(": "),))
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
        state = {"delivered": "delivered", "admitted": "delivered when a worker starts it"}.get(m.status, m.status)
        lines.append((f"Carries a follow-up from {author} (", At(m.created_at), "): ", Said(body), f" — {state}."))
    return lines
