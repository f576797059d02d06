"""Task controls (DESIGN §6b): every gate a card names can be lifted from the console.

Each control is one service: it authorizes the acting user (tasks.authz), runs
in one transaction, moves statuses only through the transition tables, and
appends one event with its actor and reason. Ids a caller passes (agents,
dependencies) are resolved under the caller's visibility: what they cannot see
is 404, exactly like what does not exist.
"""

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from recovery.action_log import action_open, action_open_for
from recovery.actions.commands import action_retire
from recovery.actions.continuations import continuation_blocked, continuation_create, source_diagnosis
from recovery.models import LIVE_ACTION_STATUSES, ActionKind, ActionStatus, RecoveryAction
from recovery.rules import classify as c
from recovery.rules.gates import BOUNDS, first_closed_gate
from recovery.selectors import admission_facts, continuation_source
from recovery.words.bounds import bound_hold
from recovery.words.vocabulary import run_status_phrase
from recovery.workspaces import validation as workspaces
from tasks.authz import require_role
from tasks.batches import item_position, parent_of
from tasks.errors import DependencyCycle, GateClosed, Invalid, NeedsDecision, NotEligible, NotFound
from tasks.events import event_append
from tasks.holds import Hold
from tasks.models import (
    LIVE_RUN_STATUSES,
    Agent,
    Message,
    MessageStatus,
    Organization,
    Role,
    Run,
    RunStatus,
    Task,
    TaskStatus,
)
from tasks.selectors import visible_tasks
from tasks.services import _request_stop, actor_label, run_cancel_queued, run_enqueue
from tasks.transitions import MESSAGES, TASKS, NewEvent

MAX_REASON = 500
CLOSED = (TaskStatus.DONE, TaskStatus.CANCELLED)
MAX_DEPENDENCIES = 100


def _task(user, task_id: int, role: str) -> Task:
    """Lock the task for a person who may see it (404 otherwise) and holds `role` (403 otherwise)."""
    task = visible_tasks(user).filter(pk=task_id).select_for_update(of=("self",)).first()
    if task is None:
        raise NotFound(f"No task #{task_id}.")
    require_role(user, task.org_id, role)
    return Task.objects.select_related("agent", "org").get(pk=task.pk)


def _reason(reason, *, required: bool = False) -> str:
    reason = (reason or "").strip() if isinstance(reason, str) else ""
    if required and not reason:
        raise Invalid("Say why: a reason is required.", field="reason")
    if len(reason) > MAX_REASON:
        raise Invalid(f"A reason holds at most {MAX_REASON} characters.", field="reason")
    return reason


def _event(task: Task, kind: str, actor, **payload) -> None:
    event_append(org_id=task.org_id, task_id=task.pk, kind=kind, actor=actor, payload=payload)


def _latest_run(task: Task) -> Run | None:
    return Run.objects.filter(task=task).order_by("-id").first()


# --- owner -------------------------------------------------------------------------


@transaction.atomic
def task_reassign(*, user, task_id: int, agent: str, reason: str = "") -> Task:
    """Give the task to another agent of its organization.

    Refused while a run is executing (stop it first: a run never changes owner
    mid-flight). A queued run of the old owner is cancelled, so nothing starts
    under the wrong owner; live actions opened under the old owner can no longer
    admit (gate `owner_changed`); a continuation under the new owner goes
    through normal admission.
    """
    task = _task(user, task_id, Role.OPERATOR)
    reason = _reason(reason)
    new = Agent.objects.filter(org_id=task.org_id, name=agent).first() if isinstance(agent, str) else None
    if new is None:
        raise NotFound(f"No agent named {agent!r} in this organization.", field="agent")
    if new.pk == task.agent_id:
        return task
    latest = _latest_run(task)
    if latest is not None and latest.status in (RunStatus.RUNNING, RunStatus.STOPPING):
        raise NotEligible(
            f"Run #{latest.pk} is {latest.status} under {task.agent.name}: stop it before reassigning the task.",
            reason="run_live",
            run=latest.pk,
        )
    old = task.agent.name
    Task.objects.filter(pk=task.pk).update(agent=new, updated_at=timezone.now())
    _event(task, "task_reassigned", user, **{"from": old, "to": new.name, "reason": reason})
    if latest is not None and latest.status == RunStatus.QUEUED:
        run_cancel_queued(
            actor=user,
            run_id=latest.pk,
            error_code="owner_changed",
            detail=f"The task moved from {old} to {new.name} before a worker started it.",
        )
        if latest.continues_id is None:
            # Nothing of the task has run yet: its first run waits again, under the new owner.
            task.refresh_from_db()
            run_enqueue(task=task, actor=user, input=latest.input, payload={"reason": f"reassigned to {new.name}"})
    task.refresh_from_db()
    return task


# --- continue now --------------------------------------------------------------------


@dataclass(frozen=True)
class Continued:
    """What Continue now did: queued `run`, or named the `action` that must decide first (not an error:
    opening that action is a change that is kept), with the `gate` that holds it when it is a bound."""

    run: Run | None = None
    action: int | None = None
    detail: str = ""
    seq: int | None = None
    # Set when the workspace hold refused it (the refused run and its workspace action are kept).
    held: GateClosed | None = None
    # Set when a bound refused it (attempts or the chain used up): the gate and who lifts it.
    gate: Hold | None = None

    def refusal(self) -> NeedsDecision | GateClosed:
        if self.held is not None:
            return self.held
        extra = {"action": self.action} | ({"seq": self.seq} if self.seq is not None else {})
        if self.gate is not None:
            return GateClosed(self.gate.detail, gate=self.gate.gate, lifted_by=self.gate.lifted_by, **extra)
        return NeedsDecision(self.detail, **extra)


def _bound(action: RecoveryAction) -> Continued:
    """Continue now refused by an exhausted bound, naming the gate, the action and who lifts it."""
    hold = bound_hold(action)
    return Continued(action=action.pk, detail=hold.detail, seq=action.seq, gate=hold)


def task_continue(*, user, task_id: int, note: str = "") -> Continued:
    """A continuation of the task's last run, through classification and every gate.

    The way forward after a cancelled action. Refused with `needs_decision` and
    the action's id while an action decides how the task continues; when an
    unknown outcome is undecided and no action is live (its action was
    cancelled), a new unknown-outcome action is opened for it and named. A
    failed step of the last run is run again: asking to continue is asking for it.
    A run that succeeded is continued only for follow-ups that wait (it carries them).

    Bounded per chain like automatic recovery: a chain at its bound is refused
    (`chain_exhausted`), and an operation interrupted twice in the chain, or an
    action's attempts used up, is refused with gate `attempts_exhausted` — the
    exhausted action is opened again (when a person had cancelled it) for the one
    grant that gets past it: an admin's one more attempt.

    The workspace is read before the transaction, for its validation to compare.
    """
    with workspaces.read_ahead_for_task(task_id, user):
        return _task_continue(user=user, task_id=task_id, note=note)


@transaction.atomic
def _task_continue(*, user, task_id: int, note: str = "") -> Continued:
    task = _task(user, task_id, Role.OPERATOR)
    note = _reason(note)
    held = workspaces.live_action(task.pk)
    if held is not None:
        raise workspaces.hold_error(held)
    live = RecoveryAction.objects.filter(task=task, status__in=LIVE_ACTION_STATUSES).order_by("id").first()
    if live is not None and live.status == ActionStatus.EXHAUSTED and live.exhaustion in BOUNDS:
        return _bound(live)
    if live is not None:
        return Continued(
            action=live.pk,
            detail=f"Recovery action #{live.pk} decides how this task continues: act on it, or cancel it first.",
        )
    source = continuation_source(task)
    if source is None:
        latest = _latest_run(task)
        if latest is None:
            raise NotEligible(f"Task #{task.pk} has no run to continue.", reason="nothing_to_continue")
        # No run of it ever started (each was cancelled while queued): nothing to reuse, so its plan runs.
        gate = first_closed_gate(admission_facts(task=task, source=latest))
        if gate is not None:
            raise GateClosed(gate.detail, gate=gate.gate, lifted_by=gate.lifted_by)
        run = run_enqueue(task=task, actor=user, input=latest.input, payload={"reason": "continue now"})
        _event(task, "task_continued", user, run=run.pk, continues=None, note=note)
        return Continued(run=run)
    if source.status in LIVE_RUN_STATUSES:
        raise NotEligible(
            f"Run #{source.pk} {run_status_phrase(source.status)}: there is nothing to continue yet.",
            reason="run_live",
        )
    waiting = Message.objects.filter(task=task, status=MessageStatus.WAITING).exists()
    if source.status == RunStatus.SUCCEEDED and not waiting:
        raise NotEligible(f"Run #{source.pk} succeeded: there is nothing to continue.", reason="nothing_to_continue")
    blocked = continuation_blocked(task, source)
    if blocked is not None and blocked.kind == "gate":
        raise GateClosed(blocked.hold.detail, gate=blocked.hold.gate, lifted_by=blocked.hold.lifted_by)
    if blocked is not None and blocked.kind == "corrupt":
        raise NotEligible(
            f"Run #{source.pk} cannot be continued: nothing of its checkpoint can be reused safely. Start over or "
            "close the task.",
            reason="recovery_disabled" if source.recovery_disabled else "corrupt_checkpoint",
        )
    if blocked is not None and blocked.kind == "unavailable":
        reasons = [r for r in blocked.diagnosis.reasons if r.code in c.UNAVAILABLE]
        raise NotEligible(
            f"Recovery of run #{source.pk} is unavailable: {reasons[0].detail} "
            "What remains: start over (a fresh run that reuses nothing) or cancel.",
            reason=reasons[0].code,
            reasons=[r.as_dict() for r in reasons],
        )
    if blocked is not None and blocked.kind == "exhausted":
        source = Run.objects.select_related("task").get(pk=source.pk)
        return _bound(action_open_for(source, blocked.diagnosis, actor=user, **blocked.action_kwargs()))
    if blocked is not None and blocked.kind == "unknown_outcome":
        diagnosis = blocked.diagnosis
        unknown = next(v for v in diagnosis.steps if v.parent_seq is None and v.verdict == c.UNKNOWN_OUTCOME)
        action = _open_decision(source, unknown, diagnosis)
        return Continued(
            action=action.pk,
            seq=unknown.seq,
            detail=f"Step {unknown.seq} ({unknown.tool}) of run #{source.pk} may or may not have happened: "
            f"decide it on recovery action #{action.pk} first.",
        )
    diagnosis = source_diagnosis(source)
    failed = {v.seq for v in diagnosis.steps if v.parent_seq is None and v.verdict == c.REUSE and v.reason == "failed"}
    run = continuation_create(
        source=source,
        actor=user,
        reason=f"continue now by {actor_label(user)}" + (f": {note}" if note else ""),
        rerun=failed,
        rerun_why="continue_now",
        allow_final=True,
    )
    if workspaces.refused(run):
        held = workspaces.refusal_of(run)
        return Continued(action=held.extra["action"], detail=held.detail, held=held)
    _event(task, "task_continued", user, run=run.pk, continues=source.pk, note=note)
    return Continued(run=run)


def _open_decision(source: Run, verdict, diagnosis) -> RecoveryAction:

    # A batch's decision is about its item of unknown outcome (the diagnosis names it), never the whole batch.
    item = next(
        (
            r.seq
            for r in diagnosis.reasons
            if r.code == "unknown_outcome" and r.seq is not None and parent_of(r.seq) == verdict.seq
        ),
        None,
    )
    step = source.steps.get(seq=item) if item else source.steps.get(seq=verdict.seq, parent_seq__isnull=True)
    evidence = {
        "disposition": diagnosis.disposition,
        "reasons": [r.as_dict() for r in diagnosis.reasons],
        "run_status": source.status,
        "seq": step.seq,
        "tool": step.tool,
        "args": step.args,
        "dispatched_at": step.dispatched_at.isoformat() if step.dispatched_at else None,
        "recovery_mode": step.recovery_mode,
    }
    if step.parent_seq is not None:
        evidence.update({"parent_seq": step.parent_seq, "item": item_position(step.seq, step.parent_seq)})
    source = Run.objects.select_related("task").get(pk=source.pk)
    return action_open(
        run=source,
        kind=ActionKind.UNKNOWN_OUTCOME,
        cause="unknown_outcome",
        evidence=evidence,
        seq=step.seq,
        recovery_owner="role:operator",
    )


# --- close and reopen --------------------------------------------------------------------


@transaction.atomic
def task_close(*, user, task_id: int, resolution: str, reason: str) -> Task:
    """Close a task as done or cancelled, with a reason.

    A live run is stopped first (running → stopping; a queued one is cancelled),
    live actions are retired, and follow-ups that wait (or were admitted to a
    run no worker started) are marked "not delivered: task closed" — visible,
    never dropped. Closing a closed task is refused.
    """
    task = _task(user, task_id, Role.OPERATOR)
    if resolution not in CLOSED:
        raise Invalid("`resolution` must be done or cancelled.", field="resolution")
    reason = _reason(reason, required=True)
    if task.status in CLOSED:
        raise NotEligible(f"Task #{task.pk} is already {task.status}.", reason="already_closed")
    now = timezone.now()
    TASKS.move(
        task.pk,
        resolution,
        closed_by=actor_label(user),
        closed_at=now,
        close_reason=reason,
        updated_at=now,
        event=NewEvent("task_closed", user, task.org_id, task.pk, None, {"resolution": resolution, "reason": reason}),
    )
    stopped = []
    for run in Run.objects.select_for_update().filter(task=task, status__in=LIVE_RUN_STATUSES):
        if run.status == RunStatus.RUNNING:
            _request_stop(run, actor=user, reason="closed")
            stopped.append(run.pk)
        elif run.status == RunStatus.QUEUED:
            run_cancel_queued(
                actor=user, run_id=run.pk, error_code="task_closed", detail=f"Task #{task.pk} was closed."
            )
            stopped.append(run.pk)
    for action in RecoveryAction.objects.filter(task=task, status__in=LIVE_ACTION_STATUSES).select_related("task"):
        action_retire(action, reason=f"the task was closed ({resolution})", actor=user)
    undelivered = MESSAGES.move_all(
        Message.objects.filter(task=task, run__isnull=True),
        MessageStatus.NOT_DELIVERED,
        expect=MessageStatus.WAITING,
        waiting_reason="Not delivered: the task was closed.",
    )
    if undelivered:
        _event(task, "messages_not_delivered", user, messages=undelivered, reason="task closed")
    if resolution == TaskStatus.DONE:
        from recovery.workspaces.repairs import repair_task_done

        repair_task_done(task.pk, actor=user)
    task.refresh_from_db()
    return task


@transaction.atomic
def task_reopen(*, user, task_id: int, reason: str) -> Task:
    """A closed task becomes eligible again; retired actions stay retired, nothing restarts by itself."""
    task = _task(user, task_id, Role.OPERATOR)
    reason = _reason(reason, required=True)
    if task.status not in CLOSED:
        raise NotEligible(f"Task #{task.pk} is {task.status}, not closed.", reason="not_closed")
    return reopen_move(task, actor=user, reason=reason)


def reopen_move(task: Task, *, actor, reason: str, **more) -> Task:
    """A closed task back to todo, its close forgotten, with its `task_reopened` event (the caller's transaction,
    the task locked); `more` joins the event's payload."""
    TASKS.move(
        task.pk,
        TaskStatus.TODO,
        expect=task.status,
        closed_by="",
        closed_at=None,
        close_reason="",
        updated_at=timezone.now(),
        event=NewEvent(
            "task_reopened", actor, task.org_id, task.pk, None, {"was": task.status, "reason": reason, **more}
        ),
    )
    task.refresh_from_db()
    return task


# --- budget --------------------------------------------------------------------------------

BUDGET_MAX = 2**62


@transaction.atomic
def task_budget(*, user, task_id: int, limit, reason: str) -> Task:
    """Set, raise or remove (`None`) the budget limit (admin), with a reason.

    A budget hold lifts at once: admission reads the new limit, and a run
    stopped by the budget continues once on the supervisor's next pass. A limit
    at or below what is used asks a running run to stop at its next step.
    """
    task = _task(user, task_id, Role.ADMIN)
    reason = _reason(reason, required=True)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= BUDGET_MAX):
        raise Invalid(f"`limit` must be an integer from 0 to {BUDGET_MAX}, or null to remove it.", field="limit")
    before = task.budget_limit
    if before == limit:
        return task
    Task.objects.filter(pk=task.pk).update(budget_limit=limit, updated_at=timezone.now())
    _event(task, "task_budget_set", user, **{"from": before, "to": limit, "reason": reason})
    task.refresh_from_db()
    if task.budget_exhausted:
        for run in Run.objects.select_for_update().filter(task=task, status=RunStatus.RUNNING):
            _request_stop(run, actor=user, reason="budget")
    return task


# --- dependencies ----------------------------------------------------------------------------


def _ids(values, field: str) -> list[int]:
    if values is None:
        return []
    if not isinstance(values, list) or len(values) > MAX_DEPENDENCIES:
        raise Invalid(f"`{field}` must be a list of at most {MAX_DEPENDENCIES} task ids.", field=field)
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 2**63:
            raise Invalid(f"`{field}` must hold task ids.", field=field)
        out.append(v)
    return out


@transaction.atomic
def task_dependencies(*, user, task_id: int, add=None, remove=None) -> Task:
    """Add or remove tasks this task waits on (operator). Invisible ids are 404; cycles are refused."""
    add, remove = _ids(add, "add"), _ids(remove, "remove")
    if add:
        # The cycle check reads the organization's whole dependency graph: additions in one organization
        # take its row lock first (before any task's), so two opposite additions cannot both pass it.
        org_id = visible_tasks(user).filter(pk=task_id).values_list("org_id", flat=True).first()
        if org_id is not None:
            list(Organization.objects.select_for_update().filter(pk=org_id).values_list("pk", flat=True))
    task = _task(user, task_id, Role.OPERATOR)
    visible = visible_tasks(user).filter(org_id=task.org_id)
    for dep_id in add + remove:
        if not visible.filter(pk=dep_id).exists():
            raise NotFound(f"No task #{dep_id}.", field="dependencies")
    through = Task.dependencies.through
    for dep_id in add:
        if dep_id == task.pk or _reaches(dep_id, task.pk):
            raise DependencyCycle(
                f"Task #{dep_id} already waits on task #{task.pk} (directly or through others): that would be a cycle.",
                dependency=dep_id,
            )
    existing = set(through.objects.filter(from_task_id=task.pk).values_list("to_task_id", flat=True))
    added = [d for d in dict.fromkeys(add) if d not in existing]
    removed = [d for d in dict.fromkeys(remove) if d in existing and d not in added]
    through.objects.bulk_create([through(from_task_id=task.pk, to_task_id=d) for d in added])
    through.objects.filter(from_task_id=task.pk, to_task_id__in=removed).delete()
    if added or removed:
        Task.objects.filter(pk=task.pk).update(updated_at=timezone.now())
        _event(task, "task_dependencies_changed", user, added=added, removed=removed)
    task.refresh_from_db()
    return task


def _reaches(start: int, target: int, limit: int = 10_000) -> bool:
    """Does task `start` wait on `target`, directly or transitively?"""
    through = Task.dependencies.through
    seen, frontier = {start}, [start]
    while frontier and len(seen) < limit:
        nxt = list(
            through.objects.filter(from_task_id__in=frontier)
            .exclude(to_task_id__in=seen)
            .values_list("to_task_id", flat=True)
        )
        if target in nxt:
            return True
        seen.update(nxt)
        frontier = nxt
    return False


__all__ = [
    "ActionStatus",
    "task_budget",
    "task_close",
    "task_continue",
    "task_dependencies",
    "task_reassign",
    "task_reopen",
]
