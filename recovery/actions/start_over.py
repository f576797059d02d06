"""Start over: a fresh run of a task from the beginning of its input, reusing nothing.

Not a recovery. Resuming saved work continues a run (`continues`, saved
results reused); starting over runs the task's original input again from step
1 in a new chain: `continues` is null, `attempt` is 1, no step is carried, and
the old chain is no longer recovered (its live actions are retired, the
supervisor leaves its runs alone). Cancelling ends recovery and undoes
nothing; neither does starting over — which is why it asks the person to
accept the duplicate risk when earlier runs dispatched steps whose recovery
mode is notify (their effects may happen twice).

Follow-up messages still waiting are left waiting: they are admitted the
usual way, after the fresh run ends.
"""

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from recovery.models import LIVE_ACTION_STATUSES, ActionStatus, RecoveryAction
from recovery.rules.gates import AdmissionFacts, first_closed_gate
from recovery.transitions import ACTIONS
from recovery.workspaces.validation import live_action
from tasks.authz import require_role
from tasks.batches import item_position
from tasks.errors import GateClosed, NotEligible, NotFound
from tasks.models import LEASED_RUN_STATUSES, LIVE_RUN_STATUSES, RecoveryMode, Role, Run, Step, Task
from tasks.selectors import task_facts, visible_tasks
from tasks.services import actor_label, run_enqueue

SAMPLE = 20
GROUP_TOOLS = ("foreach", "subagent")


@dataclass(frozen=True)
class DuplicateRisk:
    """Notify-mode steps earlier runs dispatched: running everything again may do them twice."""

    steps: tuple[dict, ...]  # at most SAMPLE, oldest first
    more: bool  # there are more than SAMPLE

    def __bool__(self) -> bool:
        return bool(self.steps)


def duplicate_risk(task_id: int) -> DuplicateRisk:
    """One query. Carried copies (reused results) are not counted twice: only the run that dispatched it."""
    rows = list(
        Step.objects.filter(
            run__task_id=task_id,
            recovery_mode=RecoveryMode.NOTIFY,
            dispatched_at__isnull=False,
            reused_from__isnull=True,
        )
        # A top-level batch or subagent acts through its nested steps, which are listed themselves.
        .exclude(parent_seq__isnull=True, tool__in=GROUP_TOOLS)
        .order_by("run_id", "seq")
        .values("run_id", "seq", "parent_seq", "parent__tool", "tool", "args", "phase")[: SAMPLE + 1]
    )
    steps = tuple(
        {"run": r.pop("run_id"), "where": step_where(r["seq"], r["parent_seq"], r.pop("parent__tool")), **r}
        for r in rows[:SAMPLE]
    )
    return DuplicateRisk(steps=steps, more=len(rows) > SAMPLE)


def step_where(seq: int, parent_seq: int | None, parent_tool: str | None = None) -> str:
    """Pure: "step 3", "item 2 of step 1" (a batch item), "call 2 of step 1" (a subagent's call)."""
    if parent_seq is None:
        return f"step {seq}"
    kind = "item" if parent_tool == "foreach" else "call"
    return f"{kind} {item_position(seq, parent_seq)} of step {parent_seq}"


def _live_run(task: Task) -> Run | None:
    return Run.objects.filter(task=task, status__in=LIVE_RUN_STATUSES).order_by("-id").first()


def refuse_while_held(task: Task, *, what: str) -> None:
    """The refusals a new chain of `task` meets (Start over, Continue from step k), in the caller's transaction:
    GateClosed for a closed gate (a live lease: `lease_live`, a live workspace action: `workspace_hold`, …),
    then NotEligible `run_live` while another run of the task is queued or running."""
    live = _live_run(task)
    lease_live = (
        live is not None
        and live.status in LEASED_RUN_STATUSES
        and live.lease_expires_at is not None
        and live.lease_expires_at > timezone.now()
    )
    # A live workspace action holds a fresh start too: the plan would run again over files an admin has not
    # repaired yet (a reissue gives it a clean directory, the old one kept).
    held = live_action(task.pk)
    gate = first_closed_gate(
        AdmissionFacts(
            task=task_facts(task),
            current_owner=task.agent.name,
            source_lease_live=lease_live,
            source_run_id=live.pk if live else None,
            workspace_action=held.pk if held else None,
            workspace_kind=held.kind if held else "",
        )
    )
    if gate is not None:
        raise GateClosed(gate.detail, gate=gate.gate, lifted_by=gate.lifted_by)
    if live is not None:
        raise NotEligible(
            f"Run #{live.pk} of this task is {live.status}; {what} once it has ended (or stop it first).",
            reason="run_live",
            run=live.pk,
        )


@transaction.atomic
def task_start_over(*, task_id: int, user, accept_duplicate_risk: bool = False) -> Run:
    """Queue a fresh run of the task from the beginning of its input; it reuses nothing.

    Needs the operator role (404 for a task the user cannot see). Refused with
    409 `gate_closed` while a gate holds the task (closed, paused, budget,
    dependency, a live workspace action: `workspace_hold`) or a run of it
    still holds a live lease (`lease_live`); with
    `not_eligible` (`reason: run_live`) while another run of it is queued or
    running; and with `not_eligible` (`reason: duplicate_risk_not_accepted`,
    `steps`) when earlier runs dispatched notify-mode steps and the risk of
    doing them twice was not accepted. Live recovery actions of the task are
    retired, saying why. One event (`run_queued`, with `fresh_start`).
    """
    found = visible_tasks(user).filter(pk=task_id).values_list("org_id", flat=True).first()
    if found is None:
        raise NotFound(f"No task #{task_id}.")
    require_role(user, found, Role.OPERATOR, what=f"No task #{task_id}.")
    # The lock serializes two people starting the same task over; the partial
    # unique index on live runs settles anything else.
    task = Task.objects.select_for_update(of=("self",)).select_related("agent").get(pk=task_id)
    refuse_while_held(task, what="start over")
    first = Run.objects.filter(task=task).order_by("id").first()
    if first is None:
        raise NotEligible(f"Task #{task.pk} has no input to start from.")
    risk = duplicate_risk(task.pk)
    if risk and not accept_duplicate_risk:
        raise NotEligible(
            "Earlier runs of this task dispatched steps whose effects may happen twice if everything runs again "
            f"({_risk_text(risk)}): accept the duplicate risk to start over.",
            reason="duplicate_risk_not_accepted",
            steps=list(risk.steps),
            more=risk.more,
        )
    previous = Run.objects.filter(task=task).order_by("-id").first()
    retiring = live_action_ids(task)
    who = actor_label(user)
    run = run_enqueue(
        task=task,
        actor=user,
        input=first.input,
        carry={"fresh_start": {"by": who, "after": previous.pk}},
        payload={
            "fresh_start": True,
            "previous_run": previous.pk,
            "reuses": "nothing",
            "retired_actions": retiring,
            "accepted_duplicate_risk": bool(accept_duplicate_risk),
            "notify_steps": [{"run": s["run"], "seq": s["seq"], "tool": s["tool"]} for s in risk.steps],
        },
    )
    # Retired inside this transaction; the run_queued event above names them (one event).
    retire_actions(retiring, note=f"the task was started over by {who} in run #{run.pk}")
    return run


def live_action_ids(task: Task) -> list[int]:
    """The task's live recovery actions, locked: a new chain retires them."""
    return list(
        RecoveryAction.objects.select_for_update(of=("self",))
        .filter(task=task, status__in=LIVE_ACTION_STATUSES)
        .order_by("id")
        .values_list("pk", flat=True)
    )


def retire_actions(ids: list[int], *, note: str) -> None:
    if not ids:
        return
    now = timezone.now()
    ACTIONS.move_all(
        RecoveryAction.objects.filter(pk__in=ids),
        ActionStatus.RETIRED,
        resolution="retired",
        resolution_note=note,
        closed_at=now,
        updated_at=now,
    )


def _risk_text(risk: DuplicateRisk) -> str:
    named = ", ".join(f"{s['tool']} in run #{s['run']} {s['where']}" for s in risk.steps[:3])
    rest = len(risk.steps) - 3
    if risk.more:
        return f"{named} and more"
    return f"{named} and {rest} more" if rest > 0 else named
