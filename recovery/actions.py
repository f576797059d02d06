"""Recovery actions and their attempts. Each function is one transaction and appends its events.

Operator writes carry the `version` they saw: a stale one is refused
(`StaleVersion`) and changes nothing. Gates are evaluated at the moment of the
admission, never taken from what a card showed.
"""

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from recovery import classify as c
from recovery.continuations import continuation_create
from recovery.gates import AdmissionFacts, first_closed_gate
from recovery.models import (
    LIVE_ACTION_STATUSES,
    ActionKind,
    ActionStatus,
    AttemptOutcome,
    RecoveryAction,
    RecoveryAttempt,
)
from recovery.selectors import chain_of, diagnose
from tasks.errors import Forbidden, GateClosed, Invalid, NotEligible, NotFound, StaleVersion
from tasks.events import event_append
from tasks.models import LEASED_RUN_STATUSES, Role, Run, RunStatus, Task
from tasks.selectors import membership_in
from tasks.services import run_cancel_queued, task_facts

DECISIONS = ("performed", "not_performed", "unresolved")


def action_due() -> timedelta:
    return timedelta(seconds=getattr(settings, "CONSOLE_ACTION_DUE_SECONDS", 24 * 3600))


def admission_facts(
    *, task: Task, source: Run, action: RecoveryAction | None = None, chain_length: int | None = None
) -> AdmissionFacts:
    lease_live = (
        source.status in LEASED_RUN_STATUSES
        and source.lease_expires_at is not None
        and source.lease_expires_at > timezone.now()
    )
    return AdmissionFacts(
        task=task_facts(task),
        current_owner=task.agent.name,
        original_owner=action.original_owner.name if action else None,
        source_lease_live=lease_live,
        source_run_id=source.pk,
        attempts=action.attempts if action else 0,
        max_attempts=action.max_attempts if action else None,
        chain_length=chain_length if chain_length is not None else len(chain_of(source)),
    )


def current_gate(action: RecoveryAction, *, task_runs: dict[int, Run] | None = None):
    """The gate that would refuse an admission for this action right now, or None.

    With `task_runs` (every run of the task, by id) the chain is measured without queries.
    """
    chain_length = None
    if task_runs is not None and action.run_id in task_runs:
        chain_length, prev = 0, action.run_id
        while prev is not None and prev in task_runs and chain_length < 64:
            chain_length += 1
            prev = task_runs[prev].continues_id
    return first_closed_gate(
        admission_facts(task=action.task, source=action.run, action=action, chain_length=chain_length)
    )


def _event(action: RecoveryAction, kind: str, actor, **payload) -> None:
    event_append(
        org_id=action.org_id,
        task_id=action.task_id,
        run_id=action.run_id,
        kind=kind,
        actor=actor,
        payload={"action": action.pk, "kind": action.kind, "status": action.status, **payload},
    )


def _locked(action_id: int, user) -> RecoveryAction:
    """Lock the action for a person who may see it (404 otherwise, never 403)."""
    from tasks.selectors import visible_tasks

    action = (
        RecoveryAction.objects.select_for_update(of=("self",))
        .select_related("task__agent", "run", "original_owner")
        .filter(pk=action_id, task__in=visible_tasks(user))
        .first()
    )
    if action is None:
        raise NotFound(f"No recovery action #{action_id}.")
    return action


def _authorize(user, action: RecoveryAction, role: str) -> None:
    m = membership_in(user, action.org_id)
    if m is None:
        raise NotFound(f"No recovery action #{action.pk}.")
    if not m.allows(role):
        raise Forbidden(f"This needs the {role} role; you are {m.role}.", required_role=role)


def _check_version(action: RecoveryAction, version) -> None:
    if version != action.version:
        raise StaleVersion(
            f"This card is out of date: the action is now at version {action.version} ({action.status}).",
            current_version=action.version,
            status=action.status,
        )


def _bump(action: RecoveryAction, **fields) -> None:
    fields["version"] = F("version") + 1
    fields["updated_at"] = timezone.now()
    RecoveryAction.objects.filter(pk=action.pk).update(**fields)
    action.refresh_from_db()


def _gate_or_raise(action: RecoveryAction) -> None:
    gate = current_gate(action)
    if gate is not None:
        raise GateClosed(gate.detail, gate=gate.gate, lifted_by=gate.lifted_by)


# --- opening -----------------------------------------------------------------


def action_open(
    *,
    run: Run,
    kind: str,
    cause: str,
    evidence: dict,
    next_action: str,
    recovery_owner: str,
    seq: int | None = None,
    status: str = ActionStatus.OPEN,
    actor="supervisor",
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
                next_action=next_action,
                due_at=timezone.now() + action_due(),
            )
            _event(action, "action_opened", actor, cause=cause, seq=seq)
            return action
    except IntegrityError:
        return RecoveryAction.objects.get(task_id=run.task_id, kind=kind, run=run, status__in=LIVE_ACTION_STATUSES)


# --- operator writes -----------------------------------------------------------


def _admit(action: RecoveryAction, *, user, performed=None, rerun=frozenset(), accepted=False, decision="", note=""):
    """Create the attempt and its continuation; the action goes to `retrying`."""
    number = action.attempts + 1
    run = continuation_create(
        source=action.run,
        actor=user,
        reason=f"action #{action.pk} attempt {number}",
        performed=performed,
        rerun=rerun,
    )
    attempt = RecoveryAttempt.objects.create(
        action=action,
        number=number,
        requested_by=user.username,
        acknowledged_at=timezone.now(),
        continuation_run=run,
        accepted_duplicate_risk=accepted,
        decision=decision,
        note=note,
    )
    _bump(action, status=ActionStatus.RETRYING, attempts=number, gate="", gate_detail="", recovery_owner="")
    _event(action, "action_retry_requested", user, attempt=number, continuation_run=run.pk, decision=decision)
    return attempt


@transaction.atomic
def action_retry(
    *, action_id: int, user, version, accept_duplicate_risk: bool = False, reason: str = ""
) -> RecoveryAttempt:
    """Ask for one more attempt: open → retrying, with its continuation run queued.

    An exhausted action takes an admin granting one more attempt, with a reason.
    An unknown outcome reruns the operation only with the duplicate risk accepted.
    Refused with the first closed gate, a stale version, or no authority.
    """
    action = _locked(action_id, user)
    _authorize(user, action, Role.OPERATOR)
    _check_version(action, version)
    if action.status == ActionStatus.EXHAUSTED:
        _authorize(user, action, Role.ADMIN)
        if not (reason or "").strip():
            raise Invalid("Granting one more attempt needs a reason.", field="reason")
        _bump(action, status=ActionStatus.OPEN, max_attempts=action.attempts + 1)
        _event(action, "action_exhaustion_lifted", user, reason=reason.strip())
    elif action.status != ActionStatus.OPEN:
        raise NotEligible(f"Action #{action.pk} is {action.status}; only an open action can be retried.")
    _refuse_unrecoverable(action)
    unknown, failed = _rerun_sets(action)
    if (unknown or action.kind == ActionKind.UNKNOWN_OUTCOME) and not accept_duplicate_risk:
        raise NotEligible(
            "Rerunning an operation of unknown outcome may do it twice: accept the duplicate risk first.",
            reason="duplicate_risk_not_accepted",
            seq=min(unknown) if unknown else action.seq,
        )
    _gate_or_raise(action)
    return _admit(action, user=user, rerun=unknown | failed, accepted=accept_duplicate_risk)


def _rerun_sets(action: RecoveryAction) -> tuple[set[int], set[int]]:
    """What an explicit retry reruns: operations of unknown outcome, and failed steps."""
    diagnosis = diagnose(action.run)
    top = [v for v in diagnosis.steps if v.parent_seq is None]
    unknown = {v.seq for v in top if v.verdict == c.UNKNOWN_OUTCOME}
    failed = {v.seq for v in top if v.verdict == c.REUSE and v.reason == "failed"}
    return unknown, failed


def _refuse_unrecoverable(action: RecoveryAction) -> None:
    if action.cause in ("corrupt_checkpoint", "checkpoint_too_large"):
        raise NotEligible(
            f"Run #{action.run_id} cannot be continued ({action.cause.replace('_', ' ')}); cancel this action "
            "and start a fresh task.",
            reason=action.cause,
        )


@transaction.atomic
def action_decide(
    *, action_id: int, user, version, outcome: str, note: str = "", accept_duplicate_risk: bool = False
) -> RecoveryAction:
    """Record a person's decision on an operation of unknown outcome.

    performed: the note becomes the step's saved outcome and a continuation
    reusing it is admitted; not_performed: the step reruns in a continuation,
    refused unless the duplicate risk is accepted; unresolved: stays parked.
    """
    action = _locked(action_id, user)
    _authorize(user, action, Role.OPERATOR)
    _check_version(action, version)
    if action.kind != ActionKind.UNKNOWN_OUTCOME:
        raise NotEligible("Only an unknown-outcome action takes a decision.")
    if outcome not in DECISIONS:
        raise Invalid(f"`outcome` must be one of {', '.join(DECISIONS)}.", field="outcome")
    if action.status != ActionStatus.OPEN:
        raise NotEligible(f"Action #{action.pk} is {action.status}; only an open action takes a decision.")
    note = (note or "").strip()
    if outcome == "unresolved":
        _bump(action, resolution_note=note, next_action="Check whether the operation happened, then decide.")
        _event(action, "action_decided", user, outcome=outcome, note=note)
        return action
    if outcome == "not_performed" and not accept_duplicate_risk:
        raise NotEligible(
            "Rerunning the operation may do it twice if it did happen: accept the duplicate risk first.",
            reason="duplicate_risk_not_accepted",
        )
    _gate_or_raise(action)
    if outcome == "performed":
        saved = {"performed": True, "decided_by": user.username, "note": note}
        _admit(action, user=user, performed={action.seq: saved}, decision=outcome, note=note)
    else:
        _admit(action, user=user, rerun={action.seq}, accepted=True, decision=outcome, note=note)
    _event(action, "action_decided", user, outcome=outcome, note=note)
    return action


@transaction.atomic
def action_cancel(*, action_id: int, user, version) -> RecoveryAction:
    """Any live action → cancelled; a continuation still queued for it is cancelled too."""
    action = _locked(action_id, user)
    _authorize(user, action, Role.OPERATOR)
    _check_version(action, version)
    if action.status not in LIVE_ACTION_STATUSES:
        raise NotEligible(f"Action #{action.pk} is {action.status}; there is nothing to cancel.")
    for attempt in action.attempt_history.filter(outcome=AttemptOutcome.REQUESTED):
        if attempt.continuation_run_id:
            if run_cancel_queued(
                actor=user,
                run_id=attempt.continuation_run_id,
                error_code="action_cancelled",
                detail="Its recovery action was cancelled before a worker started it.",
                payload={"action": action.pk},
            ):
                RecoveryAttempt.objects.filter(pk=attempt.pk).update(
                    outcome=AttemptOutcome.REJECTED, rejected_detail="cancelled by an operator"
                )
    _bump(action, status=ActionStatus.CANCELLED, resolution="cancelled", closed_at=timezone.now())
    _event(action, "action_cancelled", user)
    return action


# --- the supervisor and readers -------------------------------------------------


def _stale_reason(action: RecoveryAction) -> str | None:
    if action.status == ActionStatus.RETRYING:
        return None  # its own continuation is the newer run; settling resolves it
    if action.task.status in ("done", "cancelled"):
        return f"task closed ({action.task.status})"
    # Its own continuations (even refused ones) do not supersede it.
    own = RecoveryAttempt.objects.filter(action=action, continuation_run__isnull=False).values("continuation_run")
    newer = (
        Run.objects.filter(task_id=action.task_id, pk__gt=action.run_id)
        .exclude(pk__in=own)
        .values_list("pk", flat=True)
        .first()
    )
    if newer is not None:
        return f"run #{newer} superseded run #{action.run_id}"
    return None


def actions_retire_stale(*, task_id: int) -> list[int]:
    """Retire the task's live actions whose source run is no longer current.

    Called when a card is read: it creates no attempt, no run, no permission.
    """
    retired = []
    live = list(RecoveryAction.objects.filter(task_id=task_id, status__in=LIVE_ACTION_STATUSES).select_related("task"))
    for action in live:
        reason = _stale_reason(action)
        if reason is None:
            continue
        with transaction.atomic():
            updated = RecoveryAction.objects.filter(pk=action.pk, status=action.status, version=action.version).update(
                status=ActionStatus.RETIRED,
                resolution="retired",
                resolution_note=reason,
                version=F("version") + 1,
                closed_at=timezone.now(),
                updated_at=timezone.now(),
            )
            if updated:
                action.refresh_from_db()
                _event(action, "action_retired", "system", reason=reason)
                retired.append(action.pk)
    return retired


def actions_settle(*, now=None) -> dict:
    """One supervisor sweep over live actions.

    retrying → resolved once its continuation run started; retrying → open when
    that run was refused at admission (a gate closed before it was claimed);
    open → exhausted when attempts are used up or the due time passed.
    """
    now = now or timezone.now()
    report = {"resolved": [], "reopened": [], "exhausted": [], "retired": []}
    for action in RecoveryAction.objects.filter(status=ActionStatus.RETRYING).select_related("task__agent", "run"):
        with transaction.atomic():
            action = (
                RecoveryAction.objects.select_for_update(of=("self",))
                .select_related("task__agent", "run", "original_owner")
                .filter(pk=action.pk, status=ActionStatus.RETRYING)
                .first()
            )
            if action is None:
                continue
            attempt = action.attempt_history.order_by("-number").select_related("continuation_run").first()
            run = attempt.continuation_run if attempt else None
            if run is None:
                continue
            if run.started_at is not None:
                RecoveryAttempt.objects.filter(pk=attempt.pk).update(outcome=AttemptOutcome.CONTINUED)
                _bump(action, status=ActionStatus.RESOLVED, resolution="continued", closed_at=now)
                _event(action, "action_resolved", "supervisor", resolution="continued", continuation_run=run.pk)
                report["resolved"].append(action.pk)
                continue
            if run.status != RunStatus.QUEUED:
                # Ended without ever starting (stopped or cancelled while queued): nothing
                # resumed, so the attempt was not admitted and the action is open again.
                detail = f"run #{run.pk} was {run.status} before any worker started it"
                RecoveryAttempt.objects.filter(pk=attempt.pk).update(
                    outcome=AttemptOutcome.REJECTED, rejected_detail=detail
                )
                _bump(action, status=ActionStatus.OPEN, gate="", gate_detail=detail[:300])
                _event(action, "action_admission_refused", "supervisor", detail=detail)
                report["reopened"].append(action.pk)
                continue
            from tasks.holds import task_hold

            hold = task_hold(task_facts(action.task))
            if hold is not None:
                if run_cancel_queued(
                    actor="supervisor",
                    run_id=run.pk,
                    error_code="admission_refused",
                    detail=hold.detail,
                    payload={"gate": hold.gate, "action": action.pk},
                ):
                    RecoveryAttempt.objects.filter(pk=attempt.pk).update(
                        outcome=AttemptOutcome.REJECTED, rejected_gate=hold.gate, rejected_detail=hold.detail
                    )
                    _bump(action, status=ActionStatus.OPEN, gate=hold.gate, gate_detail=hold.detail)
                    _event(action, "action_admission_refused", "supervisor", gate=hold.gate, detail=hold.detail)
                    report["reopened"].append(action.pk)
    for action in RecoveryAction.objects.filter(status=ActionStatus.OPEN).select_related("task"):
        reason = None
        if action.attempts >= action.max_attempts:
            reason = f"all {action.max_attempts} attempts used"
        elif action.due_at and action.due_at <= now:
            reason = f"due at {action.due_at.isoformat()} and nobody acted"
        if reason is None:
            continue
        with transaction.atomic():
            if RecoveryAction.objects.filter(pk=action.pk, status=ActionStatus.OPEN, version=action.version).update(
                status=ActionStatus.EXHAUSTED,
                version=F("version") + 1,
                updated_at=now,
                recovery_owner="role:admin",
                next_action="An admin may grant one more attempt, or an operator cancels.",
            ):
                action.refresh_from_db()
                _event(action, "action_exhausted", "supervisor", reason=reason)
                report["exhausted"].append(action.pk)
    task_ids = set(
        RecoveryAction.objects.filter(status__in=(ActionStatus.OPEN, ActionStatus.EXHAUSTED)).values_list(
            "task_id", flat=True
        )
    )
    for task_id in task_ids:
        report["retired"] += actions_retire_stale(task_id=task_id)
    return report
