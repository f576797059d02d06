"""Recovery actions and their attempts. Each function is one transaction and appends one event.

Operator writes carry the `version` they saw: a stale one is refused
(`StaleVersion`) and changes nothing. Gates are evaluated at the moment of the
admission, never taken from what a card showed. Status moves go through the
table in `recovery.transitions`; an action is settled by the fact that settles
it, in that fact's transaction (`recovery.settle`), not by a later sweep.
"""

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from recovery.action_log import (
    action_check_version,
    action_event,
    action_locked,
    action_move,
)
from recovery.continuations import continuation_create
from recovery.models import (
    LIVE_ACTION_STATUSES,
    ActionKind,
    ActionStatus,
    AttemptOutcome,
    RecoveryAction,
    RecoveryAttempt,
)
from recovery.rules import classify as c
from recovery.selectors import current_gate, diagnose
from recovery.workspaces import validation as workspaces
from tasks.authz import require_role
from tasks.errors import GateClosed, Invalid, NotEligible, StaleVersion
from tasks.events import event_append
from tasks.models import Role, Run, RunKind, UnknownOutcome, refused_at_admission
from tasks.services import actor_label, run_cancel_queued

DECISIONS = ("performed", "not_performed", "unresolved", "agent_verifies")
AGENT_VERIFIES = "agent_verifies"
MAX_NOTE = 5_000


def _gate_or_raise(action: RecoveryAction) -> None:
    gate = current_gate(action)
    if gate is not None:
        raise GateClosed(gate.detail, gate=gate.gate, lifted_by=gate.lifted_by)


def _note(note) -> str:
    note = (note or "").strip()
    if len(note) > MAX_NOTE:
        raise Invalid(f"A note holds at most {MAX_NOTE} characters.", field="note")
    return note


# --- operator writes -----------------------------------------------------------


def _admit(
    action: RecoveryAction,
    *,
    user,
    kind: str,
    payload: dict,
    performed=None,
    rerun=frozenset(),
    accepted=False,
    attempt_decision="",
    note="",
    notices=None,
    **fields,
) -> RecoveryAttempt:
    """Create the attempt and its continuation; the action moves to `retrying` with one event.

    `fields` are further columns of the action to set in the same move. When the
    workspace no longer matches its manifest, nothing is attempted: the refused
    run and its workspace action are kept, and `WorkspaceHeld` is returned for
    the caller to raise once this transaction has committed.
    """
    number = action.attempts + 1
    run = continuation_create(
        source=action.run,
        actor=user,
        reason=f"action #{action.pk} attempt {number}",
        performed=performed,
        rerun=rerun,
        rerun_why="decided" if attempt_decision else "retry",
        notices=notices,
    )
    if workspaces.refused(run):
        return workspaces.refusal_of(run)
    now = timezone.now()
    attempt = RecoveryAttempt.objects.create(
        action=action,
        number=number,
        requested_by=actor_label(user),
        requested_at=now,
        acknowledged_at=now,  # the request and its acknowledgement are this one transaction
        continuation_run=run,
        accepted_duplicate_risk=accepted,
        decision=attempt_decision,
        note=note,
    )
    fields.setdefault("recovery_owner", "")
    action_move(
        action,
        ActionStatus.RETRYING,
        actor=user,
        kind=kind,
        payload={"attempt": number, "continuation_run": run.pk, **payload},
        attempts=number,
        gate="",
        gate_detail="",
        **fields,
    )
    return attempt


def _after_commit(result):
    """Raise a workspace refusal only once the transaction that saved its evidence has committed."""
    if isinstance(result, workspaces.WorkspaceHeld):
        raise result
    return result


def action_retry(
    *, action_id: int, user, version, accept_duplicate_risk: bool = False, reason: str = ""
) -> RecoveryAttempt:
    """Ask for one more attempt: open → retrying, with its continuation run queued.

    An exhausted action takes an admin granting one more attempt, with a reason
    (exhausted → retrying in the same step). An unknown outcome reruns the
    operation only with the duplicate risk accepted. Refused with the first
    closed gate, a stale version, or no authority; `WorkspaceHeld` (409
    gate_closed `workspace_hold`) when the workspace differs from its manifest —
    raised after the refused run and its workspace action were saved.
    """
    with workspaces.read_ahead_for_action(action_id, user):
        done = _action_retry(
            action_id=action_id, user=user, version=version, accept_duplicate_risk=accept_duplicate_risk, reason=reason
        )
    return _after_commit(done)


@transaction.atomic
def _action_retry(*, action_id: int, user, version, accept_duplicate_risk: bool, reason: str):
    action = action_locked(action_id, user)
    require_role(user, action.org_id, Role.OPERATOR)
    action_check_version(action, version)
    payload, fields = {}, {}
    if action.status == ActionStatus.EXHAUSTED:
        require_role(user, action.org_id, Role.ADMIN)
        reason = (reason or "").strip()
        if not reason:
            raise Invalid("Granting one more attempt needs a reason.", field="reason")
        if len(reason) > MAX_NOTE:
            raise Invalid(f"A reason holds at most {MAX_NOTE} characters.", field="reason")
        payload["granted"] = reason
        fields = {"max_attempts": action.attempts + 1, "exhaustion": ""}
        # The grant lifts the bound it is about; every other gate still applies.
        action.max_attempts = action.attempts + 1
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
    return _admit(
        action,
        user=user,
        kind="action_retry_requested",
        payload=payload,
        rerun=unknown | failed,
        accepted=accept_duplicate_risk,
        **fields,
    )


def _rerun_sets(action: RecoveryAction) -> tuple[set[int], set[int]]:
    """What an explicit retry reruns: operations of unknown outcome, and failed steps."""
    diagnosis = diagnose(action.run)
    top = [v for v in diagnosis.steps if v.parent_seq is None]
    unknown = {v.seq for v in top if v.verdict == c.UNKNOWN_OUTCOME}
    failed = {v.seq for v in top if v.verdict == c.REUSE and v.reason == "failed"}
    return unknown, failed


def _refuse_unrecoverable(action: RecoveryAction) -> None:
    if action.cause in c.NOT_RECOVERABLE:
        raise NotEligible(
            f"Run #{action.run_id} cannot be continued ({action.cause.replace('_', ' ')}): nothing of it can be "
            "reused safely. Cancel this action, then start over or close the task.",
            reason=action.cause,
        )


def action_decide(
    *, action_id: int, user, version, outcome: str, note: str = "", accept_duplicate_risk: bool = False
) -> RecoveryAction:
    """Record a person's decision on an operation of unknown outcome.

    performed: the person's statement is carried for the step (no saved result
    exists) and a continuation that does not run it again is admitted (an agent run's agent gets it as a
    notice, with the note); agent_verifies (agent runs only, else `invalid`): a continuation is admitted in
    which the agent gets a notice for every step of unknown outcome of the run — nothing runs it again by
    itself; the agent checks and may ask for it again as a new step;
    not_performed: the step reruns in a continuation, refused unless the
    duplicate risk is accepted; unresolved: recorded (who, when, note) and the
    action stays open for a decision later. A continuation refused by workspace
    validation records no decision (`WorkspaceHeld`, after its evidence committed).
    """
    with workspaces.read_ahead_for_action(action_id, user):
        done = _action_decide(
            action_id=action_id,
            user=user,
            version=version,
            outcome=outcome,
            note=note,
            accept_duplicate_risk=accept_duplicate_risk,
        )
    return _after_commit(done)


@transaction.atomic
def _action_decide(*, action_id: int, user, version, outcome: str, note: str, accept_duplicate_risk: bool):
    action = action_locked(action_id, user)
    require_role(user, action.org_id, Role.OPERATOR)
    action_check_version(action, version)
    if action.kind != ActionKind.UNKNOWN_OUTCOME:
        raise NotEligible("Only an unknown-outcome action takes a decision.")
    if outcome not in DECISIONS:
        raise Invalid(f"`outcome` must be one of {', '.join(DECISIONS)}.", field="outcome")
    if outcome == AGENT_VERIFIES and action.run.kind != RunKind.AGENT:
        raise Invalid(
            "Only an agent run's agent can verify a step itself; a scripted plan takes performed, not performed or "
            "unresolved.",
            field="outcome",
        )
    if action.status != ActionStatus.OPEN:
        raise NotEligible(f"Action #{action.pk} is {action.status}; only an open action takes a decision.")
    note = _note(note)
    now = timezone.now()
    if outcome == "unresolved":
        decided = {"decision": outcome, "decided_by": actor_label(user), "decided_at": now, "decision_note": note}
        updated = RecoveryAction.objects.filter(pk=action.pk, version=action.version).update(
            version=F("version") + 1, updated_at=now, **decided
        )
        if updated != 1:
            raise StaleVersion(f"Action #{action.pk} changed meanwhile.", current_version=action.version + 1)
        e = action_event(action, "action_decided", user, status=action.status, outcome=outcome, note=note)
        event_append(org_id=e.org_id, task_id=e.task_id, run_id=e.run_id, kind=e.kind, actor=user, payload=e.payload)
        action.refresh_from_db()
        return action
    if outcome == "not_performed" and not accept_duplicate_risk:
        raise NotEligible(
            "Rerunning the operation may do it twice if it did happen: accept the duplicate risk first.",
            reason="duplicate_risk_not_accepted",
        )
    _gate_or_raise(action)
    decided = {"decision": outcome, "decided_by": actor_label(user), "decided_at": now, "decision_note": note}
    common = {"kind": "action_decided", "payload": {"outcome": outcome, "note": note}, "note": note}
    if outcome == AGENT_VERIFIES:
        handed = _handed(action, decided_by=actor_label(user), at=now, note=note)
        done = _admit(action, user=user, notices=handed, attempt_decision=outcome, **common, **decided)
    elif outcome == "performed":
        declared = {"performed": True, "decided_by": actor_label(user), "note": note, "at": now.isoformat()}
        done = _admit(
            action, user=user, performed={action.seq: declared}, attempt_decision=outcome, **common, **decided
        )
    else:
        done = _admit(
            action, user=user, rerun={action.seq}, accepted=True, attempt_decision=outcome, **common, **decided
        )
    return done if isinstance(done, workspaces.WorkspaceHeld) else action


def _handed(action: RecoveryAction, *, decided_by: str | None, at, note: str) -> dict[int, dict]:
    """Every step of unknown outcome of the action's run, handed to the agent to verify (seq → its notice)."""
    diagnosis = diagnose(action.run)
    seqs = {v.seq for v in diagnosis.steps if v.verdict == c.UNKNOWN_OUTCOME} | {action.seq}
    said = {"decision": AGENT_VERIFIES, "decided_by": decided_by, "decided_at": at.isoformat(), "note": note}
    return {seq: dict(said) for seq in sorted(s for s in seqs if s is not None)}


def action_hand_to_agent(*, action_id: int) -> RecoveryAction | None:
    """The agent's `tell_agent` setting: its unknown outcome goes to the agent to verify, with no person.

    For an open unknown-outcome action of an agent run whose agent has that setting and nobody decided yet:
    a continuation is admitted as with a person's `agent_verifies` decision (`decided_by` empty), one
    attempt, one `action_decided` event by the supervisor. Returns None (nothing done) when the action is no
    longer such, a gate holds it (the next supervisor pass tries again), or the workspace holds it.
    """
    try:
        with transaction.atomic():
            action = (
                RecoveryAction.objects.select_for_update(of=("self",))
                .select_related("task__agent", "run__agent__profile", "original_owner")
                .filter(pk=action_id, kind=ActionKind.UNKNOWN_OUTCOME, status=ActionStatus.OPEN, decision="")
                .first()
            )
            if action is None or not hands_to_agent(action.run):
                return None
            if current_gate(action) is not None:
                return None
            now = timezone.now()
            fields = {"decision": AGENT_VERIFIES, "decided_by": "", "decided_at": now, "decision_note": ""}
            done = _admit(
                action,
                user="supervisor",
                notices=_handed(action, decided_by=None, at=now, note=""),
                attempt_decision=AGENT_VERIFIES,
                kind="action_decided",
                payload={"outcome": AGENT_VERIFIES, "note": "", "by_setting": "tell_agent"},
                **fields,
            )
            if isinstance(done, workspaces.WorkspaceHeld):
                return None
            return action
    except (NotEligible, GateClosed, StaleVersion, IntegrityError):
        return None


def hands_to_agent(run: Run) -> bool:
    """An agent run whose agent's setting hands every unknown outcome to the agent (`tell_agent`)."""
    profile = getattr(run.agent, "profile", None)
    return run.kind == RunKind.AGENT and profile is not None and profile.unknown_outcome == UnknownOutcome.TELL_AGENT


def handovers_run() -> list[int]:
    """Hand over every open, undecided unknown outcome whose agent's setting says `tell_agent` (one pass)."""
    pending = RecoveryAction.objects.filter(
        kind=ActionKind.UNKNOWN_OUTCOME,
        status=ActionStatus.OPEN,
        decision="",
        run__kind=RunKind.AGENT,
        run__agent__profile__unknown_outcome=UnknownOutcome.TELL_AGENT,
    ).values_list("pk", flat=True)[:200]
    return [pk for pk in pending if action_hand_to_agent(action_id=pk) is not None]


@transaction.atomic
def action_cancel(*, action_id: int, user, version) -> RecoveryAction:
    """Any live action → cancelled; a continuation still queued for it is cancelled too.

    Nothing is undone and nothing is retried; the task's next move is its own
    controls (continue now, start over, close).
    """
    action = action_locked(action_id, user)
    require_role(user, action.org_id, Role.OPERATOR)
    action_check_version(action, version)
    if action.status not in LIVE_ACTION_STATUSES:
        raise NotEligible(f"Action #{action.pk} is {action.status}; there is nothing to cancel.")
    queued = [
        a.continuation_run_id
        for a in action.attempt_history.filter(outcome=AttemptOutcome.REQUESTED)
        if a.continuation_run_id
    ]
    now = timezone.now()
    action_move(
        action,
        ActionStatus.CANCELLED,
        actor=user,
        kind="action_cancelled",
        payload={"cancelled_runs": queued},
        resolution="cancelled",
        closed_at=now,
        closed_by=actor_label(user),
    )
    for run_id in queued:
        run_cancel_queued(
            actor=user,
            run_id=run_id,
            error_code="action_cancelled",
            detail=f"Its recovery action #{action.pk} was cancelled before a worker started it.",
            payload={"action": action.pk},
        )
    return action


# --- the supervisor and readers -------------------------------------------------


def _stale_reason(action: RecoveryAction) -> str | None:
    if action.status == ActionStatus.RETRYING:
        return None  # its own continuation is the newer run; its start settles it
    if action.task.status in ("done", "cancelled"):
        if action.kind == ActionKind.WORKSPACE_EXPORT and action.task.status == "done" and not action.task.closed_by:
            return None  # done by its run's success, which is what it exports
        return f"the task was closed ({action.task.status})"
    # Its own continuations (even refused ones) do not supersede it; nor does a run the workspace
    # validation refused before it started.
    own = RecoveryAttempt.objects.filter(action=action, continuation_run__isnull=False).values("continuation_run")
    newer = (
        Run.objects.filter(task_id=action.task_id, pk__gt=action.run_id)
        .exclude(pk__in=own)
        .exclude(refused_at_admission())
        .values_list("pk", flat=True)
        .first()
    )
    if newer is not None:
        return f"run #{newer} superseded run #{action.run_id}"
    return None


def action_retire(action: RecoveryAction, *, reason: str, actor="system") -> bool:
    """Any live → retired, inside the caller's transaction. False if it changed meanwhile."""
    try:
        action_move(
            action,
            ActionStatus.RETIRED,
            actor=actor,
            kind="action_retired",
            payload={"reason": reason},
            resolution="retired",
            resolution_note=reason,
            closed_at=timezone.now(),
        )
    except StaleVersion:
        return False
    return True


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
            if action_retire(action, reason=reason):
                retired.append(action.pk)
    return retired


def actions_settle(*, now=None) -> dict:
    """One supervisor sweep over live actions.

    retrying → open when its queued continuation is held by a gate that closed
    after the retry was accepted (the queued run is cancelled, and the card says
    which gate); open → exhausted when attempts are used up or the due time
    passed; stale actions are retired. Starting and ending continuations settle
    their actions in their own transactions (recovery.settle), not here.
    """
    from tasks.holds import task_hold
    from tasks.selectors import task_facts

    now = now or timezone.now()
    report = {"reopened": [], "exhausted": [], "retired": []}
    retrying = RecoveryAction.objects.filter(status=ActionStatus.RETRYING).select_related("task__agent", "run")
    for action in retrying:
        attempt = action.attempt_history.order_by("-number").select_related("continuation_run").first()
        run = attempt.continuation_run if attempt else None
        if run is None or run.status != "queued":
            continue
        hold = task_hold(task_facts(action.task))
        if hold is None:
            continue
        with transaction.atomic():
            # Cancelling the queued run settles the action (recovery.settle); the gate is noted on both.
            if run_cancel_queued(
                actor="supervisor",
                run_id=run.pk,
                error_code="admission_refused",
                detail=hold.detail,
                payload={"gate": hold.gate, "action": action.pk},
            ):
                RecoveryAttempt.objects.filter(pk=attempt.pk).update(rejected_gate=hold.gate)
                RecoveryAction.objects.filter(pk=action.pk).update(gate=hold.gate)
                report["reopened"].append(action.pk)
    # Workspace actions wait for an admin's repair: there is no attempt to use up and no automatic path.
    openings = RecoveryAction.objects.filter(status=ActionStatus.OPEN).exclude(kind__in=c.WORKSPACE_KINDS)
    for action in openings.select_related("task"):
        exhaustion = None
        if action.attempts >= action.max_attempts:
            exhaustion = "attempts_used"
        elif action.due_at and action.due_at <= now:
            exhaustion = "overdue"
        if exhaustion is None:
            continue
        with transaction.atomic():
            try:
                action_move(
                    action,
                    ActionStatus.EXHAUSTED,
                    actor="supervisor",
                    kind="action_exhausted",
                    payload={"exhaustion": exhaustion},
                    recovery_owner="role:admin",
                    exhaustion=exhaustion,
                )
            except StaleVersion:
                continue
            report["exhausted"].append(action.pk)
    task_ids = set(
        RecoveryAction.objects.filter(status__in=(ActionStatus.OPEN, ActionStatus.EXHAUSTED)).values_list(
            "task_id", flat=True
        )
    )
    for task_id in task_ids:
        report["retired"] += actions_retire_stale(task_id=task_id)
    return report
