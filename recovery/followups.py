"""Saved follow-up messages: written any time, delivered exactly once.

A message waits while the old execution is not verifiably stopped or a hold
applies, and says why. Once the stop is verified and the gates are clear,
exactly one continuation is admitted carrying every waiting message in order
(continuation_create takes them in its own transaction; the one-live-run index
and the one-continuation-per-run key make a second admission impossible).
"""

from django.db import IntegrityError, transaction

from recovery import workspaces
from recovery.models import LIVE_ACTION_STATUSES, RecoveryAction
from tasks.authz import require_role
from tasks.errors import GateClosed, Invalid, NotEligible, TaskClosed
from tasks.events import event_append
from tasks.holds import task_hold
from tasks.models import LIVE_RUN_STATUSES, Message, MessageStatus, Role, Run, Task, refused_at_admission
from tasks.selectors import task_facts

MAX_BODY = 20_000


def waiting_reason(task: Task) -> str:
    """Why a message on `task` cannot be admitted now ("" when it can)."""
    hold = task_hold(task_facts(task))
    if hold is not None:
        return f"Waiting: {hold.detail}"
    held = workspaces.live_action(task.pk)
    if held is not None:
        hold = workspaces.hold_of(held)
        return f"Waiting: workspace hold — {hold.detail} Lifted by {hold.lifted_by}."
    latest = Run.objects.filter(task=task).order_by("-id").first()
    if latest is not None and latest.status in LIVE_RUN_STATUSES:
        if latest.status == "stopping":
            return f"Waiting for run #{latest.pk} to confirm it stopped."
        if latest.status == "queued":
            return f"Waiting for run #{latest.pk} to start; it will carry this message."
        return f"Waiting for run #{latest.pk} to finish or be stopped."
    live = RecoveryAction.objects.filter(task=task, status__in=LIVE_ACTION_STATUSES).first()
    if live is not None:
        if live.status == "retrying":
            return f"Waiting for recovery action #{live.pk}'s continuation to start; it will carry this message."
        return f"Waiting on recovery action #{live.pk}: it needs a decision first."
    return ""


@transaction.atomic
def message_save(*, user, task: Task, body: str) -> Message:
    """Save a person's follow-up on a task. Operators only; it is admitted by the supervisor.

    Refused on a closed (done or cancelled) task: nothing would ever deliver it.
    """
    require_role(user, task.org_id, Role.OPERATOR)
    task = Task.objects.select_for_update().get(pk=task.pk)
    if task.status in ("done", "cancelled"):
        raise TaskClosed(
            f"Task #{task.pk} is {task.status}: a follow-up would never be delivered. Reopen the task first.",
        )
    body = (body or "").strip()
    if not body:
        raise Invalid("A follow-up needs a body.", field="body")
    if len(body) > MAX_BODY:
        raise Invalid(f"A follow-up holds at most {MAX_BODY} characters.", field="body")
    message = Message.objects.create(
        org_id=task.org_id,
        task=task,
        author=user,
        body=body,
        waiting_reason=waiting_reason(task) or "Waiting for admission.",
    )
    event_append(
        org_id=task.org_id,
        task_id=task.pk,
        kind="message_saved",
        actor=user,
        payload={"message": message.pk, "waiting_reason": message.waiting_reason},
    )
    return message


def messages_admit(*, budget=None) -> list[int]:
    """Supervisor duty: admit one continuation for each task whose messages may now go.

    Returns the continuation runs created. A task whose latest run is live, held
    or waiting on an action keeps its messages waiting, with the reason saved.
    """
    created = []
    task_ids = (
        Message.objects.filter(status=MessageStatus.WAITING).values_list("task_id", flat=True).distinct().order_by()
    )
    for task in Task.objects.filter(pk__in=list(task_ids)).select_related("agent"):
        reason = waiting_reason(task)
        if not reason:
            source = Run.objects.filter(task=task).exclude(refused_at_admission()).order_by("-id").first()
            with workspaces.read_ahead_for_task(task.pk, budget=budget) as spent:
                if spent.spent:
                    continue  # the pass's budget for reading workspaces is spent: the next pass admits it
                created_run, reason = _admit_follow_ups(task, source)
            if created_run is not None:
                created.append(created_run)
                continue
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


def _admit_follow_ups(task: Task, source: Run | None) -> tuple[int | None, str]:
    """One continuation carrying the task's waiting messages: (its run, "") or (None, why they still wait)."""
    from recovery.continuations import continuation_create

    try:
        with transaction.atomic():
            run = continuation_create(
                source=source,
                actor="supervisor",
                reason="follow-up",
                rerun=_failed_seqs(source),
                rerun_why="follow-up",
                allow_final=True,
            )
        if not workspaces.refused(run):
            return run.pk, ""
        return None, waiting_reason(task)  # the workspace hold the refusal opened
    except (NotEligible, GateClosed, IntegrityError) as exc:
        return None, _refusal_reason(task, exc)


def _refusal_reason(task: Task, exc: Exception) -> str:
    """Why a continuation could not carry the messages, naming the control that moves it on."""
    if getattr(exc, "extra", {}).get("reason") == "unknown_outcome":
        seq = exc.extra.get("seq")
        return (
            f"Waiting: step {seq} has an unknown outcome that nobody has decided. An operator opens its decision "
            "with Continue now, or starts over, or closes the task."
        )
    reason = f"Waiting: {getattr(exc, 'detail', 'another admission is under way')}"
    return reason if len(reason) <= 200 else reason[:199] + "…"  # the column holds 200


def _failed_seqs(run: Run | None) -> set[int]:
    if run is None:
        return set()
    return set(run.steps.filter(phase="failed", parent_seq__isnull=True).values_list("seq", flat=True))
