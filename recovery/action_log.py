"""A recovery action's record: opening it, reading it locked, and moving it. The one writer of an action's row.

Every change to an action goes through `action_move`: the status table in `recovery.transitions`, the compare-and-set
on the `version` the writer read, and the event that records the change, in the caller's transaction. Opening is
`action_open` (the partial unique index settles two openers). The commands people and the supervisor take on actions
(`recovery.actions`, `recovery.workspaces.repairs`, `recovery.settle`, `recovery.workspaces.exports`,
`recovery.continuations`) build on these; nothing else writes an action.
"""

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from recovery.models import LIVE_ACTION_STATUSES, ActionKind, ActionStatus, RecoveryAction
from recovery.rules import classify as c
from recovery.transitions import ACTIONS
from tasks.batches import item_position
from tasks.errors import NotFound, StaleVersion
from tasks.events import event_append
from tasks.models import Run
from tasks.selectors import visible_tasks
from tasks.transitions import NewEvent


def action_due() -> timedelta:
    return timedelta(seconds=getattr(settings, "CONSOLE_ACTION_DUE_SECONDS", 24 * 3600))


def action_event(action: RecoveryAction, kind: str, actor, **payload) -> NewEvent:
    return NewEvent(
        kind,
        actor,
        action.org_id,
        action.task_id,
        action.run_id,
        {"action": action.pk, "kind": action.kind, **payload},
    )


def action_move(action: RecoveryAction, to: str, *, actor, kind: str, payload: dict | None = None, **fields) -> None:
    """Move `action` from the status and version it was read at; refreshes it. StaleVersion if it changed."""
    moved = ACTIONS.move(
        action.pk,
        to,
        expect=action.status,
        where={"version": action.version},
        strict=False,
        event=action_event(action, kind, actor, status=to, **(payload or {})),
        updated_at=timezone.now(),
        **fields,
    )
    if not moved:
        action.refresh_from_db()
        raise StaleVersion(
            f"Action #{action.pk} changed meanwhile: it is now {action.status} (version {action.version}).",
            current_version=action.version,
            status=action.status,
        )
    action.refresh_from_db()


def action_change(
    action: RecoveryAction, *, actor, kind: str, payload: dict | None = None, strict: bool = True, **fields
) -> bool:
    """Change `action` without moving its status (an owner, a repair task, a repair recorded), from the version it
    was read at, appending the event that records it; refreshes it. A changed action is StaleVersion (with
    `strict`) or False.
    """
    updated = RecoveryAction.objects.filter(pk=action.pk, version=action.version, status=action.status).update(
        version=F("version") + 1, updated_at=timezone.now(), **fields
    )
    if not updated:
        if not strict:
            return False
        action.refresh_from_db()
        raise StaleVersion(
            f"Action #{action.pk} changed meanwhile: it is now {action.status} (version {action.version}).",
            current_version=action.version,
            status=action.status,
        )
    e = action_event(action, kind, actor, status=action.status, **(payload or {}))
    event_append(org_id=e.org_id, task_id=e.task_id, run_id=e.run_id, kind=e.kind, actor=actor, payload=e.payload)
    action.refresh_from_db()
    return True


def action_locked(action_id: int, user) -> RecoveryAction:
    """Lock the action for a person who may see it (404 otherwise, never 403)."""
    action = (
        RecoveryAction.objects.select_for_update(of=("self",))
        .select_related("task__agent", "run", "original_owner")
        .filter(pk=action_id, task__in=visible_tasks(user))
        .first()
    )
    if action is None:
        raise NotFound(f"No recovery action #{action_id}.")
    return action


def action_check_version(action: RecoveryAction, version) -> None:
    if version != action.version:
        raise StaleVersion(
            f"This card is out of date: the action is now at version {action.version} ({action.status}).",
            current_version=action.version,
            status=action.status,
        )


# --- opening -----------------------------------------------------------------


def action_open(
    *,
    run: Run,
    kind: str,
    cause: str,
    evidence: dict,
    recovery_owner: str,
    seq: int | None = None,
    status: str = ActionStatus.OPEN,
    exhaustion: str = "",
    actor="supervisor",
    attempts: int = 0,
    max_attempts: int | None = None,
) -> RecoveryAction:
    """Open the live action for (task, kind, run), or return the one that is already live.

    The partial unique index settles two supervisors racing to open it.
    """
    existing = RecoveryAction.objects.filter(
        task_id=run.task_id, kind=kind, run=run, status__in=LIVE_ACTION_STATUSES
    ).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            action = RecoveryAction.objects.create(
                org_id=run.org_id,
                task_id=run.task_id,
                run=run,
                kind=kind,
                status=status,
                cause=cause,
                evidence=evidence,
                seq=seq,
                original_owner_id=run.task.agent_id,
                recovery_owner=recovery_owner,
                exhaustion=exhaustion,
                attempts=attempts,
                **({"max_attempts": max(max_attempts, attempts)} if max_attempts is not None else {}),
                # Workspace actions wait for an admin's repair, and a run that cannot be recovered (its tool or
                # subagent is gone, its checkpoint corrupt) waits for Start over or a cancel: neither ages into an
                # exhaustion whose "one more attempt" would be refused. No due time.
                due_at=None
                if kind in c.WORKSPACE_KINDS or cause in c.NOT_RECOVERABLE
                else timezone.now() + action_due(),
            )
            e = action_event(action, "action_opened", actor, status=status, cause=cause, seq=seq)
            event_append(
                org_id=e.org_id, task_id=e.task_id, run_id=e.run_id, kind=e.kind, actor=actor, payload=e.payload
            )
            return action
    except IntegrityError:
        return RecoveryAction.objects.get(task_id=run.task_id, kind=kind, run=run, status__in=LIVE_ACTION_STATUSES)


def blocking_cause(diagnosis) -> str:
    """The one cause an action about this diagnosis is opened with."""
    codes = [r.code for r in diagnosis.reasons]
    if diagnosis.disposition == c.CORRUPT:
        return "corrupt_checkpoint"
    for code in c.UNAVAILABLE:  # recovery unavailable: what remains is start over or cancel
        if code in codes:
            return code
    if diagnosis.disposition == c.EXHAUSTED:
        return codes[0]
    if "unknown_outcome" in codes:
        return "unknown_outcome"
    if "step_failed" in codes:
        return "step_failed"
    return codes[0] if codes else "needs_decision"


def action_open_for(
    run: Run,
    diagnosis,
    *,
    cause: str = "",
    exhaustion: str = "",
    actor="supervisor",
    evidence: dict | None = None,
    attempts: int = 0,
    max_attempts: int | None = None,
):
    """Open (or find) the live action a person settles for `run`, from its diagnosis, inside the caller's
    transaction: an unknown outcome (naming the batch item or nested call), an exhaustion (an admin's),
    or anything else that needs a person. `cause` overrides the diagnosis' cause (`auto_resume_off`, or
    an exhaustion recorded earlier, with `exhaustion` saying which bound, and that action's `evidence` and
    attempts, so the reopened card says the same cause)."""
    evidence = (
        dict(evidence)
        if evidence
        else {
            "disposition": diagnosis.disposition,
            "reasons": [r.as_dict() for r in diagnosis.reasons],
            "run_status": run.status,
            "error_code": run.error_code,
            "error_detail": run.error_detail,
        }
    )
    cause = cause or blocking_cause(diagnosis)
    if cause == "auto_resume_off":
        return action_open(
            run=run, kind=ActionKind.CONTINUATION, cause=cause, evidence=evidence, recovery_owner="role:operator"
        )
    if cause in c.UNAVAILABLE:
        evidence["remaining"] = ["start_over", "cancel"]
    unknown = [r for r in diagnosis.reasons if r.code == "unknown_outcome" and r.seq is not None]
    exhausted = bool(exhaustion) or diagnosis.disposition == c.EXHAUSTED
    if not exhausted and cause == "unknown_outcome" and unknown:
        seq = unknown[0].seq
        step = run.steps.get(seq=seq)
        evidence.update(
            {
                "seq": seq,
                "tool": step.tool,
                "args": step.args,
                "dispatched_at": step.dispatched_at.isoformat() if step.dispatched_at else None,
                "recovery_mode": step.recovery_mode,
            }
        )
        if step.parent_seq is not None:  # a batch item or a subagent's call: say which
            evidence.update({"parent_seq": step.parent_seq, "item": item_position(step.seq, step.parent_seq)})
        kind = ActionKind.UNKNOWN_OUTCOME
    else:
        seq = next((r.seq for r in diagnosis.reasons if r.seq is not None), None)
        kind = ActionKind.CONTINUATION
    return action_open(
        run=run,
        kind=kind,
        cause=cause,
        evidence=evidence,
        seq=seq,
        recovery_owner="role:admin" if exhausted else "role:operator",
        status=ActionStatus.EXHAUSTED if exhausted else ActionStatus.OPEN,
        exhaustion=(exhaustion or cause) if exhausted else "",
        actor=actor,
        attempts=attempts,
        max_attempts=max_attempts,
    )
