"""Saved follow-up messages: written any time, read by the agent exactly once.

A follow-up is delivered by the task's next run: the claim of whatever run of the
task starts next hands it over (`tasks.services.messages_hand_over`), and it is
`read` only once that run acknowledges it. While nothing is due to start, it
waits, and the wait always names the fact that ends it (`followup_wait`, read
from the facts now, never a stored string): a hold and who lifts it, the run
that must end first, the action a person settles, or the supervisor's next pass,
which admits exactly one continuation carrying every waiting follow-up in order
(continuation_create takes them in its own transaction; the one-live-run index and
the one-continuation-per-run key make a second admission impossible). A run that
succeeded while a follow-up waited is continued for it too.
"""

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Max

from recovery.action_log import action_open_for
from recovery.actions.continuations import Blocked, continuation_blocked, continuation_create
from recovery.models import LIVE_ACTION_STATUSES, ActionStatus, RecoveryAction
from recovery.selectors import continuation_source
from recovery.words.followups import followup_refused_text, followup_wait_text
from recovery.workspaces import validation as workspaces
from tasks.authz import require_role
from tasks.errors import GateClosed, Invalid, NotEligible, NotFound, TaskClosed
from tasks.events import event_append
from tasks.holds import Hold, task_hold
from tasks.models import LIVE_RUN_STATUSES, Message, MessageStatus, Role, Run, Task
from tasks.selectors import task_facts, visible_tasks
from tasks.services import run_enqueue
from tasks.transitions import MESSAGES

MAX_BODY = 20_000
CLOSED = ("done", "cancelled")


@dataclass(frozen=True)
class Wait:
    """Why the task's waiting follow-ups wait now, and what ends the wait (`followup_wait_text`).

    `kind`: hold | workspace | run_queued | run_running | run_stopping | action_retrying | action_open |
    action_exhausted | admission (the supervisor admits them on its next pass) | blocked (a person settles a
    question first: `blocked` says which; `cancelled` is an action on the run a person cancelled after the
    newest follow-up was written, so the supervisor does not open it again by itself).
    """

    kind: str
    hold: Hold | None = None
    run: int | None = None
    action: RecoveryAction | None = None
    source: Run | None = None
    blocked: Blocked | None = None
    cancelled: RecoveryAction | None = None

    @property
    def admissible(self) -> bool:
        return self.kind == "admission"

    @property
    def text(self) -> str:
        return followup_wait_text(self)


def followup_wait(task: Task) -> Wait:
    """Why a follow-up on `task` waits, from the facts now (a few queries; only for a task with one waiting)."""
    hold = task_hold(task_facts(task))
    if hold is not None:
        return Wait("hold", hold=hold)
    held = workspaces.live_action(task.pk)
    if held is not None:
        return Wait("workspace", hold=workspaces.hold_of(held), action=held)
    latest = Run.objects.filter(task=task).order_by("-id").first()
    if latest is not None and latest.status in LIVE_RUN_STATUSES:
        return Wait(f"run_{latest.status}", run=latest.pk)
    live = RecoveryAction.objects.filter(task=task, status__in=LIVE_ACTION_STATUSES).order_by("id").first()
    if live is not None:
        return Wait(f"action_{live.status}", action=live)
    source = continuation_source(task)
    if source is None:
        return Wait("admission")  # nothing of it ever ran: its plan is queued again
    blocked = continuation_blocked(task, source)
    if blocked is None:
        return Wait("admission", source=source, run=source.pk)
    return Wait("blocked", source=source, run=source.pk, blocked=blocked, cancelled=_cancelled_since(task, source))


def _cancelled_since(task: Task, source: Run) -> RecoveryAction | None:
    """An action on `source` a person cancelled after the newest waiting follow-up was written: the person
    chose not to settle it that way, so the supervisor does not open it again (their controls remain)."""
    newest = Message.objects.filter(task=task, status=MessageStatus.WAITING).aggregate(at=Max("created_at"))["at"]
    if newest is None:
        return None
    return (
        RecoveryAction.objects.filter(run=source, status=ActionStatus.CANCELLED, closed_at__gt=newest)
        .order_by("-id")
        .first()
    )


def waiting_reason(task: Task) -> str:
    """The sentence a waiting follow-up of `task` shows now."""
    return followup_wait(task).text


@transaction.atomic
def message_save(*, user, task: Task, body: str) -> Message:
    """Save a person's follow-up on a task. Operators only; the task's next run carries it.

    Refused on a closed (done or cancelled) task: nothing would ever deliver it.
    """
    require_role(user, task.org_id, Role.OPERATOR)
    task = Task.objects.select_for_update().get(pk=task.pk)
    if task.status in CLOSED:
        raise TaskClosed(
            f"Task #{task.pk} is {task.status}: a follow-up would never be delivered. Reopen the task first.",
        )
    body = (body or "").strip()
    if not body:
        raise Invalid("A follow-up needs a body.", field="body")
    if len(body) > MAX_BODY:
        raise Invalid(f"A follow-up holds at most {MAX_BODY} characters.", field="body")
    message = Message.objects.create(org_id=task.org_id, task=task, author=user, body=body)
    reason = _stored(waiting_reason(task))
    Message.objects.filter(pk=message.pk).update(waiting_reason=reason)
    message.waiting_reason = reason
    event_append(
        org_id=task.org_id,
        task_id=task.pk,
        kind="message_saved",
        actor=user,
        payload={"message": message.pk, "waiting_reason": message.waiting_reason},
    )
    return message


@transaction.atomic
def messages_deliver(*, user, task_id: int) -> list[int]:
    """Offer again the follow-ups a closing left undelivered, once the task is open again (operator).

    not delivered → waiting: they then go like any waiting follow-up, through normal admission (the task's
    next run carries them). Refused on a closed task; nothing to deliver is a no-op.
    """
    task = visible_tasks(user).filter(pk=task_id).select_for_update(of=("self",)).first()
    if task is None:
        raise NotFound(f"No task #{task_id}.")
    require_role(user, task.org_id, Role.OPERATOR)
    if task.status in CLOSED:
        raise TaskClosed(f"Task #{task.pk} is {task.status}: reopen it first, then deliver its follow-ups.")
    ids = MESSAGES.move_all(
        Message.objects.filter(task=task),
        MessageStatus.WAITING,
        expect=MessageStatus.NOT_DELIVERED,
        run=None,
        waiting_reason="Waiting for admission.",
    )
    if ids:
        event_append(
            org_id=task.org_id, task_id=task.pk, kind="messages_requeued", actor=user, payload={"messages": ids}
        )
    return ids


def messages_admit(*, budget=None) -> list[int]:
    """Supervisor duty: admit one run for each task whose waiting follow-ups may now go.

    Returns the runs created (continuations, or a task's plan queued again when nothing of it ever ran).
    Where a person must settle a question first (an unknown outcome, an exhausted bound, a run that cannot
    be continued), the action that asks them is opened, so the task is in their inbox, unless a person
    cancelled it after the newest follow-up was written. Every wait keeps the reason saved, for the history.
    """
    created = []
    task_ids = (
        Message.objects.filter(status=MessageStatus.WAITING).values_list("task_id", flat=True).distinct().order_by()
    )
    for task in Task.objects.filter(pk__in=list(task_ids)).select_related("agent"):
        wait = followup_wait(task)
        reason = wait.text
        try:
            if wait.admissible:
                # The workspace is read before the transaction, for the continuation's validation to compare.
                with workspaces.read_ahead_for_task(task.pk, budget=budget) as spent:
                    if spent.spent:
                        continue  # the pass's budget for reading workspaces is spent: the next pass admits it
                    with transaction.atomic():
                        run = _admit(task, wait.source)
                if not workspaces.refused(run):
                    created.append(run.pk)
                    continue
                reason = waiting_reason(task)  # the workspace hold the refusal opened
            elif wait.kind == "blocked" and wait.cancelled is None and wait.blocked.kind != "gate":
                with transaction.atomic():
                    source = Run.objects.select_related("task").get(pk=wait.source.pk)
                    action_open_for(source, wait.blocked.diagnosis, **wait.blocked.action_kwargs())
                reason = waiting_reason(task)
        except (NotEligible, GateClosed, IntegrityError) as exc:
            reason = followup_refused_text(getattr(exc, "detail", ""))
        reason = _stored(reason)
        changed = Message.objects.filter(task=task, status=MessageStatus.WAITING).exclude(waiting_reason=reason)
        if changed.update(waiting_reason=reason):
            event_append(
                org_id=task.org_id,
                task_id=task.pk,
                kind="message_waiting",
                actor="supervisor",
                payload={"waiting_reason": reason},
            )
    return created


def _admit(task: Task, source: Run | None) -> Run:
    """The run that carries the waiting follow-ups: a continuation of `source`, or the plan queued again."""
    if source is None:
        latest = Run.objects.filter(task=task).order_by("-id").first()
        return run_enqueue(task=task, actor="supervisor", input=latest.input, payload={"reason": "follow-up"})
    return continuation_create(
        source=source,
        actor="supervisor",
        reason="follow-up",
        rerun=_failed_seqs(source),
        rerun_why="follow-up",
        allow_final=True,
    )


def _stored(reason: str) -> str:
    return reason if len(reason) <= 200 else reason[:199] + "…"  # the column holds 200


def _failed_seqs(run: Run | None) -> set[int]:
    if run is None:
        return set()
    return set(run.steps.filter(phase="failed", parent_seq__isnull=True).values_list("seq", flat=True))
