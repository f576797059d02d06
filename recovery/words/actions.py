"""A recovery action's card in words: its headline, progress, decision and what a person may do."""

from recovery.rules import classify as c
from recovery.words.agent_runs import SETTING_WORDS, notice_text
from recovery.words.bounds import exhaustion_words
from recovery.words.card import ActionView
from recovery.words.lines import At, Line, Said, said_part
from recovery.words.vocabulary import DECIDED, GATES, RUN_ENDED, cause, gate_line, step_where
from recovery.words.workspaces import WORKSPACE_KINDS, workspace_action_view


def _decision_line(action) -> Line | None:
    if not action.decision:
        return None
    if action.decision == "unresolved":
        return ("Unresolved — ", action.decided_by, ", ", At(action.decided_at), *said_part(action.decision_note))
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
    job_facts=None,
) -> ActionView:
    """Everything an action card (and the API's `next_action`) says.

    `attempts` are the action's attempts oldest first; `runs` maps the ids of
    their continuation runs to loaded runs; `gate` is the gate that would
    refuse an admission now (for a live action); `run_hold` a hold that keeps a
    queued continuation from starting. A workspace action takes its `repairs`
    (oldest first), its `repair_task` (a loaded task, or None) and, while a
    worker holding the workspace has a repair job of it, `job_facts`.
    """
    if action.kind in WORKSPACE_KINDS:
        return workspace_action_view(
            action,
            repairs=list(repairs),
            repair_task=repair_task,
            can_admin=can_admin,
            can_operate=can_operate,
            job_facts=job_facts,
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
        view.cause = exhaustion_words(action)
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
            view.closed = ("Resolved ", At(action.closed_at), *said_part(action.resolution_note), ".")
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
