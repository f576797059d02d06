"""Settle recovery records in the transaction of the fact that settles them (DESIGN §6a).

Registered with `tasks.lifecycle` when the app is ready. The claim that starts a
continuation resolves its action (`continued`); the end of that run records the
attempt's real outcome; a continuation that ended before any worker started it
(cancelled, stopped while queued) was not admitted, so its action is open again
and says why. There is no window in which a finished task shows a retry in flight.
"""

from recovery.action_log import action_open
from recovery.models import ActionKind, ActionStatus, AttemptOutcome, RecoveryAttempt
from recovery.transitions import ACTIONS, ATTEMPTS
from tasks.models import Run, RunStatus
from tasks.services import awaits_validation
from tasks.transitions import NewEvent

ENDED = {
    RunStatus.SUCCEEDED: AttemptOutcome.SUCCEEDED,
    RunStatus.FAILED: AttemptOutcome.FAILED,
    RunStatus.INTERRUPTED: AttemptOutcome.INTERRUPTED,
    RunStatus.STOPPED: AttemptOutcome.STOPPED,
}


def _attempt_of(run: Run) -> RecoveryAttempt | None:
    return RecoveryAttempt.objects.filter(continuation_run_id=run.pk).select_related("action").first()


def on_run_started(run: Run) -> None:
    if run.continues_id is None:
        return  # attempts create continuations: a run that continues nothing settles no attempt
    attempt = _attempt_of(run)
    if attempt is None:
        return
    ATTEMPTS.move(attempt.pk, AttemptOutcome.CONTINUED, strict=False)
    action = attempt.action
    ACTIONS.move(
        action.pk,
        ActionStatus.RESOLVED,
        expect=ActionStatus.RETRYING,
        strict=False,
        resolution="continued",
        closed_at=run.started_at,
        updated_at=run.started_at,
        event=NewEvent(
            "action_resolved",
            "system",
            action.org_id,
            action.task_id,
            action.run_id,
            {"action": action.pk, "kind": action.kind, "resolution": "continued", "continuation_run": run.pk},
        ),
    )


def on_run_ended(run: Run) -> None:
    if run.status == RunStatus.FAILED and run.error_code == "diverged" and run.diverged:
        _open_diverged(run)
    if run.status == RunStatus.SUCCEEDED:
        from recovery.workspaces.repairs import repair_task_done

        # A repair task that succeeded hands its workspace action back to the return owner.
        repair_task_done(run.task_id)
    attempt = _attempt_of(run)
    if attempt is None:
        return
    if run.started_at is not None and not awaits_validation(run):
        ATTEMPTS.move(attempt.pk, ENDED.get(run.status, AttemptOutcome.FAILED), strict=False)
        return
    # Never started, or claimed by the worker holding its workspace and ended before that worker's check
    # admitted it (its lease lapsed first): the attempt was not admitted, and its action is open again.
    detail = run.error_detail or (
        f"run #{run.pk} was {run.status} before any worker started it"
        if run.started_at is None
        else f"run #{run.pk} was {run.status} before its worker checked the workspace"
    )
    ATTEMPTS.move(attempt.pk, AttemptOutcome.REJECTED, strict=False, rejected_detail=detail[:300])
    action = attempt.action
    ACTIONS.move(
        action.pk,
        ActionStatus.OPEN,
        expect=ActionStatus.RETRYING,
        strict=False,
        gate_detail=detail[:300],
        recovery_owner="role:operator",
        updated_at=run.finished_at,
        event=NewEvent(
            "action_admission_refused",
            "system",
            action.org_id,
            action.task_id,
            action.run_id,
            {"action": action.pk, "kind": action.kind, "continuation_run": run.pk, "detail": detail},
        ),
    )


def _open_diverged(run: Run) -> None:
    """An agent run that took another path on replay: a `diverged` action, in the finish's transaction.

    Its evidence carries both calls of the step; what remains is Start over or a cancel (never a resume).
    """

    d = run.diverged
    seq = d.get("seq")
    detail = (
        f"Step {seq} was saved as {d['saved']['tool']}; on replay the agent asked for {d['asked']['tool']}"
        + (" with other arguments" if d["saved"]["tool"] == d["asked"]["tool"] else "")
        + ". Nothing of the new path ran."
    )
    action_open(
        run=run,
        kind=ActionKind.DIVERGED,
        cause="diverged",
        seq=seq,
        evidence={
            "seq": seq,
            "saved": d["saved"],
            "asked": d["asked"],
            "reasons": [{"code": "diverged", "detail": detail, "seq": seq}],
            "run_status": run.status,
            "error_code": run.error_code,
            "error_detail": run.error_detail,
            "remaining": ["start_over", "cancel"],
        },
        recovery_owner="role:operator",
        actor="system",
    )


def register() -> None:
    from tasks import lifecycle

    lifecycle.on_started(on_run_started)
    lifecycle.on_ended(on_run_ended)
